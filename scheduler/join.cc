// The scheduler's side of growing a job (docs/architecture.md, "Elastic
// membership"): a worker registering with --join (kRegister, aux
// kRegisterJoin) takes a vacant slot and starts a membership change that
// keeps every live worker and adds it. Once the change's boundary is
// decided, every server admits the joiner from that step (kWorkerJoining,
// acknowledged through the store under kJoinAckPrefix) before the decision
// is published: no sync step from the boundary completes without the
// joiner's push, and no server refuses its pushes as a vacant slot's. The
// joiner learns where it starts from its key under kJoinStartPrefix.
#include <algorithm>
#include <charconv>
#include <string>

#include "common/base/errors.h"
#include "common/wire/wire_archive.h"
#include "scheduler/scheduler.h"

namespace pstrain {

void Scheduler::handle_join(const PeerId& from, const Message& msg, bool registering) {
  try {
    if (registering) throw RetryLaterError("join: the job has not started yet (its rendezvous is not over)");
    on_join(from, msg);
  } catch (const ProtocolError& e) {
    const bool later = dynamic_cast<const RetryLaterError*>(&e) != nullptr;
    if (!later) log_.warn(e.what());
    refuse(from, msg.header, e.what(), later ? Status::kRetryLater : Status::kRefused);
  }
}

void Scheduler::on_join(const PeerId& from, const Message& msg) {
  const std::string body = msg.text_payload();
  RegisterRequest req = wire_decode<RegisterRequest>(std::as_bytes(std::span(body.data(), body.size())), "register body");
  const std::string who = "worker" + (req.requested_rank >= 0 ? " rank " + std::to_string(req.requested_rank) : "") +
                          " from " + req.host + " (pid " + std::to_string(req.pid) + ")";
  if (req.role != Role::kWorker || msg.header.role != Role::kWorker) {
    throw ProtocolError("join of a " + std::string(to_string(req.role)) + ": refused, only workers join a running job");
  }
  check_answer(from, req, "join");
  check_key(msg, req, "join");
  const int rank = members_.admit_worker_join(req, who);
  if (change_ && decided_) {
    throw RetryLaterError("join of " + who + ": a membership change is being decided; asked again");
  }
  if (!change_ && !retiring_.empty()) {
    throw RetryLaterError("join of " + who + ": workers are still retiring from the last change; asked again");
  }
  Member& node = members_.add_joined_worker(from, std::move(req), rank, fresh_token(), Clock::now());
  retired_while_down_.erase(rank);  // a slot retired while down, taken: a --rejoin for it is refused from now on
  router_->add_member(from);  // a member of the memory budget before its reply (scheduler_budget.h)
  reply_admitted_worker(node, msg.header);
  log_.info("worker " + std::to_string(rank) + " joins from " + node.request.host + " (pid " +
            std::to_string(node.request.pid) + "): it enters the job at the next membership change's boundary");
  if (requested_grow_ > 0) --requested_grow_;
  const std::string reason = grow_reason_;
  if (requested_grow_ == 0) grow_reason_ = "join";
  if (change_) {  // the answers are still coming: it joins at the same boundary
    change_->add_member(rank);
    return;
  }
  std::vector<int> members = members_.live_worker_list();
  members.insert(std::upper_bound(members.begin(), members.end(), rank), rank);
  start_change(std::move(members), reason);
}

void Scheduler::reply_admitted_worker(const Member& node, const Header& request, std::int64_t key, std::int64_t step) {
  RegisterReply reply = members_.job_reply();
  reply.rank = node.rank;
  reply.layout = node.request.layout;
  reply.token = node.token;
  Header h;
  h.type = MsgType::kRegisterReply;
  h.role = Role::kScheduler;
  h.sender = 0;
  h.request_id = request.request_id;
  h.key = key;
  h.step = step;
  // A rejoiner entering at a checkpoint's step writes its part only when the
  // others had not passed that barrier yet (ps_rejoin.h): the last one they passed.
  h.aux = barriers_.checkpoint_released();
  send_quietly(node.routing_id, h, Payload::bytes(wire_encode(reply)));
}

bool Scheduler::ask_servers_to_admit(const MembershipBoundary& b, const std::vector<int>& members) {
  std::vector<Member*> joiners;
  for (const int r : members) {
    Member* m = members_.find(Role::kWorker, r);
    if (m != nullptr && m->joining) joiners.push_back(m);
  }
  if (joiners.empty()) return false;
  if (b.global_step < 0) throw ProtocolError("membership change: the workers' answers did not say the job's step");
  decided_->acks.clear();
  for (const Member& n : members_.all()) {
    if (n.role != Role::kServer || n.dropped || n.restarting) continue;
    for (const Member* j : joiners) decided_->acks.insert({n.rank, j->rank});
  }
  for (const Member* j : joiners) {
    Header h;
    h.type = MsgType::kWorkerJoining;
    h.role = Role::kScheduler;
    h.sender = 0;
    h.key = j->rank;
    h.step = b.global_step;
    h.aux = change_->id();
    for (const Member& n : members_.all()) {
      if (n.role == Role::kServer && decided_->acks.count({n.rank, j->rank}) != 0) {
        send_quietly(n.routing_id, h, Payload::bytes(j->token));
      }
    }
  }
  log_.info("membership change " + std::to_string(change_->id()) + ": the servers admit " +
            std::to_string(joiners.size()) + " joining worker(s) from step " + std::to_string(b.global_step));
  return !decided_->acks.empty();
}

void Scheduler::check_join_ack(const Header& h, const StoreEntry& entry) {
  // "<change>/<server>/<joiner>": one per joiner and server.
  const std::string prefix = std::string(kJoinAckPrefix) + (change_ ? std::to_string(change_->id()) : "?") + "/" +
                             std::to_string(h.sender) + "/";
  int joiner = -1;
  if (entry.key.starts_with(prefix)) {
    const std::string rest = entry.key.substr(prefix.size());
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), joiner);
    if (ec != std::errc() || end != rest.data() + rest.size()) joiner = -1;
  }
  const std::pair<int, int> ack{static_cast<int>(h.sender), joiner};
  if (h.role != Role::kServer || joiner < 0 || !decided_ || decided_->acks.count(ack) == 0) {
    throw ProtocolError("store set of key '" + entry.key.substr(0, 80) + "': not an acknowledgement the scheduler waits for");
  }
  decided_->acks.erase(ack);
  if (entry.value == "ok") return;
  // The server could not admit a joiner: the joins of this change are abandoned.
  const std::string why = "server " + std::to_string(h.sender) + " refused the join: " + entry.value.substr(0, 200);
  for (const int r : std::vector<int>(decided_->members)) {
    Member* m = members_.find(Role::kWorker, r);
    if (m != nullptr && m->joining) abandon_join(*m, why);
  }
}

