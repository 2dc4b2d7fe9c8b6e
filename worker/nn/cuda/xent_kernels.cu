// Softmax cross-entropy. Pass 1: one warp per row computes the row maximum
// (first argmax), the shifted exponent sum (numerically stable log-sum-exp),
// the row's loss, its gradient and its status. Pass 2: a single block sums
// the rows in double in a fixed order (deterministic). See kernels.cuh.
#include <cmath>

#include "worker/nn/cuda/cuda_check.h"
#include "worker/nn/cuda/kernels.cuh"
#include "worker/nn/cuda/launch_config.cuh"

namespace pstrain::nn::cuda {
namespace {

constexpr int kRowsPerBlock = kBlockSize / kWarpSize;
constexpr int kTotalsBlockSize = 256;

// Warp-wide (max, first index of max); lanes that saw nothing hold index INT_MAX.
__device__ void warp_argmax(float& best, int& best_index) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    const int other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
    if (other > best || (other == best && other_index < best_index)) {
      best = other;
      best_index = other_index;
    }
  }
}

__global__ void xent_rows_kernel(float* dlogits, float* row_loss, std::int32_t* row_status,
                                 const float* logits, const std::int32_t* labels, int n, int classes) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int row = static_cast<int>(blockIdx.x) * kRowsPerBlock + static_cast<int>(threadIdx.x) / kWarpSize;
  if (row >= n) return;  // whole warps exit together: shuffles below stay full-warp
  const float* l = logits + static_cast<std::size_t>(row) * classes;
  float* dl = dlogits + static_cast<std::size_t>(row) * classes;

  float best = -INFINITY;
  int best_index = 0x7fffffff;
  for (int j = lane; j < classes; j += kWarpSize) {
    if (l[j] > best || best_index == 0x7fffffff) {
      best = l[j];
      best_index = j;
    }
  }
  warp_argmax(best, best_index);

  float exp_sum = 0.0f;
  for (int j = lane; j < classes; j += kWarpSize) exp_sum += expf(l[j] - best);
  exp_sum = warp_sum(exp_sum);

  const int label = labels[row];
  const bool label_ok = label >= 0 && label < classes;
  const float inv_n = 1.0f / static_cast<float>(n);  // as the CPU backend: multiply by 1/n
  for (int j = lane; j < classes; j += kWarpSize) {
    const float softmax = expf(l[j] - best) / exp_sum;
    dl[j] = (softmax - (j == label ? 1.0f : 0.0f)) * inv_n;
  }
  if (lane == 0) {
    row_loss[row] = label_ok ? logf(exp_sum) + best - l[label] : 0.0f;
    row_status[row] = !label_ok ? -1 : (best_index == label ? 1 : 0);
  }
}

// One block of kTotalsBlockSize threads.
__global__ void xent_totals_kernel(XentTotals* totals, const float* row_loss, const std::int32_t* row_status,
                                   int n) {
  __shared__ double loss_parts[kTotalsBlockSize];
  __shared__ long long correct_parts[kTotalsBlockSize];
  __shared__ int bad_parts[kTotalsBlockSize];
  double loss = 0.0;
  long long correct = 0;
  int bad = n;
  for (int r = static_cast<int>(threadIdx.x); r < n; r += kTotalsBlockSize) {
    loss += static_cast<double>(row_loss[r]);
    correct += row_status[r] == 1 ? 1 : 0;
    if (row_status[r] < 0 && r < bad) bad = r;
  }
  loss_parts[threadIdx.x] = loss;
  correct_parts[threadIdx.x] = correct;
  bad_parts[threadIdx.x] = bad;
  __syncthreads();
  for (int half = kTotalsBlockSize / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      loss_parts[threadIdx.x] += loss_parts[threadIdx.x + half];
      correct_parts[threadIdx.x] += correct_parts[threadIdx.x + half];
      bad_parts[threadIdx.x] = min(bad_parts[threadIdx.x], bad_parts[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    totals->loss_sum = loss_parts[0];
    totals->correct = correct_parts[0];
    totals->first_bad_row = bad_parts[0];
  }
}

}  // namespace

void softmax_xent(XentTotals* totals, float* dlogits, float* row_loss, std::int32_t* row_status,
                  const float* logits, const std::int32_t* labels, int n, int classes,
                  cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned row_blocks = static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock);
  xent_rows_kernel<<<row_blocks, kBlockSize, 0, stream>>>(dlogits, row_loss, row_status, logits, labels, n,
                                                          classes);
  check_launch("softmax_xent (rows)");
  xent_totals_kernel<<<1, kTotalsBlockSize, 0, stream>>>(totals, row_loss, row_status, n);
  check_launch("softmax_xent (totals)");
}

}  // namespace pstrain::nn::cuda
