#include "worker/train/divergence.h"

#include <cstdio>

namespace pstrain {

void throw_diverged(int rank, std::int64_t step, double lr, const std::string& what) {
  char line[320];
  std::snprintf(line, sizeof(line),
                "worker %d: training diverged at step %lld (%s, lr %.4g): lower optimizer.lr, or lengthen "
                "schedule.warmup_epochs",
                rank, static_cast<long long>(step), what.c_str(), lr);
  throw DivergedError(line);
}

}  // namespace pstrain
