// The scheduler's memory budget for unsent replies (common/transport/
// memory_budget.h, the figures it shares with the servers; docs/
// architecture.md, "Memory budget and floods"). Its members are the nodes
// registered with it (Listener::add_member as each registers or rejoins):
// every other connection is a stranger from the start, held to 256 KiB of
// unsent replies and, all strangers together, to a pool of 16 MiB of their
// own, so a stranger's flood (requests it never reads the refusals of) is
// shed before any node's reply is. The members' budget is
// cluster.memory_budget_mb, or derived: kBudgetBaseBytes + per node
// kSchedulerBytesPerNode (heartbeats, barrier and store replies, a refusal)
// and twice the largest registration reply once it is known (the
// rendezvous: every node's at once).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/log.h"
#include "common/config/config.h"
#include "common/transport/transport.h"
#include "common/wire/protocol.h"

namespace pstrain {

inline constexpr std::int64_t kSchedulerBytesPerNode = std::int64_t{1} << 20;
// Received messages ZeroMQ queues per connection before it stops reading it
// (TCP then slows the peer; nothing is dropped): a node has a few requests
// in flight at the scheduler at most, a flood waits in its own sender.
inline constexpr int kSchedulerReceiveHwm = 64;

MemoryLimits scheduler_memory_limits(const ClusterConfig& cluster, int num_nodes, std::int64_t largest_reply_bytes);

// The largest registration reply of the rendezvous: `job_reply` (the job's
// part) with every worker's token, as a server's carries them.
std::int64_t largest_register_reply(const RegisterReply& job_reply, const std::vector<std::string>& worker_tokens);

// Sets `listener`'s limits for `num_nodes` nodes and `largest_reply_bytes`
// (0 before the rendezvous); `first`: the scheduler starts, nobody is a
// member yet. Logs the figure (and a warning when a configured budget is
// less than the rendezvous needs).
void limit_scheduler_memory(Listener& listener, const ClusterConfig& cluster, int num_nodes,
                            std::int64_t largest_reply_bytes, bool first, Logger& log);

}  // namespace pstrain
