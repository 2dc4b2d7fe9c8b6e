// Host-side validation of the CUDA backend's non-shape arguments (shapes are
// checked by worker/nn/shape_checks.h, shared with the CPU backend). The
// rules and messages match the CPU backend's, so both reject the same input
// with the same text. Each check throws ComputeError starting with `op`.
// Pure functions; thread-safe; no CUDA needed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pstrain::nn::cuda {

// p in [0, 1): "dropout_forward: drop probability 1.000000 is outside [0, 1)".
void check_dropout_p(float p, std::string_view op);
// velocity may be null only when momentum == 0.
void check_sgd_velocity(const float* velocity, float momentum, std::string_view op);
// n >= 1 and classes >= 1: "softmax_xent: n=0 classes=10: both must be positive".
void check_xent_shape(int n, int classes, std::string_view op);
// "softmax_xent: label of sample 3 is 12, expected 0..9".
std::string bad_label_message(int row, std::int32_t label, int classes);

}  // namespace pstrain::nn::cuda
