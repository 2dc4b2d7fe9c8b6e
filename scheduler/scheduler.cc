#include "scheduler/scheduler.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "common/base/errors.h"
#include "common/base/json_line.h"
#include "common/wire/barrier_names.h"
#include "common/wire/wire_archive.h"
#include "scheduler/scheduler_budget.h"

namespace pstrain {

using std::chrono::milliseconds;

namespace {
EndpointOptions scheduler_endpoint_options(const SchedulerOptions& options) {
  EndpointOptions o;
  o.socket = SocketOptions{std::int64_t{16} << 20, milliseconds(2000), options.security};
  o.socket.receive_hwm = kSchedulerReceiveHwm;  // the received queues' bound (scheduler/scheduler_budget.h)
  o.limits = DecodeLimits{std::int64_t{16} << 20};
  o.traffic = options.traffic;
  return o;
}
}  // namespace

Scheduler::Scheduler(Transport& transport, SchedulerOptions options, Logger& log)
    : Scheduler(nullptr, &transport, std::move(options), log) {}

Scheduler::Scheduler(std::unique_ptr<Transport> transport, SchedulerOptions options, Logger& log)
    : Scheduler(std::move(transport), nullptr, std::move(options), log) {}

Scheduler::Scheduler(std::unique_ptr<Transport> owned, Transport* transport, SchedulerOptions options, Logger& log)
    : owned_transport_(std::move(owned)), transport_(transport != nullptr ? *transport : *owned_transport_),
      options_(std::move(options)), log_(log),
      zap_(transport_.authenticate(options_.security, log)),
      router_(transport_.listen(options_.bind_endpoint, scheduler_endpoint_options(options_))),
      warnings_(log),
      members_(options_.num_servers, options_.num_workers, options_.cluster, options_.initial_workers),
      store_(options_.cluster.timeout_ms),
      liveness_(options_.cluster.heartbeat_interval_ms, options_.cluster.heartbeat_timeout_ms),
      gate_(make_gate(options_.security)) {
  if (options_.num_servers < 0 || options_.num_workers < 1) {
    throw ConfigError("scheduler: need at least 1 worker and 0 or more servers, got " +
                      std::to_string(options_.num_workers) + " workers and " + std::to_string(options_.num_servers) +
                      " servers");
  }
  endpoint_ = router_->address();
  limit_scheduler_memory(*router_, options_.cluster, options_.num_servers + options_.num_workers, 0, true, log_);
  if (!options_.exits_file.empty()) exits_.emplace(options_.exits_file, 4096);  // a longer line is no report
  if (!options_.ctl_file.empty()) ctl_.emplace(options_.ctl_file, 256);
}

namespace {

// A refused request's status: kRetryLater when the same request may be
// granted later (RetryLaterError), else kRefused.
Status refusal_status(const ProtocolError& e) {
  return dynamic_cast<const RetryLaterError*>(&e) != nullptr ? Status::kRetryLater : Status::kRefused;
}

}  // namespace

void Scheduler::refuse(const PeerId& from, const Header& request, const std::string& why, Status status) {
  warnings_.warn(from.name(), why);
  Header reply;
  reply.type = MsgType::kError;
  reply.role = Role::kScheduler;
  reply.sender = 0;
  reply.status = status;
  reply.request_id = request.request_id;
  reply.key = request.key;
  reply.step = request.step;
  send_quietly(from, reply, Payload::bytes(why.substr(0, kMaxBodyBytes)));
}

void Scheduler::send_quietly(const PeerId& to, const Header& header, Payload payload) {
  try {
    router_->send(to, header, std::move(payload));
  } catch (const TransportError& e) {
    // The peer has gone (ROUTER_MANDATORY: EHOSTUNREACH): nobody to answer.
    // A heartbeat's says nothing new: the node's exit report or its silence
    // is how its failure is known and told.
    if (header.type == MsgType::kHeartbeat) return;
    if (unreachable_replies_++ == 0) log_.info(std::string("a reply found its peer gone: ") + e.what());
  }
}

void Scheduler::run() {
  seed_resumed_history();
  const std::vector<int>& initial = members_.initial_workers();
  std::string ranks;  // a resume at a checkpoint's membership names its ranks
  for (const int r : initial) ranks += (ranks.empty() ? " (ranks " : ",") + std::to_string(r);
  const bool first_n = initial.back() + 1 == static_cast<int>(initial.size());
  log_.info("listening on " + endpoint_ + " for " + std::to_string(options_.num_servers) + " servers and " +
            std::to_string(initial.size()) + " workers" + (first_n ? "" : ranks + ": the checkpoint's members)"));
  {
    TraceSpan span(options_.trace, TraceLevel::kSteps, "registration", "scheduler");
    registration();
    assign_ranks();
  }
  TraceSpan span(options_.trace, TraceLevel::kSteps, "job", "scheduler");
  serve_until_done();
  span.end();
  broadcast(MsgType::kShutdown, "");
  log_.info("all workers done; job finished");
}

void Scheduler::registration() {
  const auto deadline = Clock::now() + milliseconds(options_.cluster.timeout_ms);
  while (!members_.complete()) {
    if (Clock::now() > deadline) {
      fail("registration: waited " + std::to_string(options_.cluster.timeout_ms) + " ms; " + members_.roster());
    }
    PeerId from;
    try {
      auto env = router_->receive(milliseconds(200), &from);
      if (env) {
        sender_key_ = env->user_id;
        handle(env->from, env->message, true);
      }
    } catch (const ProtocolError& e) {
      refuse(from, Header{}, std::string("malformed message during registration: ") + e.what());
    }
  }
}

void Scheduler::check_key(const Message& msg, RegisterRequest& req, const char* what) const {
  if (options_.security == nullptr || !options_.security->curve) return;
  // CURVE: the role is bound to the key (the ZAP handler's user id): a
  // worker's key cannot take a server's slot, nor a server's a worker's; a
  // per-worker key decides the rank: worker-1's key cannot take worker 0's.
  const char* key_role = key_of(msg);
  const std::optional<KeyOwner> owner = key_owner(key_role == nullptr ? "" : key_role);
  if (!owner || owner->role != req.role) {
    throw ProtocolError(std::string(what) + ": a " + std::string(key_role == nullptr ? "unknown" : key_role) +
                        " key cannot register as a " + std::string(to_string(req.role)));
  }
  bind_rank_to_key(*owner, key_role, req);
}

void Scheduler::on_register(const PeerId& from, const Message& msg) {
  const std::string body = msg.text_payload();
  RegisterRequest req = wire_decode<RegisterRequest>(std::as_bytes(std::span(body.data(), body.size())), "register body");
  if (req.role == Role::kScheduler || req.role != msg.header.role) {
    throw ProtocolError("register: role " + std::string(to_string(req.role)) + " cannot register");
  }
  check_answer(from, req, "register");
  check_key(msg, req, "register");
  const Member& node = members_.admit(from, std::move(req), Clock::now());
  router_->add_member(from);  // no longer a stranger to the memory budget (scheduler/scheduler_budget.h)
  log_.info("registered " + std::string(to_string(node.role)) + " from " + node.request.host + " (pid " +
            std::to_string(node.request.pid) + "); " + members_.roster());
}

std::string Scheduler::fresh_token() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device entropy;
  std::string token;
  for (int i = 0; i < 8; ++i) {
    const unsigned v = entropy();
    for (int k = 0; k < 4; ++k) token += kHex[(v >> (4 * k)) & 15u];
  }
  return token;
}

