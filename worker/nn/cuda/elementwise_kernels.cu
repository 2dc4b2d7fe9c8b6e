// Element-wise kernels: fill, ReLU forward/backward, dropout forward/backward.
// One grid-stride loop per kernel; see kernels.cuh for the contracts.
#include "worker/nn/cuda/cuda_check.h"
#include "worker/nn/cuda/kernels.cuh"
#include "worker/nn/cuda/launch_config.cuh"
#include "worker/nn/dropout_hash.h"

namespace pstrain::nn::cuda {
namespace {

__global__ void fill_kernel(float* x, float value, std::size_t num_elems) {
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    x[i] = value;
  }
}

__global__ void relu_forward_kernel(float* y, const float* x, std::size_t num_elems) {
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void relu_backward_kernel(float* dx, const float* y, const float* dy, std::size_t num_elems) {
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }
}

// The seed by value, or read from device memory (a CUDA graph's per-step value).
__device__ inline std::uint64_t seed_of(std::uint64_t seed) { return seed; }
__device__ inline std::uint64_t seed_of(const std::uint64_t* seed) { return *seed; }

template <class Seed>
__global__ void dropout_forward_kernel(float* y, float* mask, const float* x, std::size_t num_elems,
                                       float p, Seed seed_source) {
  const std::uint64_t seed = seed_of(seed_source);
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    const float m = dropout_mask_value(seed, static_cast<std::uint64_t>(i), p);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

__global__ void dropout_backward_kernel(float* dx, const float* dy, const float* mask,
                                        std::size_t num_elems) {
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    dx[i] = dy[i] * mask[i];
  }
}

}  // namespace

void fill(float* x, float value, std::size_t num_elems, cudaStream_t stream) {
  if (num_elems == 0) return;
  fill_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(x, value, num_elems);
  check_launch("fill");
}

void relu_forward(float* y, const float* x, std::size_t num_elems, cudaStream_t stream) {
  if (num_elems == 0) return;
  relu_forward_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(y, x, num_elems);
  check_launch("relu_forward");
}

void relu_backward(float* dx, const float* y, const float* dy, std::size_t num_elems, cudaStream_t stream) {
  if (num_elems == 0) return;
  relu_backward_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(dx, y, dy, num_elems);
  check_launch("relu_backward");
}

void dropout_forward(float* y, float* mask, const float* x, std::size_t num_elems, float p,
                     std::uint64_t seed, cudaStream_t stream) {
  if (num_elems == 0) return;
  dropout_forward_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(y, mask, x, num_elems, p, seed);
  check_launch("dropout_forward");
}

void dropout_forward(float* y, float* mask, const float* x, std::size_t num_elems, float p,
                     const std::uint64_t* seed_on_device, cudaStream_t stream) {
  if (num_elems == 0) return;
  dropout_forward_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(y, mask, x, num_elems, p, seed_on_device);
  check_launch("dropout_forward (graph)");
}

void dropout_backward(float* dx, const float* dy, const float* mask, std::size_t num_elems,
                      cudaStream_t stream) {
  if (num_elems == 0) return;
  dropout_backward_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(dx, dy, mask, num_elems);
  check_launch("dropout_backward");
}

}  // namespace pstrain::nn::cuda
