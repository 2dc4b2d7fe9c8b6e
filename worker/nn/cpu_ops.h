// The CPU backend's non-GEMM operations as plain loops over host memory:
// ReLU, max pooling, dropout, softmax cross-entropy and the optimizer
// updates. Semantics are those of the matching Backend methods
// (worker/nn/backend.h). Single-threaded and written so the compiler
// vectorizes the elementwise loops: together they take ~8% of a fmnist_cnn
// training step at batch 32 on 2 threads, ~5% on 1 (tools/bench_train_step's
// per-layer table), which does not pay for a thread pool.
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "worker/nn/backend.h"

namespace pstrain::nn::cpu {

void relu_forward(const float* x, float* y, std::size_t num_elems);
void relu_backward(const float* y, const float* dy, float* dx, std::size_t num_elems);

void maxpool_forward(const PoolShape& s, const float* x, float* y, std::int32_t* argmax);
void maxpool_backward(const PoolShape& s, const float* dy, const std::int32_t* argmax, float* dx);

void dropout_forward(const float* x, float* y, float* mask, std::size_t num_elems, float p,
                     std::uint64_t seed);
void dropout_backward(const float* dy, const float* mask, float* dx, std::size_t num_elems);

// Throws ComputeError for a label outside [0, classes).
Backend::XentResult softmax_xent(int n, int classes, const float* logits, const std::int32_t* labels,
                                 float* dlogits);


}  // namespace pstrain::nn::cpu
