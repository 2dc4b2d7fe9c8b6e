// Convolution lowered to matrix products: im2col + OpenBLAS SGEMM, the
// classic GEMM formulation. Not used by the backends (oneDNN's direct
// convolution is faster here); kept as the baseline tools/bench_train_step
// compares against, and checked against the reference loops by the tests.
//
// Whole-batch lowering, P = out_h * out_w, K = c_in * k_h * k_w:
//   col [K, n*P] = im2col(x);  Y [c_out, n*P] = W [c_out, K] * col;  y = NCHW(Y) + b
//   dW = dY * col^T;  db = row sums of dY;  dcol = W^T * dY;  dx = col2im(dcol)
// OpenBLAS's thread count is process-wide: set_blas_threads() sets it.
// Host memory; not thread-safe (owns its scratch buffers).
#pragma once

#include <vector>

#include "worker/nn/backend.h"

namespace pstrain::nn {

void set_blas_threads(int threads);

// C [m, n] = A [m, k] * B [k, n] (row-major; transposes as flagged: A^T is
// stored [k, m], B^T is stored [n, k]).
void sgemm(bool transpose_a, bool transpose_b, int m, int n, int k, const float* a, const float* b, float* c);

class Im2colConv {
 public:
  // Throws ComputeError for an invalid shape.
  explicit Im2colConv(const Conv2dShape& shape);
  void forward(const float* x, const float* w, const float* b, float* y);
  // dx may be null (skipped); dw, db overwritten.
  void backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db);

 private:
  void im2col(const float* x);
  void col2im(float* dx) const;
  void to_channel_major(const float* nchw);   // [n, c_out, P] -> rows_ [c_out, n*P]

  Conv2dShape s_;
  int out_h_, out_w_;
  std::vector<float> col_;   // [K, n*P]
  std::vector<float> rows_;  // [c_out, n*P]
};

}  // namespace pstrain::nn
