// The scheduler: the job's rendezvous and referee.
//  1. Registration: waits (at most timeout_ms) for every server and worker,
//     checks they run the same job (fingerprint) and the same model layout,
//     assigns ranks (a requested rank is kept; the rest fill the gaps in
//     arrival order) and tells every node the servers' endpoints and layout.
//     A registration that does not fit (one too many, a rank taken, another
//     job's fingerprint or model layout, a bad body) is refused with the reason; it never
//     ends the job.
//  2. Running: answers barriers and the key-value store (the collectives'
//     rendezvous: a get for a key nobody has set yet is parked until a set
//     arrives, or answered with an error after its wait limit), tracks
//     heartbeats. A node silent for heartbeat_timeout_ms, or one that
//     reports a failure, aborts the job: every node is told why, and run()
//     throws AbortedError with the reason. Except a worker under
//     cluster.on_worker_failure = "continue": it is dropped (the failure
//     policy), every other node is told (kDropped, so the servers'
//     consistency policies stop waiting for it), barriers and the end count
//     only the workers left, and if the dropped worker speaks again it is
//     told to exit. The job fails only when no worker is left.
//     Under `launch` a node whose process exited is known at once: the
//     launcher's exit reports (SchedulerOptions::exits_file,
//     common/node/exit_report.h) are read every turn of the loop and before
//     a rejoin is admitted, and declare the node failed as its own report
//     would (scheduler/exit_reports.cc); the heartbeat timeout stays for a
//     hung or cut-off node and for jobs without the launcher.
//     A server under cluster.on_server_failure = "restart" that fails (silent
//     past the heartbeat timeout, or reporting a failure) does not end the
//     job: its rank is marked restarting and the workers are told
//     (kServerRestarting: their requests to it wait). A registration of that
//     rank after the rendezvous (a server started with --rejoin) takes it
//     back: it gets the job's layout and worker tokens, and the workers its
//     new endpoint (kServerBack: they reconnect and resend). It must come
//     within timeout_ms of the failure, at most max_restarts times per rank,
//     else the job is aborted naming the server. A rejoin for a rank that is
//     alive is refused with the reason; it never ends the job.
//     Under "restart" the worker is dropped the same way, and a new process
//     registering with --rejoin (kRegister, aux kRegisterRejoin) for that
//     rank takes it back (scheduler/rejoin.cc): a new session token (the old
//     process stays refused), every other node told (kRejoined), and it
//     counts again in barriers and the end. A rejoin for a rank that is
//     alive, out of range or of another job is refused with the reason.
//     A worker's done re-evaluates every waiting barrier: one that waited
//     for it completes; a done before the job's last barrier (an early done,
//     scheduler/barriers.h) strands every barrier the worker never entered,
//     which is that worker's failure under the failure policy: the job ends
//     naming it and the barrier, or it is dropped and the barrier completes.
//  3. End: when every worker is done, tells every node to shut down and
//     returns normally.
// Every message after registration must come from the connection its
// (role, rank) registered on: a heartbeat, barrier, done or abort claiming
// another node's rank is refused, so no peer can keep a dead node alive, end
// the job or finish it in another's name. No peer can stop the scheduler
// either: a reply to a peer that has gone is counted and dropped, and
// warnings about bad input are limited per peer (PeerWarnings).
// The rules are in pure parts, no sockets and no clock of their own
// (docs/architecture.md, "The scheduler"): Membership (registration, ranks,
// who is live, dropped or done, rejoin admission), Barriers, KvStore (the
// store) and Liveness (heartbeats, silence). This class receives each
// message, calls them, sends the replies and applies the failure policy.
// One thread owns the scheduler and its socket.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/base/log.h"
#include "common/node/exit_report.h"
#include "common/wire/job_secret.h"
#include "common/wire/protocol.h"
#include "common/wire/security.h"
#include "common/observe/traffic_counters.h"
#include "common/observe/trace.h"
#include "common/transport/transport.h"
#include "scheduler/barriers.h"
#include "scheduler/job_records.h"
#include "scheduler/kv_store.h"
#include "scheduler/liveness.h"
#include "scheduler/membership.h"
#include "scheduler/membership_change.h"

