// Naive reference implementations of the GEMM-like operations, written
// straight from the definitions with double accumulation. Slow; used only by
// tests (and the benchmark's correctness check) to validate the fast paths.
// Same layouts and semantics as the Backend methods; host memory.
// Pure functions; thread-safe.
#pragma once

#include "worker/nn/backend.h"

namespace pstrain::nn::reference {

// y [n, c_out, oh, ow] = conv(x [n, c_in, h, w], w [c_out, c_in, kh, kw]) + b [c_out]
void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y);
// dx (may be null), dw, db overwritten.
void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db);
// y [n, out] = x [n, in] w^T [in, out] + b [out]
void linear_forward(const LinearShape& s, const float* x, const float* w, const float* b, float* y);
void linear_backward(const LinearShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db);

}  // namespace pstrain::nn::reference
