// Divergence is a training outcome: the checks every training loop runs, what
// it does on a non-finite loss or gradient (workload.on_nonfinite), and the
// one line it ends with (DivergedError, exit code kExitDiverged).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "common/config/config.h"
#include "common/base/errors.h"

namespace pstrain {

// Whether every value is finite (one branch-free pass over the exponents).
inline bool all_finite(std::span<const float> values) {
  const auto* bits = reinterpret_cast<const std::uint32_t*>(values.data());
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < values.size(); ++i) bad |= ((bits[i] >> 23) & 0xffu) == 0xffu ? 1u : 0u;
  return bad == 0;
}

// "loss nan", "loss inf", "loss -inf" (no sign on a NaN), "loss 2.5".
inline std::string describe_loss(double loss) {
  if (std::isnan(loss)) return "loss nan";
  if (std::isinf(loss)) return loss > 0 ? "loss inf" : "loss -inf";
  return "loss " + std::to_string(loss);
}

// "worker 3: training diverged at step 177 (loss nan, lr 0.05): lower
// optimizer.lr, or lengthen schedule.warmup_epochs" (`what`: "loss nan",
// "non-finite gradient", ...), plus `hint` when not empty (", or ...").
[[noreturn]] void throw_diverged(int rank, std::int64_t step, double lr, const std::string& what,
                                 const std::string& hint = "");

// One worker's rule for non-finite steps (workload.on_nonfinite):
// "stop": the first one throws DivergedError (the line above, suggesting
//   "skip"). "skip": the step's update is dropped (the caller's business:
//   PS, skip pushes for the chunks not yet sent; allreduce, no optimizer
//   step); after max_skipped_steps skipped steps in a row it throws, naming
//   the streak. Per worker, one object per training loop.
class NonFiniteGuard {
 public:
  NonFiniteGuard(const WorkloadConfig& workload, int rank);

  bool skipping() const { return skip_; }
  // A non-finite value in `step` (`what`: "loss nan", "non-finite gradient").
  // "stop": throws. "skip": remembers it; returns.
  void seen(std::int64_t step, double lr, const std::string& what);
  // The end of `step`: skipped or not (a skipped step must have been seen()).
  // Throws when it makes max_skipped_steps in a row.
  void end_step(std::int64_t step, double lr, bool skipped);

  std::int64_t skipped_steps() const { return skipped_total_; }
  std::int64_t skipped_in_a_row() const { return in_a_row_; }

 private:
  int rank_;
  bool skip_;
  int max_in_a_row_;
  std::int64_t skipped_total_ = 0;
  std::int64_t in_a_row_ = 0;
  std::string last_what_;
};

}  // namespace pstrain