void Scheduler::assign_ranks() {
  members_.assign_ranks();
  // Every worker must describe the same model.
  if (const std::optional<std::string> mismatch = members_.layout_mismatch()) fail(*mismatch);
  RegisterReply reply = members_.job_reply();
  for (Member& n : members_.all()) n.token = fresh_token();
  const std::vector<std::string> worker_tokens = members_.worker_tokens();
  limit_scheduler_memory(*router_, options_.cluster, static_cast<int>(members_.all().size()),
                         largest_register_reply(reply, worker_tokens), false, log_);
  for (Member& n : members_.all()) {
    reply.rank = n.rank;
    reply.token = n.token;
    reply.worker_tokens = n.role == Role::kServer ? worker_tokens : std::vector<std::string>{};
    Header h;
    h.type = MsgType::kRegisterReply;
    h.role = Role::kScheduler;
    h.sender = 0;
    // A node that registered and left before the rendezvous is not here to
    // read it: counted and dropped (it then misses its heartbeats).
    send_quietly(n.routing_id, h, Payload::bytes(wire_encode(reply)));
    n.last_seen = Clock::now();
  }
  log_.info("rendezvous complete: " + std::to_string(reply.layout.tensors().size()) + " tensors, " +
            std::to_string(reply.layout.total_elems()) + " parameters");
}

