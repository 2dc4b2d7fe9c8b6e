// The scheduler's half of cluster.on_worker_failure = "restart": a new
// process registering with --rejoin takes back the rank of a dropped worker.
//
// Accepted only after the rendezvous, for a worker rank of this job that the
// failure policy dropped, under "restart", fewer than cluster.max_restarts
// times per rank, with the job's fingerprint and model layout. The node gets
// a new session token (so the process it replaces, if it wakes, is refused
// on its old connections), counts again in barriers and the end, and every
// other node hears kRejoined (servers re-admit it into their consistency
// policy and bind its new connection; allreduce workers re-form the
// collective). Anything else is refused with the reason; the job goes on.
#include <algorithm>
#include <random>

#include "common/base/errors.h"
#include "common/wire/security.h"
#include "common/wire/wire_archive.h"
#include "scheduler/scheduler.h"

namespace pstrain {

namespace {

std::string fresh_token() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device entropy;
  std::string token;
  for (int i = 0; i < 8; ++i) {
    const unsigned v = entropy();
    for (int k = 0; k < 4; ++k) token += kHex[(v >> (4 * k)) & 15u];
  }
  return token;
}

bool same_layout(const ParamLayout& a, const ParamLayout& b) {
  const auto& x = a.tensors();
  const auto& y = b.tensors();
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](const TensorSpec& p, const TensorSpec& q) {
           return p.name == q.name && p.shape == q.shape;
         });
}

// A rejoin for a rank not dropped: refused for good once that worker has
// finished, else for now (until the scheduler notices its failure, if it
// failed: heartbeat_timeout_ms).
[[noreturn]] void refuse_live_rank(bool finished, const std::string& why) {
  if (finished) throw ProtocolError(why);
  throw RetryLaterError(why);
}

}  // namespace

