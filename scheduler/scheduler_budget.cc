#include "scheduler/scheduler_budget.h"

#include "common/transport/memory_budget.h"
#include "common/wire/wire_archive.h"

namespace pstrain {

MemoryLimits scheduler_memory_limits(const ClusterConfig& cluster, int num_nodes, std::int64_t largest_reply_bytes) {
  const std::int64_t per_node = kSchedulerBytesPerNode + 2 * largest_reply_bytes;
  return node_memory_limits(cluster, std::int64_t{std::max(num_nodes, 1)} * per_node);
}

std::int64_t largest_register_reply(const RegisterReply& job_reply, const std::vector<std::string>& worker_tokens) {
  RegisterReply reply = job_reply;
  reply.worker_tokens = worker_tokens;
  return static_cast<std::int64_t>(wire_encode(reply).size()) + 64;  // + the header frame
}

void limit_scheduler_memory(Listener& listener, const ClusterConfig& cluster, int num_nodes,
                            std::int64_t largest_reply_bytes, bool first, Logger& log) {
  const MemoryLimits limits = scheduler_memory_limits(cluster, num_nodes, largest_reply_bytes);
  listener.set_memory_limits(limits);
  if (first) listener.set_members({});  // members join as they register (add_member)
  if (largest_reply_bytes > 0) {
    const std::string warning =
        memory_budget_warning(cluster, std::int64_t{num_nodes} * largest_reply_bytes,
                              "the rendezvous's registration replies need (" + std::to_string(num_nodes) +
                                  " nodes x " + std::to_string(largest_reply_bytes) + " bytes)");
    if (!warning.empty()) log.warn(warning);
  }
  log.info(std::string(first ? "" : "at the rendezvous: ") + "memory budget for unsent replies: " +
           describe_memory_limits(limits, cluster));
}

}  // namespace pstrain