void Scheduler::serve_until_done() {
  while (!members_.workers_done(Clock::now())) {
    PeerId from;
    try {
      auto env = router_->receive(liveness_.poll_interval(), &from);
      if (env) {
        sender_key_ = env->user_id;
        handle(env->from, env->message, false);
      }
    } catch (const ProtocolError& e) {
      refuse(from, Header{}, std::string("malformed message: ") + e.what());
    }
    // Scans of every node or parked get, and the launcher's exit reports: at most once a tick,
    // not after every message.
    if (liveness_.scan_due(Clock::now())) {
      expire_store_gets();
      take_exit_reports();
      check_liveness();
      take_ctl_requests();
    }
    send_heartbeats();
    router_->give_back_memory();  // after a flood of unsent replies has drained
  }
}

void Scheduler::handle_register(const PeerId& from, const Message& msg, bool registering) {
  const Header& h = msg.header;
  if (!registering) take_exit_reports();  // a rejoin's predecessor may have just exited: know it first
  if (!registering && h.role == Role::kServer) {
    try {
      on_server_rejoin(from, msg);
    } catch (const ProtocolError& e) {
      refuse(from, h, e.what(), refusal_status(e));
    }
    return;
  }
  if (h.aux == kRegisterJoin) return handle_join(from, msg, registering);
  if (!registering && h.aux != kRegisterRejoin) {
    throw ProtocolError("register after the rendezvous: the job is already running");
  }
  try {
    if (!registering) {
      on_rejoin(from, msg);
      return;
    }
    if (h.aux == kRegisterRejoin) {  // its predecessor may have registered and died before the others did
      throw RetryLaterError("rejoin before the rendezvous completed: nothing to rejoin");
    }
    on_register(from, msg);
  } catch (const ProtocolError& e) {
    refuse(from, h, e.what(), refusal_status(e));
  }
}

void Scheduler::handle_unregistered(const PeerId& from, const Message& msg) {
  const Header& h = msg.header;
  if (h.type == MsgType::kAbort) {
    // Only a node that registered on this connection can fail the job now.
    if (const Member* n = members_.on_connection(from)) {
      fail("a " + std::string(to_string(n->role)) + " (" + n->request.host + ", pid " +
           std::to_string(n->request.pid) + ") failed during registration: " + msg.text_payload());
    }
    throw ProtocolError("abort from a connection that has not registered: refused");
  }
  throw ProtocolError(std::string(to_string(h.type)) + " before the rendezvous completed");
}

void Scheduler::tell_to_exit(Member& node, const std::string& said, const std::string& why) {
  // Once, on its main connection (the heartbeat connection reads nothing).
  if (node.told_dropped) return;
  node.told_dropped = true;
  Header r;
  r.type = MsgType::kAbort;
  r.role = Role::kScheduler;
  r.sender = 0;
  log_.info(said);
  send_quietly(node.routing_id, r, Payload::bytes(why));
}

