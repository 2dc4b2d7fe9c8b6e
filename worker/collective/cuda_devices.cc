// visible_cuda_devices() of gpu_assignment.h, for builds with CUDA.
#include <cuda_runtime.h>

#include "common/observe/gpu_presence.h"
#include "worker/collective/gpu_assignment.h"

namespace pstrain {

int visible_cuda_devices(std::string* why_not) {
  if (const GpuPresence gpus = probe_gpu_presence(); !gpus.driver) {  // no CUDA start-up where there is no driver
    if (why_not != nullptr) *why_not = gpus.detail;
    return 0;
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why_not != nullptr) *why_not = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    return 0;
  }
  if (count == 0 && why_not != nullptr) *why_not = "no CUDA device";
  return count;
}

}  // namespace pstrain
