#include "worker/train/divergence.h"

#include <cstdio>

namespace pstrain {

void throw_diverged(int rank, std::int64_t step, double lr, const std::string& what, const std::string& hint) {
  char line[480];
  std::snprintf(line, sizeof(line),
                "worker %d: training diverged at step %lld (%s, lr %.4g): lower optimizer.lr, or lengthen "
                "schedule.warmup_epochs%s",
                rank, static_cast<long long>(step), what.c_str(), lr, hint.c_str());
  throw DivergedError(line);
}

NonFiniteGuard::NonFiniteGuard(const WorkloadConfig& workload, int rank)
    : rank_(rank), skip_(workload.on_nonfinite == "skip"), max_in_a_row_(workload.max_skipped_steps) {
  if (workload.on_nonfinite != "stop" && workload.on_nonfinite != "skip") {
    throw ConfigError("workload.on_nonfinite: expected \"stop\" or \"skip\", got \"" + workload.on_nonfinite + "\"");
  }
  if (max_in_a_row_ < 1) {
    throw ConfigError("workload.max_skipped_steps: expected an integer >= 1, got " + std::to_string(max_in_a_row_));
  }
}

void NonFiniteGuard::seen(std::int64_t step, double lr, const std::string& what) {
  if (!skip_) throw_diverged(rank_, step, lr, what, ", or set workload.on_nonfinite = \"skip\"");
  if (last_what_.empty()) last_what_ = what;  // the step's first non-finite value
}

void NonFiniteGuard::end_step(std::int64_t step, double lr, bool skipped) {
  if (!skipped) {
    in_a_row_ = 0;
    last_what_.clear();
    return;
  }
  ++skipped_total_;
  ++in_a_row_;
  const std::string what = last_what_.empty() ? "non-finite" : last_what_;
  last_what_.clear();
  if (in_a_row_ >= max_in_a_row_) {
    throw_diverged(rank_, step, lr,
                   what + "; " + std::to_string(in_a_row_) + " steps skipped in a row, workload.max_skipped_steps = " +
                       std::to_string(max_in_a_row_));
  }
}

}  // namespace pstrain