void Scheduler::tell_dropped(Member& node) {
  // It was dropped while silent (e.g. stopped) and speaks again.
  const std::string name = "worker " + std::to_string(node.rank);
  tell_to_exit(node, name + " speaks again after it was dropped: told to exit",
               name + " was dropped from the job (cluster.on_worker_failure = \"" +
                   std::string(to_string(options_.cluster.on_worker_failure)) + "\"); the others went on without it: exit");
}

void Scheduler::tell_replaced(Member& node) {
  const std::string name = "server " + std::to_string(node.rank);
  tell_to_exit(node, name + " speaks again after it was declared failed: told to exit (its replacement takes its place)",
               name + " was declared failed (" + node.failure +
                   "); the job waits for its replacement (cluster.on_server_failure = \"restart\"): exit");
}

void Scheduler::handle(const PeerId& from, const Message& msg, bool registering) {
  const Header& h = msg.header;
  if (h.type == MsgType::kChallenge) return on_challenge(from, msg);
  if (h.type == MsgType::kRegister) return handle_register(from, msg, registering);
  if (registering) return handle_unregistered(from, msg);
  Member* node = members_.find(h.role, h.sender);
  if (node == nullptr) {
    throw ProtocolError(std::string(to_string(h.type)) + " from unknown " + std::string(to_string(h.role)) + " " +
                        std::to_string(h.sender));
  }
  const bool heartbeat_connection = h.type == MsgType::kHeartbeat && from.bytes() == "h" + node->token;
  if (!heartbeat_connection && node->routing_id != from) {
    throw ProtocolError(std::string(to_string(h.type)) + " claiming to be " + std::string(to_string(h.role)) + " " +
                        std::to_string(h.sender) + " from a connection that is not the one it registered on: refused");
  }
  if (node->dropped) return tell_dropped(*node);
  if (node->restarting) return tell_replaced(*node);
  node->last_seen = Clock::now();
  switch (h.type) {
    case MsgType::kHeartbeat: return;
    case MsgType::kBarrier:
      if (node->done) {
        throw ProtocolError("barrier from worker " + std::to_string(node->rank) +
                            ", which said done: a worker that is done takes no more barriers");
      }
      on_barrier(msg);
      return;
    case MsgType::kStoreSet:
    case MsgType::kStoreGet: on_store(from, msg); return;
    case MsgType::kDone:
      if (h.aux == kDoneRetired) return on_retired(*node);
      on_done(*node);
      return;
    case MsgType::kAbort:
      if (node->role == Role::kWorker) {
        worker_failed(*node, "worker " + std::to_string(node->rank) + " failed: " + msg.text_payload());
        return;
      }
      if (node->role == Role::kServer) {
        server_failed(*node, "server " + std::to_string(node->rank) + " failed: " + msg.text_payload());
        return;
      }
      fail(std::string(to_string(node->role)) + " " + std::to_string(node->rank) + " failed: " + msg.text_payload());
    default:
      throw ProtocolError("unexpected " + std::string(to_string(h.type)) + " at the scheduler");
  }
}

void Scheduler::on_barrier(const Message& msg) {
  const Header& h = msg.header;
  if (h.role != Role::kWorker) throw ProtocolError("barrier from a " + std::string(to_string(h.role)) + ": only workers take barriers");
  const std::string name = msg.has_payload ? msg.text_payload() : std::string();
  const Barriers::Arrival arrival = barriers_.arrive(h.sender, h.key, name);
  if (arrival != Barriers::Arrival::kPassed && log_.enabled(LogLevel::kDebug)) {
    log_.debug("worker " + std::to_string(h.sender) + " arrived at barrier '" + name + "'");
  }
  if (name == kFinalBarrier) at_final_barrier_.insert(static_cast<int>(h.sender));
  if (arrival == Barriers::Arrival::kPassed) {
    // A rejoined worker's first barrier: a checkpoint the others had
    // finished before it rejoined (Barriers::arrive), answered at once.
    Member* node = members_.find(Role::kWorker, h.sender);
    Header r;
    r.type = MsgType::kBarrierReply;
    r.role = Role::kScheduler;
    r.sender = 0;
    r.key = h.key;
    send_quietly(node->routing_id, r);
    log_.info("worker " + std::to_string(h.sender) + " passed barrier '" + name +
              "', which the others had finished before it rejoined");
    return;
  }
  settle_barriers();
  settle_change();  // a worker at the last barrier has no step left to answer with
}

