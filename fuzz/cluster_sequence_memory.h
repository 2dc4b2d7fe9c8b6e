// The cluster_sequence harness's invariant "a node's memory stays under its
// budget" (fuzz/cluster_sequence.cc): what a node's listener holds of unsent
// replies (its ReplyBudget's accounting, Scheduler/Server::unsent_reply_bytes)
// against the most its limits allow (unsent_reply_limit: twice the members'
// budget plus the strangers' pool; 0 while none is set).
#pragma once

#include <cstdint>
#include <string>

namespace pstrain::fuzz_cluster {

// Once every peer has closed its connections, a running node's unsent
// replies (what ZeroMQ still holds for them) are back to zero within this.
inline constexpr int kMemoryBackBoundMs = 3000;

// Empty when `unsent` bytes are within `limit` (0: no limit set yet, allowed
// only when not `must_have_limit`), else the finding.
inline std::string over_budget(const char* node, std::int64_t unsent, std::int64_t limit, bool must_have_limit) {
  if (must_have_limit && limit <= 0) return std::string("the ") + node + " has no memory budget for unsent replies";
  if (unsent >= 0 && (limit <= 0 || unsent <= limit)) return {};
  return std::string("the ") + node + " holds " + std::to_string(unsent) +
         " bytes of unsent replies, over the most its memory budget allows (" + std::to_string(limit) + ")";
}

}  // namespace pstrain::fuzz_cluster
