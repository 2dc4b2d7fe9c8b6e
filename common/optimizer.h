// Optimizers applied to a contiguous range of the flat parameter buffer. The
// servers keep one per chunk they own; allreduce workers keep one for the
// whole buffer. Both use this code, so the modes' updates are identical.
//
// SGD (PyTorch's formulation):
//   g' = g + weight_decay * w
//   v  = momentum * v + g'            (v starts at 0)
//   d  = nesterov ? g' + momentum * v : v
//   w -= lr * d
// Adam (bias-corrected, L2 weight decay added to the gradient), t = 1, 2, ...:
//   g' = g + weight_decay * w
//   m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
//   w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// Not thread-safe; one owner at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "common/config.h"

namespace pstrain {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of w with gradient g (same length as at construction).
  virtual void step(std::span<float> w, std::span<const float> g, double lr) = 0;
  virtual std::int64_t num_elems() const = 0;
  virtual std::int64_t steps_taken() const = 0;
};

// Throws ConfigError for an unknown optimizer name or invalid hyper-parameters.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::int64_t num_elems);

}  // namespace pstrain
