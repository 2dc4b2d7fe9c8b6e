// The scheduler's side of elastic membership (docs/architecture.md,
// "Elastic membership"): requests to resize the job (the ctl file), the
// announcement of a change, its step boundary from the workers' answers, and
// the retirement of the workers a change does not keep.
#include <algorithm>
#include <charconv>

#include "common/base/errors.h"
#include "common/wire/wire_archive.h"
#include "scheduler/scheduler.h"

namespace pstrain {

namespace {
// What retired a rank while it was down: a change, or a request with none (kRetiredByRequest).
std::string retired_by_text(std::int64_t change) {
  return change == kRetiredByRequest ? std::string("a request for fewer workers")
                                     : "membership change " + std::to_string(change);
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text;
  for (const int r : ranks) {
    if (!text.empty()) text += ',';
    text += std::to_string(r);
  }
  return text;
}
}  // namespace

void Scheduler::take_ctl_requests() {
  if (!ctl_) return;
  for (const std::string& line : ctl_->read()) {
    int workers = 0;
    const char* first = line.data() + std::min<std::size_t>(line.size(), 8);
    const auto [end, ec] = std::from_chars(first, line.data() + line.size(), workers);
    if (!line.starts_with("workers ") || ec != std::errc() || end != line.data() + line.size()) {
      warnings_.warn(ctl_->file().string(), "ignored a request '" + line.substr(0, 64) + "': expected 'workers N'");
      continue;
    }
    request_workers(workers);
  }
}

void Scheduler::request_workers(int workers) {
  const std::string what = "request for " + std::to_string(workers) + " workers";
  const int live = members_.live_workers();
  // A worker down under on_worker_failure "restart" counts: a new process is on its way back.
  const std::vector<int> down = members_.restartable_workers();
  const int in_job = live + static_cast<int>(down.size());
  const std::string has = std::to_string(in_job) + (down.empty() ? "" : " (" + std::to_string(down.size()) + " of them down, restarting)");
  if (const std::optional<std::string> why = members_.resize_refusal(workers)) {
    log_.warn(what + " refused: " + *why);
    return;
  }
  if (change_ || !retiring_.empty()) {
    log_.warn(what + " refused: a membership change is under way (one at a time)");
    return;
  }
  if (workers == in_job) {
    log_.info(what + ": the job has " + has + " already");
    return;
  }
  if (workers > in_job) {
    // The launcher reads the same request and starts the workers with --join;
    // each joiner's registration starts (or joins) a change of reason "ctl".
    requested_grow_ = workers - in_job;
    grow_reason_ = "ctl";
    log_.info(what + ": the job has " + has + "; waiting for " + std::to_string(requested_grow_) +
              " workers to join (--join)");
    return;
  }
  requested_grow_ = 0;
  log_.info(what + ": the job has " + has + "; the workers that are down leave first, then the highest ranks");
  if (workers >= live) {
    // Only workers that are down leave, the highest first: they are in no step now, so no change is
    // needed (the others already share the data without them); their new processes are told to leave.
    for (int cut = in_job - workers, i = static_cast<int>(down.size()) - 1; cut > 0; --cut, --i) {
      retire_while_down(*members_.find(Role::kWorker, down[static_cast<std::size_t>(i)]), kRetiredByRequest);
    }
    return;
  }
  const std::vector<int>& staying = members_.live_worker_list();
  start_change(std::vector<int>(staying.begin(), staying.begin() + workers), "retire");
}

void Scheduler::start_change(std::vector<int> members, const std::string& reason) {
  change_.emplace(++changes_, std::move(members), reason);
  log_.info("membership change " + std::to_string(change_->id()) + " (" + reason + "): from " +
            members_.live_worker_ranks() + " to workers " + ranks_text(change_->members()) +
            "; waiting for every worker's next step");
  tell_workers(MsgType::kMembershipChange, change_->id(), ranks_text(change_->members()));
  settle_change();
}

void Scheduler::check_membership_answer(const Header& h, const StoreEntry& entry) {
  if (entry.key.starts_with(kJoinAckPrefix)) return check_join_ack(h, entry);
  if (h.role != Role::kWorker) throw ProtocolError("store set of key '" + entry.key + "': only workers answer a membership change");
  if (!change_) {
    throw ProtocolError("store set of key '" + entry.key.substr(0, 80) + "': no membership change is pending");
  }
  change_->answer(static_cast<int>(h.sender), entry.key, entry.value);
}

void Scheduler::settle_change() {
  if (!change_) return;
  if (!decided_) {
    const std::vector<int>& live = members_.live_worker_list();
    std::vector<int> finished(at_final_barrier_.begin(), at_final_barrier_.end());
    for (const int r : live) {
      const Member* m = members_.find(Role::kWorker, r);
      if (m != nullptr && m->done) finished.push_back(r);
    }
    if (!change_->answered_by(live, finished)) return;
    decided_ = DecidedChange{};
    decided_->boundary = change_->boundary(live);
    // Members that left meanwhile (a drop) are not in the change either; joiners not yet live are.
    for (const int r : change_->members()) {
      const Member* m = members_.find(Role::kWorker, r);
      const bool joining = m != nullptr && m->joining;
      if (joining || std::find(live.begin(), live.end(), r) != live.end()) decided_->members.push_back(r);
    }
    if (decided_->boundary) {
      // The boundary's epoch keeps its members at its start (the retirees
      // are still in it until the boundary, the joiners not yet); an epoch
      // asked for after it has the members (staying_workers).
      store_.get(std::string(kEpochMembersPrefix) + std::to_string(decided_->boundary->epoch),
                 [this] { return staying_workers(); });
      decided_->told_servers = ask_servers_to_admit(*decided_->boundary, decided_->members);
    }
  }
  if (!decided_->acks.empty()) return;  // a server has yet to admit a joiner
  publish_change();
}

void Scheduler::publish_change() {
  const std::optional<MembershipBoundary> b = decided_->boundary;
  const std::vector<int> members = decided_->members;
  const std::vector<int> live = members_.live_worker_list();
  if (b) {
    for (const int r : live) {
      if (std::find(members.begin(), members.end(), r) == members.end()) retiring_.insert(r);
    }
    retiring_change_ = change_->id();
    // A worker down now (restarting) that the change leaves out: a shrink does not keep it
    // (it chose among the live ones, counting it among those to leave); its rejoin must not
    // undo the change. One the shrink chose to keep, down since, and any a grow left out, come
    // back as after any restart.
    if (change_->reason() == "retire") {
      const std::vector<int>& chosen = change_->members();
      for (const int r : members_.restartable_workers()) {
        if (std::find(chosen.begin(), chosen.end(), r) == chosen.end()) {
          retire_while_down(*members_.find(Role::kWorker, r), change_->id());
        }
      }
    }
    enter_joiners(*b, members);
    log_.info("membership change " + std::to_string(change_->id()) + " (" + change_->reason() + "): from epoch " +
              std::to_string(b->epoch) + " step " + std::to_string(b->from_step) + " workers " + ranks_text(members) +
              " (" + std::to_string(live.size()) + " -> " + std::to_string(members.size()) + ")");
  } else {
    log_.info("membership change " + std::to_string(change_->id()) + ": no step is left to change");
    for (const int r : members) {
      Member* m = members_.find(Role::kWorker, r);
      if (m != nullptr && m->joining) abandon_join(*m, "no step of the job is left to join at");
    }
  }
  const std::string decision = format_decision(b, members, change_->reason());
  const std::string key = change_->decision_key();
  change_.reset();
  decided_.reset();
  for (const KvStore::ParkedGet& get : store_.set(key, decision)) {
    reply_store(get.routing_id, get.request, StoreEntry{key, decision});
  }
  parked_gets_count_.store(store_.parked(), std::memory_order_release);
  settle_barriers();  // a joiner counts from now on
}

std::string Scheduler::staying_workers() const {
  std::vector<int> staying;
  for (const int r : members_.live_worker_list()) {
    if (retiring_.count(r) == 0) staying.push_back(r);
  }
  return ranks_text(staying);
}

void Scheduler::on_retired(Member& node) {
  if (node.role != Role::kWorker || retiring_.count(node.rank) == 0) {
    throw ProtocolError(std::string(to_string(node.role)) + " " + std::to_string(node.rank) +
                        " said it retired, but no membership change left it out");
  }
  retiring_.erase(node.rank);
  members_.retire(node);
  members_.mark_done(node);  // not waited for, not checked for silence, its exit no failure
  const std::string reason = "worker " + std::to_string(node.rank) + " retired (a membership change left it out)";
  log_.info(reason + "; " + std::to_string(members_.live_workers()) + " workers go on");
  Header bye;
  bye.type = MsgType::kShutdown;
  bye.role = Role::kScheduler;
  bye.sender = 0;
  send_quietly(node.routing_id, bye);
  // The servers stop waiting for it as for a drop (its pushes before the boundary are all in).
  tell_servers_dropped(node.rank, reason, kDroppedRetired);
  settle_barriers();
  settle_change();
}

void Scheduler::retire_while_down(Member& node, std::int64_t change) {
  members_.retire(node);  // not waited for, its slot vacant
  retired_while_down_[node.rank] = change;
  const std::string reason = "worker " + std::to_string(node.rank) + " retired while it was down (" +
                             retired_by_text(change) +
                             " left it out); a new process of its rank is told to leave";
  log_.info(reason);
  tell_servers_dropped(node.rank, reason, kDroppedRetired);
}

void Scheduler::retire_rejoiner(const PeerId& from, const Header& request, const Member& node, std::int64_t change,
                                const std::string& who) {
  RegisterReply reply = members_.job_reply();
  reply.rank = node.rank;
  reply.layout = node.request.layout;
  reply.retired_by_change = change;
  Header h;
  h.type = MsgType::kRegisterReply;
  h.role = Role::kScheduler;
  h.sender = 0;
  h.request_id = request.request_id;
  send_quietly(from, h, Payload::bytes(wire_encode(reply)));
  log_.warn("rejoin of " + who + ": worker " + std::to_string(node.rank) + " retired while it was down (" +
            retired_by_text(change) + " left it out): told to leave without training");
}

void Scheduler::tell_servers_dropped(int rank, const std::string& reason, std::int64_t aux) {
  Header h;
  h.type = MsgType::kDropped;
  h.role = Role::kScheduler;
  h.sender = 0;
  h.key = rank;
  h.aux = aux;
  for (const Member& n : members_.all()) {
    if (n.role == Role::kServer && !n.dropped) send_quietly(n.routing_id, h, Payload::bytes(reason));
  }
}

void Scheduler::tell_workers(MsgType type, std::int64_t key, const std::string& text) {
  Header h;
  h.type = type;
  h.role = Role::kScheduler;
  h.sender = 0;
  h.key = key;
  for (const Member& n : members_.all()) {
    if (n.role == Role::kWorker && !n.dropped && !n.done && !n.joining) send_quietly(n.routing_id, h, Payload::bytes(text));
  }
}

void Scheduler::seed_resumed_history() {
  const std::vector<std::int64_t>& v = options_.resume_history;
  std::size_t i = 0;
  while (i < v.size()) {  // [epoch, count, ranks...] or [epoch, -from_step, count, ranks...]
    const int epoch = static_cast<int>(v[i]);
    std::size_t at = i + 1;
    std::int64_t from = 0;
    if (at < v.size() && v[at] < 0) from = -v[at++];
    if (at >= v.size() || v[at] < 1 || v[at] > static_cast<std::int64_t>(v.size() - at - 1)) {
      throw ConfigError("scheduler: the checkpoint's epoch_members at position " + std::to_string(i) +
                        " is not [epoch, (-from_step,) count, ranks...]; cannot resume its membership");
    }
    std::string ranks;
    for (std::int64_t k = 0; k < v[at]; ++k) ranks += (ranks.empty() ? "" : ",") + std::to_string(v[at + 1 + k]);
    if (from == 0) {
      store_.set(std::string(kEpochMembersPrefix) + std::to_string(epoch), ranks);
    } else {
      store_.set(std::string(kMembershipPrefix) + std::to_string(++changes_),
                 std::to_string(epoch) + " " + std::to_string(from) + " " + ranks);
    }
    i = at + 1 + static_cast<std::size_t>(v[at]);
  }
  if (!v.empty()) {
    log_.info("resumed the checkpoint's membership history: " + std::to_string(changes_) +
              " change(s) before it; the next is number " + std::to_string(changes_ + 1));
  }
}

}  // namespace pstrain
