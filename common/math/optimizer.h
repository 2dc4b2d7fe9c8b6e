// Optimizers applied to a contiguous range of the flat parameter buffer. The
// servers keep one per chunk they own. The update rules themselves (formulas
// in common/math/update_rules.h) are shared with the workers' backends
// (nn::DeviceOptimizer, used by allreduce workers), so every mode applies
// bit-identical updates to the same gradients.
// Not thread-safe; one owner at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/config/config.h"
#include "common/math/parallel_ranges.h"
#include "common/math/update_rules.h"

namespace pstrain {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of w with gradient g (same length as at construction).
  virtual void step(std::span<float> w, std::span<const float> g, double lr) = 0;
  // The servers' checked update, in two phases so that a NaN or Inf, in the
  // gradient or in what it would make, changes nothing: stage() writes the
  // update of `w` into `w_out` (another buffer) and the new optimizer state
  // into a spare of its own, in one pass that also checks the gradient and
  // the new weights and state (update::UpdateCheck, returned); commit() makes
  // the staged state current (the caller then takes w_out as the weights),
  // and is for a clean() stage only. A stage not committed is forgotten by
  // the next stage(). Bit-identical to step() with the same (decoded,
  // averaged) gradient.
  virtual update::UpdateCheck stage(std::span<const float> w, std::span<float> w_out, update::GradSource g,
                                    std::size_t num_elems, double lr) = 0;
  virtual void commit() = 0;
  // The servers' update in place, for weights nothing else reads (no pull
  // reply holds them): the same bits as stage() into another buffer then
  // commit(), with no second buffer and no copy of the state, so fewer bytes
  // through memory. Taken only where the update cannot make a NaN or Inf:
  // one read pass bounds the gradient (update::gradient_bound_bits), and
  // with `weight_bound` (>= every |w|; kUnknownBound: found here) and the
  // state's own bound, update::sgd_bounds_after says so. Otherwise (a
  // non-finite or huge gradient; an optimizer without it: Adam) returns
  // nullopt having changed nothing, and the caller stages out of place,
  // where the checks find and name what is wrong. Returns a bound on the new
  // weights; the update is committed (steps_taken() counts it).
  virtual std::optional<double> update_in_place(std::span<float> w, double weight_bound, update::GradSource g,
                                                std::size_t g_elems, double lr) {
    (void)w, (void)weight_bound, (void)g, (void)g_elems, (void)lr;
    return std::nullopt;
  }
  static constexpr double kUnknownBound = -1.0;
  virtual std::int64_t num_elems() const = 0;
  virtual std::int64_t steps_taken() const = 0;
  // The optimizer's state for a checkpoint (sgd: the velocity, empty without
  // momentum; adam: the first then the second moments), and its restore:
  // ConfigError when `state` has another size than state() would.
  virtual std::vector<float> state() const = 0;
  virtual void set_state(std::span<const float> state, std::int64_t steps_taken) = 0;

  // Splits stage()'s element loop over `ranges` (a server's apply threads,
  // server/parallel_apply.h; it must outlive the optimizer); null, the
  // default: one loop on the caller's thread. The same bits either way.
  void split_over(RangeRunner* ranges) { ranges_ = ranges; }

 protected:
  RangeRunner* ranges_ = nullptr;
};

// The optimizer the servers run for `config`: as configured, except in async
// and ssp with optimizer.momentum_correction, where the momentum is lowered by
// the momentum that asynchrony itself adds, about 1 - 1/W for W workers
// (Mitliagkas et al. 2016, "Asynchrony begets momentum"):
// max(0, momentum - (1 - 1/W)); Nesterov is dropped when nothing is left.
// `implicit` (if given) gets the 1 - 1/W that was subtracted (0 in sync).
OptimizerConfig server_optimizer(const RunConfig& config, double* implicit = nullptr);

// Throws ConfigError for an unknown optimizer name or invalid hyper-parameters.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::int64_t num_elems);

}  // namespace pstrain
