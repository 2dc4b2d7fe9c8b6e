// The scheduler's half of the "restart" failure policies: a new process
// registering after the rendezvous takes back a failed rank. Which rejoin is
// admitted is the membership's rule (scheduler/membership.h); here the
// scheduler checks the sender's key, applies it and tells the nodes.
//
// A worker (cluster.on_worker_failure = "restart", --rejoin) takes back the
// rank of a dropped worker.
// Accepted only after the rendezvous, for a worker rank of this job that the
// failure policy dropped, under "restart", fewer than cluster.max_restarts
// times per rank, with the job's fingerprint and model layout. The node gets
// a new session token (so the process it replaces, if it wakes, is refused
// on its old connections), counts again in barriers and the end, and every
// other node hears kRejoined (servers re-admit it into their consistency
// policy and bind its new connection; allreduce workers re-form the
// collective). Anything else is refused with the reason; the job goes on.
// A rank a shrink retired while it was down (retire_while_down, elastic.cc)
// is admitted the same way, then told to leave: its register reply says which
// change retired it, and it is not taken back.
// A server (cluster.on_server_failure = "restart") takes back its restarting
// rank: it gets the job's layout and worker tokens, and the workers its new
// endpoint (kServerBack).
#include <string>
#include <string_view>

#include "common/base/errors.h"
#include "common/wire/security.h"
#include "common/wire/wire_archive.h"
#include "scheduler/scheduler.h"