void Scheduler::on_done(Member& node) {
  if (node.done) return;  // said twice: the first one counted
  members_.mark_done(node);  // not node.done = true: Membership keeps the barrier counts
  if (node.role != Role::kWorker) {
    log_.info(std::string(to_string(node.role)) + " " + std::to_string(node.rank) + " done");
    return;
  }
  barriers_.done(node.rank);
  if (barriers_.done_early(node.rank)) {
    log_.info("worker " + std::to_string(node.rank) + " done before the job's last barrier ('" +
              std::string(kFinalBarrier) + "'): a barrier it has not entered can no longer complete with it");
  } else {
    log_.info("worker " + std::to_string(node.rank) + " done");
  }
  settle_barriers();  // a barrier that waited for it may complete now, or can no longer
  settle_change();
}

std::string Scheduler::stranded_reason(const Barriers::Stranded& s) {
  std::string waiting;
  for (const int rank : s.waiting) {
    if (!waiting.empty()) waiting += ',';
    waiting += std::to_string(rank);
  }
  return "worker " + std::to_string(s.rank) + " said done before the end of the job (it never passed barrier '" +
         std::string(kFinalBarrier) + "'), while worker" + (s.waiting.size() > 1 ? "s " : " ") + waiting + " wait" +
         (s.waiting.size() > 1 ? "" : "s") + " at barrier '" + s.barrier +
         "', which it never entered: that barrier cannot complete with it";
}

void Scheduler::settle_barriers() {
  // Each early done that strands a barrier is its worker's failure: the
  // policy ends the job (fail throws) or drops it (it leaves in_job).
  while (const std::optional<Barriers::Stranded> s = barriers_.stranded(members_.live_worker_list())) {
    Member* node = members_.find(Role::kWorker, s->rank);
    if (node == nullptr) break;  // every rank in in_job is a member: cannot happen
    worker_failed(*node, stranded_reason(*s));
  }
  release_barriers();
}

// A barrier completes when every worker still in the job has arrived.
void Scheduler::release_barriers() {
  const std::vector<int>& in_job = members_.live_worker_list();
  for (const std::int64_t seq : barriers_.release(in_job, members_.barrier_members())) {
    Header r;
    r.type = MsgType::kBarrierReply;
    r.role = Role::kScheduler;
    r.sender = 0;
    for (const Member& n : members_.all()) {
      if (n.role != Role::kWorker || n.dropped || n.done || n.joining) continue;  // done: waits for shutdown
      if (counted_joiner(n.rank, seq)) continue;  // a joiner counted in a barrier it never took (join.cc)
      r.key = barriers_.key_for(n.rank, seq);  // in the worker's own numbering
      send_quietly(n.routing_id, r);
    }
  }
}