void Scheduler::abandon_join(Member& node, const std::string& reason) {
  if (options_.on_abandoned_join) {  // for the run's summary and status line: no worker's records show it
    AbandonedJoin record;
    record.rank = node.rank;
    record.change = change_ ? change_->id() : -1;
    record.pid = node.request.pid;
    record.host = node.request.host;
    record.time_s = log_.clock().now_s();
    record.reason = reason;
    options_.on_abandoned_join(record);
  }
  members_.abandon_join(node);
  members_.mark_done(node);  // its exit is no failure, nothing waits for it
  if (change_) change_->remove_member(node.rank);
  if (decided_) {
    std::erase(decided_->members, node.rank);
    if (!decided_->acks.empty() || decided_->told_servers) {
      // The servers admitted it (or may have): they stop waiting for it as for a drop.
      tell_servers_dropped(node.rank, reason, kDroppedFailed);
    }
  }
  log_.warn("the join of worker " + std::to_string(node.rank) + " was abandoned (" + reason +
            "): its slot is vacant again; the job goes on with " + std::to_string(members_.live_workers()) + " workers");
  set_join_start(node, "none");
  Header bye;
  bye.type = MsgType::kShutdown;
  bye.role = Role::kScheduler;
  bye.sender = 0;
  send_quietly(node.routing_id, bye);
}

void Scheduler::set_join_start(const Member& node, const std::string& value) {
  const std::string key = std::string(kJoinStartPrefix) + std::to_string(node.rank) + "/" + node.token;
  for (const KvStore::ParkedGet& get : store_.set(key, value)) reply_store(get.routing_id, get.request, StoreEntry{key, value});
  parked_gets_count_.store(store_.parked(), std::memory_order_release);
}

bool Scheduler::counted_joiner(int rank, std::int64_t seq) { return counted_joiners_.erase({rank, seq}) != 0; }

// The others take a checkpoint's barrier after its step's predecessor, in
// order; every one of a step up to the last released is passed. Those of the
// steps after it and before the joiner's first are still to come (the most
// advanced worker is at most there: its answer was the step after its next),
// whether or not a worker has arrived at the first yet: the joiner, whose
// pull of its first step waits for the step before, cannot take them, so it
// is counted in each at once (no reply goes to it for them).
std::int64_t Scheduler::count_joiner_in_checkpoints(int r, std::int64_t step) {
  std::int64_t seq = barriers_.next_seq();
  // 0 (SchedulerOptions not told the interval): only a checkpoint a worker waits at is known.
  const std::int64_t every = options_.checkpoint_interval;
  std::int64_t from = checkpoint_step_of(barriers_.last_released()) + 1;
  const std::int64_t open = checkpoint_step_of(barriers_.name_of(seq));
  if (open > 0) from = open;  // a worker waits there: its name says which
  if (from <= 0) from = std::max<std::int64_t>(1, step - 1);  // none released yet: at most the step before's
  for (std::int64_t t = from; t < step; ++t) {
    if (every > 0 ? t % every != 0 : t != open) continue;
    barriers_.arrive(r, seq, "checkpoint " + std::to_string(t));
    counted_joiners_.insert({r, seq});
    ++seq;
  }
  return seq;
}

void Scheduler::enter_joiners(const MembershipBoundary& b, const std::vector<int>& members) {
  for (const int r : members) {
    Member* m = members_.find(Role::kWorker, r);
    if (m == nullptr || !m->joining) continue;
    members_.enter_joined(*m);
    // Its barriers go on from the others' next, counted at once in the
    // checkpoints before its first step (count_joiner_in_checkpoints). The
    // checkpoint of its first step (the others take it after the step before)
    // it takes itself, without a part, unless the others finished it already
    // (the last flag of its start).
    const std::string own = "checkpoint " + std::to_string(b.global_step);
    const std::int64_t first = count_joiner_in_checkpoints(r, b.global_step);
    const bool take_own = barriers_.last_released() != own;
    set_join_start(*m, std::to_string(change_->id()) + " " + std::to_string(b.epoch) + " " +
                           std::to_string(b.from_step) + " " + std::to_string(b.global_step) + " " +
                           std::to_string(first) + " " + (take_own ? "1" : "0"));
    log_.info("worker " + std::to_string(r) + " entered the job at step " + std::to_string(b.global_step) +
              " (epoch " + std::to_string(b.epoch) + " step " + std::to_string(b.from_step) + ")");
  }
}

}  // namespace pstrain
