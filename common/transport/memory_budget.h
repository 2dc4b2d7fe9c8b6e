// A node's memory budget for unsent replies (MemoryLimits, common/transport/
// transport.h; enforced by the ZeroMQ-based listeners' ReplyBudget,
// common/transport/zmq/zmq_reply_budget.h): the figures the servers and the
// scheduler share (docs/architecture.md, "Memory budget and floods").
//  - The members' budget: cluster.memory_budget_mb when set, else
//    kBudgetBaseBytes + what the node's members may legitimately have queued
//    (the caller's `members_need`: a server's shard copies per worker, the
//    scheduler's registration replies per node).
//  - A connection that is not a member (not a server's worker, not a node
//    registered with the scheduler) may hold kStrangerReplyBytes, and all of
//    them together kStrangersPoolBytes, a pool of their own: a flood from
//    strangers is shed before it costs a member a reply.
// The whole is at most unsent_bound(limits): twice budget plus pool.
#pragma once

#include <cstdint>
#include <string>

#include "common/config/config.h"
#include "common/transport/transport.h"

namespace pstrain {

inline constexpr std::int64_t kBudgetBaseBytes = std::int64_t{64} << 20;
inline constexpr std::int64_t kStrangerReplyBytes = std::int64_t{256} << 10;
inline constexpr std::int64_t kStrangersPoolBytes = std::int64_t{16} << 20;

MemoryLimits node_memory_limits(const ClusterConfig& cluster, std::int64_t members_need);

// When cluster.memory_budget_mb is set and below `need` (what the members'
// replies may legitimately hold, `what` says of what): a warning's text;
// else empty.
std::string memory_budget_warning(const ClusterConfig& cluster, std::int64_t need, const std::string& what);

// "64 MiB (derived: cluster.memory_budget_mb = 0), 256 KiB per connection
// that is not a member's, 16 MiB for all of them": for a node's log.
std::string describe_memory_limits(const MemoryLimits& limits, const ClusterConfig& cluster);

}  // namespace pstrain