namespace pstrain {

// A node the scheduler declared failed and the job goes on without (for
// now): a worker dropped under on_worker_failure "continue" or "restart", a
// server awaited under on_server_failure "restart". (Under "abort" the job
// ends instead.) The launcher fences a silent one: if its process is still
// running (stopped or hung), it kills it, so that "restart" can start its
// replacement and the job's end does not wait for it
// (docs/architecture.md, "Failure policy").
struct NodeFailure {
  Role role = Role::kWorker;
  int rank = -1;
  std::int64_t pid = 0;  // as the node registered it
  std::string host;      // likewise
  bool silent = false;   // no heartbeat within heartbeat_timeout_ms (else it reported its own failure)
  double last_seen_s = 0;  // job clock (common/base/job_clock.h): when the scheduler last heard from it
  double time_s = 0;       // job clock: when it was declared failed
  std::string policy;      // "continue" or "restart"
  std::string reason;
};

// One JSON object (one line of RUN_DIR/failures.jsonl): role, rank, pid,
// host, silent, last_seen_s, time_s, policy, reason.
std::string to_json_line(const NodeFailure& failure);

struct SchedulerOptions {
  int num_servers = 1;
  int num_workers = 1;
  ClusterConfig cluster;
  std::string bind_endpoint = "tcp://127.0.0.1:*";
  TrafficCounters* traffic = nullptr;  // the node's byte counters (may be null; must outlive the scheduler)
  TraceRecorder* trace = nullptr;  // spans "registration" and "job" (level steps); null = none
  // CURVE on (common/wire/security.h): the socket is a CURVE server and a ZAP
  // handler of the scheduler's admits the job's keys only. Null = off.
  const SecurityContext* security = nullptr;
  // Called, on the scheduler's thread, for each NodeFailure (pstrain-scheduler
  // --failures-file appends them to a file); may be empty.
  std::function<void(const NodeFailure&)> on_failure = nullptr;
  // Called, on the scheduler's thread, for each abandoned join (pstrain-scheduler
  // appends them to RUN_DIR/metrics/scheduler.jsonl: scheduler/job_records.h); may be empty.
  std::function<void(const AbandonedJoin&)> on_abandoned_join = nullptr;
  // The launcher's reports of node exits (common/node/exit_report.h,
  // pstrain-scheduler --exits-file): a failure acted on at once. Empty: none
  // (a job without `launch`: the heartbeat timeout finds failures).
  std::string exits_file;
  // Elastic membership's requests (pstrain-scheduler --ctl-file, written by
  // pstrain-ctl: lines "workers N"): read every turn of the loop. Empty: none.
  std::string ctl_file;
  // checkpoint.interval_steps (0: none): a joiner is counted in the checkpoint
  // barriers of the steps before its first that the others have still to take.
  std::int64_t checkpoint_interval = 0;
  // The worker ranks the rendezvous waits for: empty = 0..num_workers-1; a
  // resumed elastic PS job's checkpoint members (scheduler/main.cc).
  std::vector<int> initial_workers;
  // With initial_workers: the epochs' segments of the checkpoint resumed
  // (a member's part's "epoch_members"), set in the store before anyone
  // registers so that a later joiner learns the history the members have.
  std::vector<std::int64_t> resume_history;
};

class Scheduler {
 public:
  // Binds at once so endpoint() is known before run().
  // Over the node's transport (common/transport/transport.h; outliving the scheduler).
  Scheduler(Transport& transport, SchedulerOptions options, Logger& log);
  // Over a transport of its own (make_transport, common/transport/make_transport.h).
  Scheduler(std::unique_ptr<Transport> transport, SchedulerOptions options, Logger& log);

