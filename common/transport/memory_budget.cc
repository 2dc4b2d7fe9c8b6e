#include "common/transport/memory_budget.h"

namespace pstrain {

MemoryLimits node_memory_limits(const ClusterConfig& cluster, std::int64_t members_need) {
  MemoryLimits limits;
  limits.stranger_bytes = kStrangerReplyBytes;
  limits.strangers_bytes = kStrangersPoolBytes;
  limits.budget_bytes = cluster.memory_budget_mb > 0 ? cluster.memory_budget_mb * (std::int64_t{1} << 20)
                                                     : kBudgetBaseBytes + members_need;
  return limits;
}

std::string memory_budget_warning(const ClusterConfig& cluster, std::int64_t need, const std::string& what) {
  if (cluster.memory_budget_mb <= 0) return {};
  const std::int64_t budget = cluster.memory_budget_mb * (std::int64_t{1} << 20);
  if (budget >= need) return {};
  return "cluster.memory_budget_mb = " + std::to_string(cluster.memory_budget_mb) + " is less than the " +
         std::to_string((need + (1 << 20) - 1) >> 20) + " MiB " + what +
         ": replies to the slowest readers may be dropped; raise it or set 0 (derived)";
}

std::string describe_memory_limits(const MemoryLimits& limits, const ClusterConfig& cluster) {
  return std::to_string(limits.budget_bytes >> 20) + " MiB" +
         (cluster.memory_budget_mb > 0 ? " (cluster.memory_budget_mb)" : " (derived: cluster.memory_budget_mb = 0)") +
         ", " + std::to_string(limits.stranger_bytes >> 10) + " KiB per connection that is not a member's, " +
         std::to_string(limits.strangers_bytes >> 20) + " MiB for all of them";
}

}  // namespace pstrain