void Scheduler::on_rejoin(const PeerId& from, const Message& msg) {
  const std::string body = msg.text_payload();
  RegisterRequest req = wire_decode<RegisterRequest>(std::as_bytes(std::span(body.data(), body.size())), "register body");
  const std::string who = std::string(to_string(req.role)) + " rank " + std::to_string(req.requested_rank) + " from " +
                          req.host + " (pid " + std::to_string(req.pid) + ")";
  if (req.role != Role::kWorker || msg.header.role != Role::kWorker) {
    throw ProtocolError("rejoin of a " + std::string(to_string(req.role)) +
                        ": only workers rejoin (cluster.on_worker_failure = \"restart\")");
  }
  if (options_.security != nullptr && options_.security->curve) {
    // CURVE: as at registration, the key decides the role, and a per-worker
    // key the rank: worker-1's key cannot take back worker 0's rank.
    const char* key_role = key_of(msg);
    const std::optional<KeyOwner> owner = key_owner(key_role == nullptr ? "" : key_role);
    if (!owner || owner->role != Role::kWorker) {
      throw ProtocolError("rejoin: a " + std::string(key_role == nullptr ? "unknown" : key_role) +
                          " key cannot register as a worker");
    }
    bind_rank_to_key(*owner, key_role, req);
  }
  if (options_.cluster.on_worker_failure != WorkerFailurePolicy::kRestart) {
    throw ProtocolError("rejoin of " + who + ": refused, cluster.on_worker_failure is \"" +
                        std::string(to_string(options_.cluster.on_worker_failure)) + "\", not \"restart\"");
  }
  if (req.requested_rank < 0 || req.requested_rank >= options_.num_workers) {
    throw ProtocolError("rejoin of " + who + ": refused, the job has no worker rank " +
                        std::to_string(req.requested_rank) + " (it has " + std::to_string(options_.num_workers) +
                        "; a rejoin names the rank it takes back with --rank)");
  }
  Node* node = find(Role::kWorker, req.requested_rank);
  if (node == nullptr) throw ProtocolError("rejoin of " + who + ": refused, no such worker registered");
  if (!node->dropped) {
    const std::string state = node->done ? " has finished" : " is alive (pid " + std::to_string(node->request.pid) + ")";
    refuse_live_rank(node->done, "rejoin of " + who + ": refused, worker " + std::to_string(node->rank) + state +
                                     "; only a worker dropped from the job can be taken back");
  }
  if (node->rejoins >= options_.cluster.max_restarts) {
    throw ProtocolError("rejoin of " + who + ": refused, worker " + std::to_string(node->rank) + " was already taken back " +
                        std::to_string(node->rejoins) + " times (cluster.max_restarts = " +
                        std::to_string(options_.cluster.max_restarts) + ")");
  }
  if (req.job_fingerprint != node->request.job_fingerprint) {
    throw ProtocolError("rejoin of " + who + ": refused, it runs a different job: '" + req.job_fingerprint + "' vs '" +
                        node->request.job_fingerprint + "'");
  }
  req.layout.validate();
  if (!same_layout(req.layout, node->request.layout)) {
    throw ProtocolError("rejoin of " + who + ": refused, its model layout differs from the job's");
  }
  if (options_.security != nullptr && options_.security->curve) {
    const char* key_role = key_of(msg);
    if (key_role == nullptr || std::string(key_role) != "worker") {
      throw ProtocolError("rejoin of " + who + ": refused, not a worker's key");
    }
  }

  node->routing_id = from;
  node->request = std::move(req);
  node->token = fresh_token();
  node->dropped = false;
  node->told_dropped = false;
  node->done = false;
  node->last_seen = Clock::now();
  ++node->rejoins;
  // Barriers: the new process starts at the others' next number. The failed
  // process's arrival at a barrier still open does not count for it: the new
  // one comes itself (it joins below that checkpoint's step) or passes it
  // (it joins at that step), ps_rejoin.h.
  node->barrier_shift = 0;
  node->realign = true;
  for (auto& [seq, arrived] : barriers_) {
    if (std::erase(arrived, node->rank) > 0) {
      log_.info("worker " + std::to_string(node->rank) + "'s arrival at barrier '" + barrier_names_[seq] +
                "' was its failed process's: the barrier waits for the new one");
    }
  }

  // Everyone else first, so the servers usually know the new connection
  // before the worker's first request (it retries until they do).
  Header news;
  news.type = MsgType::kRejoined;
  news.role = Role::kScheduler;
  news.sender = 0;
  news.key = node->rank;
  news.step = node->rejoins;
  for (Node& n : nodes_) {
    if (&n == node || n.dropped || (n.role == Role::kWorker && n.done)) continue;
    send_quietly(n.routing_id, news, Payload::bytes(node->token));
  }

  RegisterReply reply;
  reply.rank = node->rank;
  reply.num_servers = options_.num_servers;
  reply.num_workers = options_.num_workers;
  reply.server_endpoints.resize(static_cast<std::size_t>(options_.num_servers));
  for (const Node& n : nodes_) {
    if (n.role == Role::kServer) reply.server_endpoints[static_cast<std::size_t>(n.rank)] = n.request.endpoint;
  }
  reply.layout = node->request.layout;
  reply.token = node->token;
  Header h;
  h.type = MsgType::kRegisterReply;
  h.role = Role::kScheduler;
  h.sender = 0;
  h.request_id = msg.header.request_id;
  h.key = next_barrier_seq_;  // its next barrier is the others' next
  h.step = node->rejoins;     // which take back of this rank (allreduce: names its rendezvous)
  send_quietly(node->routing_id, h, Payload::bytes(wire_encode(reply)));
  log_.warn("worker " + std::to_string(node->rank) + " rejoined the job: a new process from " + node->request.host +
            " (pid " + std::to_string(node->request.pid) + "), take " + std::to_string(node->rejoins) + " of " +
            std::to_string(options_.cluster.max_restarts) + " (cluster.on_worker_failure = \"restart\"); " +
            std::to_string(live_workers()) + " workers in the job");
}

}  // namespace pstrain
