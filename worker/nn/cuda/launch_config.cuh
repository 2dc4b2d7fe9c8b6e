// Launch geometry and warp/block reductions shared by the backend's kernels.
//
// Element-wise kernels use 1-D grid-stride loops with size_t indices, so any
// tensor size works with a grid capped at kMaxGridSize blocks. Reductions use
// warp shuffles then one shared-memory pass; every thread of the block must
// call block_sum (it contains __syncthreads).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

namespace pstrain::nn::cuda {

constexpr int kBlockSize = 256;            // threads per block, a multiple of 32
constexpr unsigned kMaxGridSize = 1u << 20;  // blocks; loops stride over the rest
constexpr int kWarpSize = 32;

// Blocks needed to give each of `num_items` one thread, capped (grid-stride loops cover the rest).
inline unsigned grid_size(std::size_t num_items, int block_size = kBlockSize) {
  const std::size_t blocks = (num_items + static_cast<std::size_t>(block_size) - 1) /
                             static_cast<std::size_t>(block_size);
  return static_cast<unsigned>(std::min<std::size_t>(std::max<std::size_t>(blocks, 1), kMaxGridSize));
}

__device__ inline std::size_t global_thread_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ inline std::size_t grid_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

__device__ inline float warp_sum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024);
// the result is valid in every thread.
__device__ inline float block_sum(float value) {
  __shared__ float warp_sums[kWarpSize];
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int num_warps = static_cast<int>(blockDim.x) / kWarpSize;
  value = warp_sum(value);
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  value = lane < num_warps ? warp_sums[lane] : 0.0f;
  value = warp_sum(value);
  __syncthreads();  // warp_sums may be reused by a following call
  return value;
}

}  // namespace pstrain::nn::cuda
