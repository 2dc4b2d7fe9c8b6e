// Optimizers applied to a contiguous range of the flat parameter buffer. The
// servers keep one per chunk they own. The update rules themselves (formulas
// in common/update_rules.h) are shared with the workers' backends
// (nn::DeviceOptimizer, used by allreduce workers), so every mode applies
// bit-identical updates to the same gradients.
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