void Scheduler::worker_failed(Member& node, const std::string& reason, bool silent) {
  if (node.joining) return abandon_join(node, reason);  // not in the job yet: its slot is vacant again
  const WorkerFailurePolicy policy = options_.cluster.on_worker_failure;
  if (!drops_failed_workers(policy)) fail(reason);
  const bool restart = policy == WorkerFailurePolicy::kRestart;
  members_.drop(node, Clock::now());
  const bool retiring = retiring_.erase(node.rank) > 0;  // a retiree that failed first: the next resize request is not held up by it
  if (members_.live_workers() == 0 && !restart) fail(reason + "; no worker is left");
  const std::string name(to_string(policy));
  report_failure(node, reason, silent, name);
  log_.warn(reason + ": dropped from the job (cluster.on_worker_failure = \"" + name + "\"); " +
            std::to_string(members_.live_workers()) + " workers go on" +
            (restart ? " until a new process takes its rank back" : ""));
  Header h;
  h.type = MsgType::kDropped;
  h.role = Role::kScheduler;
  h.sender = 0;
  h.key = node.rank;
  for (Member& n : members_.all()) {
    if (&n == &node || n.dropped || n.done) continue;
    send_quietly(n.routing_id, h, Payload::bytes(reason));
  }
  release_barriers();
  // A retiree under "restart": its new process must not take back the place the change took from it.
  if (retiring) {
    const std::vector<int> down = members_.restartable_workers();
    if (std::find(down.begin(), down.end(), node.rank) != down.end()) retire_while_down(node, retiring_change_);
  }
  settle_change();  // the pending change no longer waits for its answer
}

void Scheduler::on_store(const PeerId& from, const Message& msg) {
  const Header& h = msg.header;
  const bool is_set = h.type == MsgType::kStoreSet;
  try {
    const std::string body = msg.text_payload();
    StoreEntry entry = wire_decode<StoreEntry>(std::as_bytes(std::span(body.data(), body.size())), "store body");
    validate_store_entry(entry, is_set ? "store set" : "store get");
    if (!is_set) {
      const auto answer = store_.get(entry.key, [this] { return staying_workers(); });
      if (!answer) {
        store_.park(from, h, entry.key, Clock::now());
        parked_gets_count_.store(store_.parked(), std::memory_order_release);
        return;
      }
      if (answer->fixed_epoch) {
        log_.info("epoch " + entry.key.substr(kEpochMembersPrefix.size()) + " is shared by workers " + answer->value);
      }
      reply_store(from, h, StoreEntry{entry.key, answer->value});
      return;
    }
    const bool membership = entry.key.starts_with(kMembershipPrefix);
    if (membership) check_membership_answer(h, entry);
    store_.check_set(entry.key);
    reply_store(from, h, StoreEntry{entry.key, {}});
    for (const KvStore::ParkedGet& get : store_.set(entry.key, entry.value)) {
      reply_store(get.routing_id, get.request, entry);
    }
    parked_gets_count_.store(store_.parked(), std::memory_order_release);
    if (membership) settle_change();
  } catch (const ProtocolError& e) {
    refuse(from, h, e.what(), refusal_status(e));
  }
}

void Scheduler::reply_store(const PeerId& to, const Header& request, const StoreEntry& entry) {
  Header r;
  r.type = MsgType::kStoreReply;
  r.role = Role::kScheduler;
  r.sender = 0;
  r.request_id = request.request_id;
  send_quietly(to, r, Payload::bytes(wire_encode(entry)));
}

void Scheduler::expire_store_gets() {
  for (const KvStore::ParkedGet& get : store_.expire(Clock::now())) {
    const std::string reason = KvStore::expiry_reason(get);
    log_.warn(reason);
    try {
      router_->send_error(get.routing_id, get.request, Role::kScheduler, 0, Status::kRejected, reason);
    } catch (const TransportError&) {
      // That node is gone already.
    }
  }
  parked_gets_count_.store(store_.parked(), std::memory_order_release);
}

void Scheduler::send_heartbeats() {
  if (!liveness_.heartbeat_due(Clock::now())) return;
  Header h;
  h.type = MsgType::kHeartbeat;
  h.role = Role::kScheduler;
  h.sender = 0;
  for (const Member& n : members_.all()) {
    if (!n.dropped && !n.restarting) send_quietly(n.routing_id, h);
  }
}

