// The first stage of a server's request path (server/server.h): who may send
// what. A request decoded off the server's socket is served only if it comes
// from the connection of the worker it names: each worker's connection is
// named "w" + the session token the scheduler gave it, and the server learns
// the tokens at the rendezvous (and a rejoined worker's new one later); a
// request from a node that is not a worker, in another worker's name, or
// from a connection no worker of this job was given, is refused. With CURVE
// and per-worker keys, a request in worker R's name is admitted only over
// worker R's key.
// Not thread-safe: owned by the server's event-loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/transport/memory_budget.h"
#include "common/transport/transport.h"
#include "common/wire/protocol.h"
#include "common/wire/security.h"

namespace pstrain {

class Admission {
 public:
  // `security` may be null (CURVE off); it must outlive this object.
  explicit Admission(const SecurityContext* security) : security_(security) {}

  // The rendezvous: worker w's connection is "w" + worker_tokens[w].
  void bind(const std::vector<std::string>& worker_tokens);
  // A new process took back `worker`'s rank: its connection is the one
  // named by `token`; the old one's requests are refused from now on.
  void rebind(int worker, const std::string& token);
  // Throws RequestError (kBadRequest, saying why) unless `env` may be
  // served: sent by a worker, over its own connection (and key).
  void admit(const Envelope& env) const;
  // Whether admit(env) would pass, without building its refusal (the sync
  // queue asks it of every queued pull at every turn: server/server.h).
  bool allows(const Envelope& env) const;
  // The workers' connections as bound now (the listener's members: every
  // other connection is a stranger to its memory budget).
  std::vector<PeerId> connections() const;

 private:
  void check_key_binding(const Envelope& env) const;

  const SecurityContext* security_;
  std::map<std::string, int> worker_of_connection_;  // "w" + token -> worker rank
};

// Load admission: the server's memory budget for unsent replies
// (Listener::set_memory_limits; common/transport/memory_budget.h, shared
// with the scheduler). cluster.memory_budget_mb when set, else derived from
// what the job's workers can legitimately have queued here:
// kBudgetPerWorkerShards copies of this server's shard (`shard_bytes`) per
// worker (the next step's pull ticket and an evaluation's, each of every
// chunk, with room to spare) plus kBudgetBaseBytes. A connection that is not
// a worker's may hold at most kStrangerReplyBytes of unsent replies (its
// error replies: a few hundred bytes each), all of them kStrangersPoolBytes.
inline constexpr std::int64_t kBudgetPerWorkerShards = 4;
MemoryLimits server_memory_limits(const ClusterConfig& cluster, std::int64_t shard_bytes, int num_workers);
// What a configured budget lacks for the replies the workers may have queued
// legitimately (two copies of the shard per worker): a warning's text, or
// empty when it is enough.
std::string memory_budget_warning(const ClusterConfig& cluster, std::int64_t shard_bytes, int num_workers);

}  // namespace pstrain
