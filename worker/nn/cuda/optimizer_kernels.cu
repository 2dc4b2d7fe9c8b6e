// SGD and Adam updates on the device: the element functions of
// common/math/update_rules.h, the same code the servers and the CPU backend run.
// This file is compiled without FMA contraction (-fmad=false, see
// worker/CMakeLists.txt), and nvcc's division and sqrtf are IEEE-rounded by
// default, so the device's results are bit-identical to the host's.
#include "common/math/update_rules.h"
#include "worker/nn/cuda/cuda_check.h"
#include "worker/nn/cuda/kernels.cuh"
#include "worker/nn/cuda/launch_config.cuh"

namespace pstrain::nn::cuda {
namespace {

__global__ void sgd_plain_kernel(float* w, const float* g, std::size_t num_elems, update::SgdCoefficients c) {
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    w[i] = update::sgd_plain(w[i], g[i], c);
  }
}

__global__ void sgd_momentum_kernel(float* w, float* velocity, const float* g, std::size_t num_elems,
                                    update::SgdCoefficients c) {
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    w[i] = update::sgd_momentum(w[i], g[i], velocity[i], c);
  }
}

__global__ void adam_kernel(float* w, float* m, float* v, const float* g, std::size_t num_elems,
                            update::AdamCoefficients c) {
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    w[i] = update::adam(w[i], g[i], m[i], v[i], c);
  }
}

}  // namespace

void sgd_step(float* w, float* velocity, const float* g, std::size_t num_elems, const update::SgdCoefficients& c,
              cudaStream_t stream) {
  if (num_elems == 0) return;
  if (velocity == nullptr) {
    sgd_plain_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(w, g, num_elems, c);
  } else {
    sgd_momentum_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(w, velocity, g, num_elems, c);
  }
  check_launch("sgd_step");
}

void adam_step(float* w, float* m, float* v, const float* g, std::size_t num_elems,
               const update::AdamCoefficients& c, cudaStream_t stream) {
  if (num_elems == 0) return;
  adam_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(w, m, v, g, num_elems, c);
  check_launch("adam_step");
}

}  // namespace pstrain::nn::cuda
