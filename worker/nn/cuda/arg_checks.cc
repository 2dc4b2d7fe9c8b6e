// Argument validation of the CUDA backend; see arg_checks.h.
#include "worker/nn/cuda/arg_checks.h"

#include "common/base/errors.h"

namespace pstrain::nn::cuda {

void check_dropout_p(float p, std::string_view op) {
  if (!(p >= 0.0f && p < 1.0f)) {
    throw ComputeError(std::string(op) + ": drop probability " + std::to_string(p) + " is outside [0, 1)");
  }
}

void check_sgd_velocity(const float* velocity, float momentum, std::string_view op) {
  if (velocity == nullptr && momentum != 0.0f) {
    throw ComputeError(std::string(op) + ": momentum " + std::to_string(momentum) +
                       " needs a velocity buffer, got null");
  }
}

void check_xent_shape(int n, int classes, std::string_view op) {
  if (n <= 0 || classes <= 0) {
    throw ComputeError(std::string(op) + ": n=" + std::to_string(n) + " classes=" + std::to_string(classes) +
                       ": both must be positive");
  }
}

std::string bad_label_message(int row, std::int32_t label, int classes) {
  return "softmax_xent: label of sample " + std::to_string(row) + " is " + std::to_string(label) +
         ", expected 0.." + std::to_string(classes - 1);
}

}  // namespace pstrain::nn::cuda
