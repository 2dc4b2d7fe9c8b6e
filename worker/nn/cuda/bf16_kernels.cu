#include <cstdint>

#include "common/base/errors.h"
#include "worker/nn/cuda/bf16_convert.h"
#include "worker/nn/cuda/cuda_backend.h"
#include "worker/nn/cuda/cuda_check.h"
#include "worker/nn/cuda/launch_config.cuh"

namespace pstrain::nn::cuda {

namespace {

// common/base/bfloat16.h's to_bfloat16, on the device.
__device__ inline std::uint16_t narrow_one(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  const std::uint32_t round = 0x7fffu + ((bits >> 16) & 1u);  // ties to even
  return static_cast<std::uint16_t>((bits + round) >> 16);
}

__global__ void narrow_kernel(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = global_thread_index(); i < n; i += grid_stride()) dst[i] = narrow_one(src[i]);
}

__global__ void widen_kernel(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = global_thread_index(); i < n; i += grid_stride()) {
    dst[i] = __uint_as_float(static_cast<std::uint32_t>(src[i]) << 16);
  }
}

CudaBackend& cuda_of(Backend& backend, const char* op) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) throw ComputeError(std::string(op) + ": backend " + backend.name() + " is not CUDA");
  check_cuda(cudaSetDevice(cuda->device_index()), std::string(op) + ": cudaSetDevice");
  return *cuda;
}

}  // namespace

void narrow_to_bfloat16(Backend& backend, const float* src, std::uint16_t* dst, std::size_t num_elems) {
  if (num_elems == 0) return;
  CudaBackend& cuda = cuda_of(backend, "narrow_to_bfloat16");
  narrow_kernel<<<grid_size(num_elems), kBlockSize, 0, cuda.stream()>>>(src, dst, num_elems);
  check_launch("narrow_to_bfloat16");
}

void widen_from_bfloat16(Backend& backend, const std::uint16_t* src, float* dst, std::size_t num_elems) {
  if (num_elems == 0) return;
  CudaBackend& cuda = cuda_of(backend, "widen_from_bfloat16");
  widen_kernel<<<grid_size(num_elems), kBlockSize, 0, cuda.stream()>>>(src, dst, num_elems);
  check_launch("widen_from_bfloat16");
}

void narrow_to_bfloat16_on(void* stream, const float* src, std::uint16_t* dst, std::size_t num_elems) {
  if (num_elems == 0) return;
  narrow_kernel<<<grid_size(num_elems), kBlockSize, 0, static_cast<cudaStream_t>(stream)>>>(src, dst, num_elems);
  check_launch("narrow_to_bfloat16 (copy stream)");
}

void widen_from_bfloat16_on(void* stream, const std::uint16_t* src, float* dst, std::size_t num_elems) {
  if (num_elems == 0) return;
  widen_kernel<<<grid_size(num_elems), kBlockSize, 0, static_cast<cudaStream_t>(stream)>>>(src, dst, num_elems);
  check_launch("widen_from_bfloat16 (copy stream)");
}

}  // namespace pstrain::nn::cuda