  const std::string& endpoint() const { return endpoint_; }
  void run();
  // Store gets parked for a key nobody has set yet; safe from any thread
  // (lets a test order a get before a set by an event instead of a sleep).
  std::size_t parked_store_gets() const { return parked_gets_count_.load(std::memory_order_acquire); }
  // Its listener's unsent replies and the most its memory budget lets them
  // reach (scheduler/scheduler_budget.h): safe from any thread (the fuzzer's
  // memory invariant).
  std::int64_t unsent_reply_bytes() const { return router_->unsent_bytes(); }
  std::int64_t unsent_reply_limit() const { return router_->unsent_limit(); }

 private:
  using Clock = SchedulerClock;
  // A session token for a node: 32 random hex digits.
  static std::string fresh_token();

  void registration();
  void assign_ranks();
  void serve_until_done();
  void handle(const PeerId& from, const Message& msg, bool registering);
  // A kRegister: a registration before the rendezvous, a rejoin after it.
  void handle_register(const PeerId& from, const Message& msg, bool registering);
  // Any other message before the rendezvous: an abort from a registered node
  // fails the job; the rest is refused.
  void handle_unregistered(const PeerId& from, const Message& msg);
  // Tells `node`, once, to exit (kAbort with `why`), logging `said`.
  void tell_to_exit(Member& node, const std::string& said, const std::string& why);
  // Tells dropped worker `node`, once, that it was dropped (it spoke again).
  void tell_dropped(Member& node);
  // Tells server `node`, declared failed under on_server_failure "restart"
  // and speaking again before its replacement came (stopped, then woken),
  // once, to exit: the workers wait for its replacement and no longer take its
  // replies, and a replacement restores its shard from the checkpoint.
  void tell_replaced(Member& node);
  // Refuses a bad message: a limited warning, an error reply if the peer is still there.
  // status: kBadRequest for a malformed message, else refusal_status(error).
  void refuse(const PeerId& from, const Header& request, const std::string& why, Status status = Status::kBadRequest);
  // Sends, counting (not throwing) a failure to reach a peer that has gone.
  void send_quietly(const PeerId& to, const Header& header, Payload payload = {});
  void on_register(const PeerId& from, const Message& msg);
  // CURVE: the role of registration or rejoin `req` is bound to the key that
  // sent `msg`, and a per-worker key's rank too (sets req.requested_rank);
  // `what` names it in the refusal ("register", "rejoin"). Nothing without CURVE.
  void check_key(const Message& msg, RegisterRequest& req, const char* what) const;
  // Security mode "off" with a job secret (scheduler/registration_gate.cc):
  // a kChallenge gets a nonce; a registration or rejoin `req` from `from` is
  // refused (ProtocolError, `what` first) unless it answers one right.
  static std::optional<RegistrationGate> make_gate(const SecurityContext* security);
  void on_challenge(const PeerId& from, const Message& msg);
  void check_answer(const PeerId& from, const RegisterRequest& req, const std::string& what);
  void on_barrier(const Message& msg);
  // A --rejoin registration after the rendezvous (scheduler/rejoin.cc);
  // throws ProtocolError with the reason to refuse it.
  void on_rejoin(const PeerId& from, const Message& msg);
  // Tells the nodes and the new process that worker `node` is back (rejoin.cc).
  void announce_rejoin(Member& node, const Header& request);
  // The registration reply to a worker admitted after the rendezvous (a
  // --join or a --rejoin, join.cc): the job's reply with the worker's rank,
  // its model layout and its session token, answering `request`; `key` and
  // `step` go in the reply's header (a rejoin: its next barrier number and
  // which take back of the rank; a join: the header's defaults).
  void reply_admitted_worker(const Member& node, const Header& request, std::int64_t key = Header{}.key,
                             std::int64_t step = Header{}.step);
  void on_store(const PeerId& from, const Message& msg);
  void reply_store(const PeerId& to, const Header& request, const StoreEntry& entry);
  void expire_store_gets();
  void check_liveness();
  // The launcher's new exit reports (scheduler/exit_reports.cc): a node
  // still in the job whose process exited is declared failed now.
  void take_exit_reports();
  void send_heartbeats();  // to every node still in the job, each heartbeat_interval_ms
  // A worker failed: drop it (on_worker_failure "continue") or fail the job.
  // `silent`: it stopped sending heartbeats (else it reported the failure).
  void worker_failed(Member& node, const std::string& reason, bool silent = false);
  void release_barriers();
  // A worker said done (kDone): the barriers re-evaluated (settle_barriers).
  void on_done(Member& node);
  // Ends every barrier wait that can no longer complete (Barriers::stranded:
  // an early done is that worker's failure, under the failure policy), then
  // releases every barrier complete. After each arrival, done and drop.
  void settle_barriers();
  // Why barrier `s` can no longer complete: names the early done and the barrier.
  static std::string stranded_reason(const Barriers::Stranded& s);
  // A server failed: restart it (on_server_failure "restart") or fail the job.
  void server_failed(Member& node, const std::string& reason, bool silent = false);
  // Tells options_.on_failure that `node` was declared failed under `policy`.
  void report_failure(const Member& node, const std::string& reason, bool silent, const std::string& policy);
  // A server's registration after the rendezvous: takes back a restarting rank, else refused (rejoin.cc).
  void on_server_rejoin(const PeerId& from, const Message& msg);
  void tell_workers(MsgType type, std::int64_t key, const std::string& text);
  // Every server not dropped hears kDropped of worker `rank` (body `reason`,
  // aux `aux`: kDroppedFailed, or kDroppedRetired for a retiree) and stops
  // waiting for it (elastic.cc).
  void tell_servers_dropped(int rank, const std::string& reason, std::int64_t aux);
  // --- Elastic membership (scheduler/elastic.cc) ---
  // A resume: each epoch's first members (kEpochMembersPrefix) and each later
  // segment (a decision, kMembershipPrefix + its number) of the checkpoint.
  void seed_resumed_history();
  // The new lines of options_.ctl_file: "workers N" starts a change (a
  // shrink retires the highest ranks), or is refused with the reason (logged).
  void take_ctl_requests();
  void request_workers(int workers);
  // Announces a change to `members` to every live worker (kMembershipChange).
  void start_change(std::vector<int> members, const std::string& reason);
  // A worker's store set under kMembershipPrefix: its answer to the pending
  // change (ProtocolError for anything else).
  void check_membership_answer(const Header& h, const StoreEntry& entry);
  // Decides the pending change's boundary once every live worker answered
  // or has no step left, and answers the workers waiting for it.
  void settle_change();
  // The live workers but those a decided change retires ("0,2,3"): the
  // members of an epoch asked for after the change, the live set to others.
  std::string staying_workers() const;
  // Worker `node` left at a change that did not keep it (kDone, aux kDoneRetired).
  void on_retired(Member& node);
  // A change `change` leaves out worker `node`, which is down and may yet be
  // taken back: it is retired now (not waited for; the servers vacate its
  // slot), and the new process that comes for its rank is told to leave.
  void retire_while_down(Member& node, std::int64_t change);
  // The reply to that new process's --rejoin: retired by `change`, no training.
  void retire_rejoiner(const PeerId& from, const Header& request, const Member& node, std::int64_t change,
                       const std::string& who);
  // Publishes the decided change (decided_): the joiners enter the job, the
  // workers waiting for the decision are answered.
  void publish_change();
  // --- Growing (scheduler/join.cc) ---
  // A kRegister with aux kRegisterJoin: refused with the reason (retryable
  // before the rendezvous and while a change is being decided), else on_join.
  void handle_join(const PeerId& from, const Message& msg, bool registering);
  // Admits a --join registration into a vacant slot (joining, not yet live),
  // replies, and starts the change that adds it (or adds it to the pending one).
  void on_join(const PeerId& from, const Message& msg);
  // Tells every server to admit the change's joiners from the boundary's
  // step (kWorkerJoining); false when the change has no joiner.
  bool ask_servers_to_admit(const MembershipBoundary& b, const std::vector<int>& members);
  // A server's acknowledgement (a store set under kJoinAckPrefix).
  void check_join_ack(const Header& h, const StoreEntry& entry);
  // Joiner `node` leaves before its boundary (it failed, a server refused
  // it, no step was left): its slot vacant again, the change goes on without it.
  void abandon_join(Member& node, const std::string& reason);
  // The joiner's start key (kJoinStartPrefix), answering its parked get.
  void set_join_start(const Member& node, const std::string& value);
  // Counts joiner `r`, entering at the job's step `step`, in the checkpoint
  // barriers of the steps before it that the others have not passed; returns
  // its first barrier's number.
  std::int64_t count_joiner_in_checkpoints(int r, std::int64_t step);
  // Whether joiner `rank` was counted in barrier `seq` when it entered
  // (no reply goes to it for that barrier); forgets it once asked so.
  bool counted_joiner(int rank, std::int64_t seq);
  // The change's joiners enter the job at boundary `b`.
  void enter_joiners(const MembershipBoundary& b, const std::vector<int>& members);
  [[noreturn]] void fail(const std::string& reason);
  void broadcast(MsgType type, const std::string& text, bool include_done = true);

