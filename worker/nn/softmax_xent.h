// The loss layer: softmax cross-entropy over logits [n, classes] with integer
// labels [n] (backend memory). One call computes the loss and the gradient
// dlogits [n, classes] = (softmax - onehot) / n, i.e. the gradient of the
// MEAN loss. Not thread-safe.
#pragma once

#include <cstdint>

#include "worker/nn/backend.h"

namespace pstrain::nn {

struct LossResult {
  double loss_sum = 0.0;       // summed over the batch (divide by n for the mean)
  std::int64_t correct = 0;    // samples whose argmax logit equals the label
};

class SoftmaxCrossEntropy {
 public:
  // Throws ComputeError unless classes >= 1.
  SoftmaxCrossEntropy(int classes, Backend& backend);
  int classes() const { return classes_; }
  LossResult forward_backward(int batch, const float* logits, const std::int32_t* labels, float* dlogits);

 private:
  int classes_;
  Backend& backend_;
};

}  // namespace pstrain::nn
