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

// Coefficients by value, or read from device memory (a CUDA graph's per-step values).
__device__ inline update::SgdCoefficients coefficients_of(const update::SgdCoefficients& c) { return c; }
__device__ inline update::SgdCoefficients coefficients_of(const update::SgdCoefficients* c) { return *c; }
__device__ inline update::AdamCoefficients coefficients_of(const update::AdamCoefficients& c) { return c; }
__device__ inline update::AdamCoefficients coefficients_of(const update::AdamCoefficients* c) { return *c; }

template <class Source>
__global__ void sgd_plain_kernel(float* w, const float* g, std::size_t num_elems, Source source) {
  const update::SgdCoefficients c = coefficients_of(source);
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    w[i] = update::sgd_plain(w[i], g[i], c);
  }
}

template <class Source>
__global__ void sgd_momentum_kernel(float* w, float* velocity, const float* g, std::size_t num_elems, Source source) {
  const update::SgdCoefficients c = coefficients_of(source);
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    w[i] = update::sgd_momentum(w[i], g[i], velocity[i], c);
  }
}

template <class Source>
__global__ void adam_kernel(float* w, float* m, float* v, const float* g, std::size_t num_elems, Source source) {
  const update::AdamCoefficients c = coefficients_of(source);
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    w[i] = update::adam(w[i], g[i], m[i], v[i], c);
  }
}

template <class Source>
void launch_sgd(float* w, float* velocity, const float* g, std::size_t num_elems, Source c, cudaStream_t stream) {
  if (num_elems == 0) return;
  if (velocity == nullptr) {
    sgd_plain_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(w, g, num_elems, c);
  } else {
    sgd_momentum_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(w, velocity, g, num_elems, c);
  }
  check_launch("sgd_step");
}

template <class Source>
void launch_adam(float* w, float* m, float* v, const float* g, std::size_t num_elems, Source c, cudaStream_t stream) {
  if (num_elems == 0) return;
  adam_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(w, m, v, g, num_elems, c);
  check_launch("adam_step");
}

}  // namespace

void sgd_step(float* w, float* velocity, const float* g, std::size_t num_elems, const update::SgdCoefficients& c,
              cudaStream_t stream) {
  launch_sgd(w, velocity, g, num_elems, c, stream);
}

void adam_step(float* w, float* m, float* v, const float* g, std::size_t num_elems,
               const update::AdamCoefficients& c, cudaStream_t stream) {
  launch_adam(w, m, v, g, num_elems, c, stream);
}

void sgd_step(float* w, float* velocity, const float* g, std::size_t num_elems,
              const update::SgdCoefficients* c_on_device, cudaStream_t stream) {
  launch_sgd(w, velocity, g, num_elems, c_on_device, stream);
}

void adam_step(float* w, float* m, float* v, const float* g, std::size_t num_elems,
               const update::AdamCoefficients* c_on_device, cudaStream_t stream) {
  launch_adam(w, m, v, g, num_elems, c_on_device, stream);
}

}  // namespace pstrain::nn::cuda
