#include "worker/nn/softmax_xent.h"

#include <string>

#include "common/base/errors.h"

namespace pstrain::nn {

SoftmaxCrossEntropy::SoftmaxCrossEntropy(int classes, Backend& backend) : classes_(classes), backend_(backend) {
  if (classes < 1) throw ComputeError("softmax cross-entropy: " + std::to_string(classes) + " classes, expected >= 1");
}

LossResult SoftmaxCrossEntropy::forward_backward(int batch, const float* logits, const std::int32_t* labels,
                                                 float* dlogits) {
  const Backend::XentResult r = backend_.softmax_xent(batch, classes_, logits, labels, dlogits);
  return {r.loss_sum, r.correct};
}

}  // namespace pstrain::nn
