// Kernel launchers of the CUDA backend (llm.c style: outputs first, then
// inputs, sizes, the stream). Each enqueues its kernel(s) on `stream`, checks
// the launch (ComputeError naming the launcher) and returns without
// synchronizing. All pointers are device pointers; sizes are element counts.
// A launcher given zero elements launches nothing. Shapes are validated by
// the caller (worker/nn/shape_checks.h, arg_checks.h); these functions trust them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "worker/nn/backend.h"

namespace pstrain::nn::cuda {

// ---- element-wise (elementwise_kernels.cu) ----
void fill(float* x, float value, std::size_t num_elems, cudaStream_t stream);
void relu_forward(float* y, const float* x, std::size_t num_elems, cudaStream_t stream);
// dx = dy * (y > 0)
void relu_backward(float* dx, const float* y, const float* dy, std::size_t num_elems, cudaStream_t stream);
// mask[i] = dropout_mask_value(seed, i, p); y = x * mask
void dropout_forward(float* y, float* mask, const float* x, std::size_t num_elems, float p,
                     std::uint64_t seed, cudaStream_t stream);
void dropout_backward(float* dx, const float* dy, const float* mask, std::size_t num_elems,
                      cudaStream_t stream);
// The same with the seed read from device memory when the kernel runs (a CUDA graph's
// per-step value, worker/nn/cuda/step_graph.h): the same masks for the same seed.
void dropout_forward(float* y, float* mask, const float* x, std::size_t num_elems, float p,
                     const std::uint64_t* seed_on_device, cudaStream_t stream);

// ---- bias and reductions (reduce_kernels.cu) ----
// y viewed as [outer, channels, inner]: y[o, c, i] += b[c].
void add_bias(float* y, const float* b, std::size_t outer, int channels, std::size_t inner,
              cudaStream_t stream);
// db[c] = sum over o, i of dy[o, c, i] (dy viewed as [outer, channels, inner]); overwrites db.
void bias_grad(float* db, const float* dy, std::size_t outer, int channels, std::size_t inner,
               cudaStream_t stream);
// dst[j] = (accumulate ? dst[j] : 0) + sum over b < num_batches of src[b * num_elems + j].
void sum_batches(float* dst, const float* src, int num_batches, std::size_t num_elems, bool accumulate,
                 cudaStream_t stream);

// ---- convolution lowering (im2col_kernels.cu) ----
// col is [num_images, K, P] with K = c_in*k_h*k_w (row index (c, kh, kw)) and
// P = out_h*out_w; x points to the first of num_images images of shape s
// (s.n is ignored). Padding reads as zero.
void im2col(float* col, const float* x, const Conv2dShape& s, int num_images, cudaStream_t stream);
// The adjoint of im2col: dx[i, c, h, w] = sum of the col entries im2col read
// from (i, c, h, w). Overwrites dx (num_images images). Gather form: no atomics.
void col2im(float* dx, const float* col, const Conv2dShape& s, int num_images, cudaStream_t stream);

// ---- max pooling (pool_kernels.cu) ----
// argmax[o] = flat index into x of output o's maximum (first one in window scan order).
void maxpool_forward(float* y, std::int32_t* argmax, const float* x, const PoolShape& s,
                     cudaStream_t stream);
// dx = 0, then dx[argmax[o]] += dy[o] (atomicAdd, so overlapping windows are correct).
void maxpool_backward(float* dx, const float* dy, const std::int32_t* argmax, const PoolShape& s,
                      cudaStream_t stream);

// ---- softmax cross-entropy (xent_kernels.cu) ----
struct XentTotals {
  double loss_sum;        // sum over rows with a valid label
  long long correct;      // rows whose first argmax equals the label
  int first_bad_row;      // smallest row with a label outside [0, classes), or n if none
};
// Per row r: row_loss[r] = -log softmax(logits[r])[label], row_status[r] =
// 1 (argmax correct), 0 (wrong) or -1 (label out of range), and
// dlogits[r] = (softmax - onehot) * (1/n). Then reduces the rows into *totals.
void softmax_xent(XentTotals* totals, float* dlogits, float* row_loss, std::int32_t* row_status,
                  const float* logits, const std::int32_t* labels, int n, int classes,
                  cudaStream_t stream);

// ---- optimizer steps (optimizer_kernels.cu): the element rules of common/math/update_rules.h ----
// velocity may be null (plain SGD; the caller checks momentum == 0).
void sgd_step(float* w, float* velocity, const float* g, std::size_t num_elems, const update::SgdCoefficients& c,
              cudaStream_t stream);
void adam_step(float* w, float* m, float* v, const float* g, std::size_t num_elems,
               const update::AdamCoefficients& c, cudaStream_t stream);
// The same with the coefficients read from device memory when the kernel runs (a CUDA
// graph's per-step values): the same element rules, so the same results bit for bit.
void sgd_step(float* w, float* velocity, const float* g, std::size_t num_elems,
              const update::SgdCoefficients* c_on_device, cudaStream_t stream);
void adam_step(float* w, float* m, float* v, const float* g, std::size_t num_elems,
               const update::AdamCoefficients* c_on_device, cudaStream_t stream);

}  // namespace pstrain::nn::cuda
