// Bias broadcast and the reductions of the backward passes: bias gradients
// (one block per channel, deterministic tree sum) and the sum of per-image
// weight-gradient partials. See kernels.cuh for the contracts.
#include "worker/nn/cuda/cuda_check.h"
#include "worker/nn/cuda/kernels.cuh"
#include "worker/nn/cuda/launch_config.cuh"

namespace pstrain::nn::cuda {
namespace {

constexpr int kReduceBlockSize = 512;

__global__ void add_bias_kernel(float* y, const float* b, std::size_t outer, int channels,
                                std::size_t inner) {
  const std::size_t num_elems = outer * static_cast<std::size_t>(channels) * inner;
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    const std::size_t c = (i / inner) % static_cast<std::size_t>(channels);
    y[i] += b[c];
  }
}

// Launched with one block per channel.
__global__ void bias_grad_kernel(float* db, const float* dy, std::size_t outer, int channels,
                                 std::size_t inner) {
  const std::size_t c = blockIdx.x;
  const std::size_t per_channel = outer * inner;
  float partial = 0.0f;
  for (std::size_t j = threadIdx.x; j < per_channel; j += blockDim.x) {
    const std::size_t o = j / inner;
    const std::size_t i = j % inner;
    partial += dy[(o * static_cast<std::size_t>(channels) + c) * inner + i];
  }
  const float total = block_sum(partial);
  if (threadIdx.x == 0) db[c] = total;
}

__global__ void sum_batches_kernel(float* dst, const float* src, int num_batches, std::size_t num_elems,
                                   bool accumulate) {
  for (std::size_t j = global_thread_index(); j < num_elems; j += grid_stride()) {
    float total = accumulate ? dst[j] : 0.0f;
    for (int batch = 0; batch < num_batches; ++batch) {
      total += src[static_cast<std::size_t>(batch) * num_elems + j];
    }
    dst[j] = total;
  }
}

}  // namespace

void add_bias(float* y, const float* b, std::size_t outer, int channels, std::size_t inner,
              cudaStream_t stream) {
  const std::size_t num_elems = outer * static_cast<std::size_t>(channels) * inner;
  if (num_elems == 0) return;
  add_bias_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(y, b, outer, channels, inner);
  check_launch("add_bias");
}

void bias_grad(float* db, const float* dy, std::size_t outer, int channels, std::size_t inner,
               cudaStream_t stream) {
  if (channels <= 0) return;
  bias_grad_kernel<<<static_cast<unsigned>(channels), kReduceBlockSize, 0, stream>>>(db, dy, outer,
                                                                                    channels, inner);
  check_launch("bias_grad");
}

void sum_batches(float* dst, const float* src, int num_batches, std::size_t num_elems, bool accumulate,
                 cudaStream_t stream) {
  if (num_elems == 0) return;
  sum_batches_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(dst, src, num_batches, num_elems,
                                                                      accumulate);
  check_launch("sum_batches");
}

}  // namespace pstrain::nn::cuda
