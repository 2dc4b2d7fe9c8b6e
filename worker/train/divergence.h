// Divergence is a training outcome: the checks every training loop runs and
// the one line it ends with (DivergedError, exit code kExitDiverged).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "common/errors.h"

namespace pstrain {

// Whether every value is finite (one branch-free pass over the exponents).
inline bool all_finite(std::span<const float> values) {
  const auto* bits = reinterpret_cast<const std::uint32_t*>(values.data());
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < values.size(); ++i) bad |= ((bits[i] >> 23) & 0xffu) == 0xffu ? 1u : 0u;
  return bad == 0;
}

// "worker 3: training diverged at step 177 (loss nan, lr 0.05): lower
// optimizer.lr, or lengthen schedule.warmup_epochs" (`what`: "loss nan",
// "non-finite gradient", ...).
[[noreturn]] void throw_diverged(int rank, std::int64_t step, double lr, const std::string& what);

}  // namespace pstrain