void Scheduler::server_failed(Member& node, const std::string& reason, bool silent) {
  if (options_.cluster.on_server_failure != ServerFailurePolicy::kRestart) fail(reason);
  if (node.restarting) return;  // the failed process spoke again before its replacement came: already handled
  if (node.restarts >= options_.cluster.max_restarts) {
    fail(reason + "; not restarted again: it was restarted " + std::to_string(node.restarts) +
         " times already (cluster.max_restarts = " + std::to_string(options_.cluster.max_restarts) + ")");
  }
  members_.begin_restart(node, reason, Clock::now());
  report_failure(node, reason, silent, "restart");
  log_.warn(reason + ": waiting up to " + std::to_string(options_.cluster.timeout_ms) + " ms for server " +
            std::to_string(node.rank) + " to rejoin (cluster.on_server_failure = \"restart\"); its updates since the "
            "last checkpoint are lost");
  tell_workers(MsgType::kServerRestarting, node.rank, reason);
}

void Scheduler::check_liveness() {
  const auto now = Clock::now();
  for (Member& n : members_.all()) {
    const Liveness::Lapse lapse = liveness_.check(n, now);
    if (lapse.kind == Liveness::Lapse::kNotBack) {
      fail("server " + std::to_string(n.rank) + " did not come back within " +
           std::to_string(options_.cluster.timeout_ms) + " ms (cluster.timeout_ms) after it failed (" + n.failure +
           "); no rejoin registration of rank " + std::to_string(n.rank) + " arrived");
    }
    if (lapse.kind != Liveness::Lapse::kSilent) continue;
    const std::string reason = std::string(to_string(n.role)) + " " + std::to_string(n.rank) + " (" +
                               n.request.host + ", pid " + std::to_string(n.request.pid) + ") sent no heartbeat for " +
                               std::to_string(lapse.silent_ms) + " ms (limit " +
                               std::to_string(options_.cluster.heartbeat_timeout_ms) + " ms)";
    if (n.role == Role::kWorker) {
      worker_failed(n, reason, /*silent=*/true);
    } else {
      server_failed(n, reason, /*silent=*/true);
    }
  }
}

void Scheduler::report_failure(const Member& node, const std::string& reason, bool silent, const std::string& policy) {
  if (!options_.on_failure) return;
  NodeFailure f;
  f.role = node.role;
  f.rank = node.rank;
  f.pid = node.request.pid;
  f.host = node.request.host;
  f.silent = silent;
  f.time_s = log_.clock().now_s();
  const auto silent_for = std::chrono::duration<double>(Clock::now() - node.last_seen).count();
  f.last_seen_s = f.time_s - silent_for;
  f.policy = policy;
  f.reason = reason;
  options_.on_failure(f);
}

std::string to_json_line(const NodeFailure& f) {
  return JsonLine()
      .add("role", to_string(f.role))
      .add("rank", f.rank)
      .add("pid", f.pid)
      .add("host", f.host)
      .add("silent", f.silent)
      .add("last_seen_s", f.last_seen_s)
      .add("time_s", f.time_s)
      .add("policy", f.policy)
      .add("reason", f.reason)
      .str();
}

void Scheduler::broadcast(MsgType type, const std::string& text, bool include_done) {
  Header h;
  h.type = type;
  h.role = Role::kScheduler;
  h.sender = 0;
  for (const Member& n : members_.all()) {
    if ((!include_done && n.done) || n.dropped) continue;
    try {
      if (text.empty() && type != MsgType::kAbort) {
        router_->send(n.routing_id, h);
      } else {
        router_->send(n.routing_id, h, Payload::bytes(text));
      }
    } catch (const TransportError&) {
      // That node is gone already.
    }
  }
}

void Scheduler::fail(const std::string& reason) {
  log_.error("aborting the job: " + reason);
  broadcast(MsgType::kAbort, reason, false);
  throw AbortedError(reason);
}

}  // namespace pstrain