namespace pstrain {

using std::chrono::milliseconds;

void Scheduler::on_rejoin(const PeerId& from, const Message& msg) {
  const std::string body = msg.text_payload();
  RegisterRequest req = wire_decode<RegisterRequest>(std::as_bytes(std::span(body.data(), body.size())), "register body");
  const std::string who = std::string(to_string(req.role)) + " rank " + std::to_string(req.requested_rank) + " from " +
                          req.host + " (pid " + std::to_string(req.pid) + ")";
  if (req.role != Role::kWorker || msg.header.role != Role::kWorker) {
    throw ProtocolError("rejoin of a " + std::string(to_string(req.role)) +
                        ": only workers rejoin (cluster.on_worker_failure = \"restart\")");
  }
  // Mode "off": the job's secret, as at registration.
  check_answer(from, req, "rejoin");
  // CURVE: as at registration, the key decides the role, and a per-worker
  // key the rank: worker-1's key cannot take back worker 0's rank.
  check_key(msg, req, "rejoin");
  Member& node = members_.admit_worker_rejoin(req, who);
  if (change_ && decided_) {  // its members are fixed; the rejoiner learns the decision once it is published
    throw RetryLaterError("rejoin of " + who + ": a membership change is being decided; asked again");
  }
  if (options_.security != nullptr && options_.security->curve) {
    // A worker's key: the shared one or any per-worker one (check_key bound
    // a per-worker key to its own rank).
    const char* key_name = key_of(msg);
    const std::optional<KeyOwner> owner = key_owner(key_name == nullptr ? "" : key_name);
    if (!owner || owner->role != Role::kWorker) {
      throw ProtocolError("rejoin of " + who + ": refused, not a worker's key");
    }
  }
  if (const auto retired = retired_while_down_.find(node.rank); retired != retired_while_down_.end()) {
    return retire_rejoiner(from, msg.header, node, retired->second, who);  // a change left it out while it was down
  }
  members_.take_back_worker(node, from, std::move(req), fresh_token(), Clock::now());
  router_->add_member(from);  // a member of the memory budget before its reply (scheduler_budget.h)
  // Barriers: the new process starts at the others' next number. The failed
  // process's arrival at a barrier still open does not count for it: the new
  // one comes itself (it joins below that checkpoint's step) or passes it
  // (it joins at that step), ps_rejoin.h.
  for (const std::string& name : barriers_.rejoin(node.rank)) {
    log_.info("worker " + std::to_string(node.rank) + "'s arrival at barrier '" + name +
              "' was its failed process's: the barrier waits for the new one");
  }
  announce_rejoin(node, msg.header);
}

void Scheduler::announce_rejoin(Member& node, const Header& request) {
  // Everyone else first, so the servers usually know the new connection
  // before the worker's first request (it retries until they do).
  Header news;
  news.type = MsgType::kRejoined;
  news.role = Role::kScheduler;
  news.sender = 0;
  news.key = node.rank;
  news.step = node.rejoins;
  for (const Member& n : members_.all()) {
    if (&n == &node || n.dropped || (n.role == Role::kWorker && n.done)) continue;
    send_quietly(n.routing_id, news, Payload::bytes(node.token));
  }

  // Its next barrier is the others' next; the step says which take back of
  // this rank it is (allreduce: names its rendezvous).
  reply_admitted_worker(node, request, barriers_.next_seq(), node.rejoins);
  // A change whose answers still come waits for every live worker's, this one's too: it is told (it
  // answers before its first pull, worker/train/ps_rejoin.h). A grow keeps it (it was announced
  // without it while it was dropped); a shrink keeps the ranks it chose.
  if (change_) {
    if (change_->reason() != "retire") change_->add_member(node.rank);
    Header h;
    h.type = MsgType::kMembershipChange;
    h.role = Role::kScheduler;
    h.sender = 0;
    h.key = change_->id();
    std::string ranks;
    for (const int r : change_->members()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    send_quietly(node.routing_id, h, Payload::bytes(ranks));
  }
  log_.warn("worker " + std::to_string(node.rank) + " rejoined the job: a new process from " + node.request.host +
            " (pid " + std::to_string(node.request.pid) + "), take " + std::to_string(node.rejoins) + " of " +
            std::to_string(options_.cluster.max_restarts) + " (cluster.on_worker_failure = \"restart\"); " +
            std::to_string(members_.live_workers()) + " workers in the job");
}

void Scheduler::on_server_rejoin(const PeerId& from, const Message& msg) {
  const std::string body = msg.text_payload();
  RegisterRequest req = wire_decode<RegisterRequest>(std::as_bytes(std::span(body.data(), body.size())), "register body");
  if (req.role != Role::kServer || msg.header.role != Role::kServer) {
    throw ProtocolError("register after the rendezvous: the job is already running");
  }
  check_answer(from, req, "rejoin of a server");
  if (options_.security != nullptr && options_.security->curve) {
    const char* key_role = key_of(msg);
    if (key_role == nullptr || std::string_view(key_role) != "server") {
      throw ProtocolError("rejoin: a " + std::string(key_role == nullptr ? "unknown" : key_role) +
                          " key cannot register as a server");
    }
  }
  const std::string who = "rejoin of a server from " + req.host + " (pid " + std::to_string(req.pid) + ")";
  Member& node = members_.admit_server_rejoin(req, who, Clock::now());
  members_.take_back_server(node, from, std::move(req), fresh_token(), Clock::now());
  router_->add_member(from);  // a member of the memory budget before its reply (scheduler_budget.h)
  RegisterReply reply = members_.job_reply();
  reply.rank = node.rank;
  reply.worker_tokens = members_.worker_tokens();
  reply.token = node.token;
  Header h;
  h.type = MsgType::kRegisterReply;
  h.role = Role::kScheduler;
  h.sender = 0;
  send_quietly(node.routing_id, h, Payload::bytes(wire_encode(reply)));
  const auto down_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - node.failed_at).count();
  log_.info("server " + std::to_string(node.rank) + " rejoined from " + node.request.host + " (pid " +
            std::to_string(node.request.pid) + ") at " + node.request.endpoint + ", " + std::to_string(down_ms) +
            " ms after it failed (restart " + std::to_string(node.restarts) + " of at most " +
            std::to_string(options_.cluster.max_restarts) + "); workers reconnect");
  tell_workers(MsgType::kServerBack, node.rank, node.request.endpoint);
}

}  // namespace pstrain