  Scheduler(std::unique_ptr<Transport> owned, Transport* transport, SchedulerOptions options, Logger& log);
  // CURVE: the name of the key that sent the message being handled (its
  // Envelope's user_id), or null on a plain connection or without a payload.
  const char* key_of(const Message& msg) const {
    return msg.has_payload && !sender_key_.empty() ? sender_key_.c_str() : nullptr;
  }

  std::unique_ptr<Transport> owned_transport_;  // the owning constructor's
  Transport& transport_;
  SchedulerOptions options_;
  Logger& log_;
  std::unique_ptr<ZapHandler> zap_;  // before router_: authenticates its connections
  std::unique_ptr<Listener> router_;
  std::string sender_key_;  // see key_of
  PeerWarnings warnings_;
  std::int64_t unreachable_replies_ = 0;
  std::string endpoint_;
  // The parts (pure; this class receives, calls them, sends and applies the failure policy).
  Membership members_;
  Barriers barriers_;
  KvStore store_;
  Liveness liveness_;
  std::optional<AppendedLines> exits_;  // options_.exits_file, when given
  std::optional<AppendedLines> ctl_;    // options_.ctl_file, when given
  std::optional<MembershipChange> change_;  // the pending membership change
  std::int64_t changes_ = 0;                // changes started so far (the next one's number - 1)
  std::set<int> retiring_;                  // workers a decided change did not keep, until they retire
  // Worker ranks a decided change left out while they were down (dropped,
  // a new process on its way under on_worker_failure "restart"): the change
  // that retired them. Their next --rejoin is told to leave (retire_rejoiner),
  // until a joiner takes the slot.
  std::map<int, std::int64_t> retired_while_down_;
  std::int64_t retiring_change_ = 0;  // the change the workers in retiring_ leave at
  // The pending change once its boundary is decided, until it is published
  // (a grow: every server has admitted the joiners).
  struct DecidedChange {
    std::optional<MembershipBoundary> boundary;
    std::vector<int> members;
    std::set<std::pair<int, int>> acks;  // (server, joiner) admissions yet to be acknowledged
    bool told_servers = false;
  };
  std::optional<DecidedChange> decided_;
  std::set<std::pair<int, std::int64_t>> counted_joiners_;  // (joiner, a barrier it was counted in) (enter_joiners)
  int requested_grow_ = 0;            // workers a ctl request asked for that have not joined yet
  std::string grow_reason_ = "join";  // "ctl" while requested_grow_ > 0
  std::set<int> at_final_barrier_;          // workers waiting at the job's last barrier: no step left
  std::optional<RegistrationGate> gate_;  // make_gate: null with CURVE or without a job secret
  std::atomic<std::size_t> parked_gets_count_{0};  // store_.parked(), for other threads
};

}  // namespace pstrain
