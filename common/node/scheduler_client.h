// A server's or worker's link to the scheduler: registration (rendezvous),
// barriers, heartbeats, the end of the job and failure reports.
//
// The main connection belongs to the thread that constructed the client; the
// heartbeat thread has its own (both from the node's Transport,
// common/transport/transport.h). Callers that block on other endpoints (a server's
// loop, a worker's waits) wait on connection() too (wait_any) and call
// handle_incoming() when it is readable, so an abort reaches them promptly.
// Heartbeats go both ways: the scheduler sends every node a heartbeat each
// heartbeat_interval_ms, and check_scheduler_alive() throws once it has been
// silent for heartbeat_timeout_ms (a killed scheduler ends every node, not
// only the ones that happen to ask it something). Waits for other nodes
// (a barrier, the end of the job) last while the scheduler is alive, however
// long the slowest worker takes; registration and the store wait at most
// ClusterConfig::timeout_ms.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <cstdint>
#include <mutex>
#include <optional>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/base/errors.h"
#include "common/config/config.h"
#include "common/wire/protocol.h"
#include "common/transport/transport.h"

namespace pstrain {

// The scheduler refused a request (an error reply), with its status and its
// text (the message is the one a plain TransportError carried before).
// retryable(): refused for now (Status kRetryLater), the same request may be
// granted later (retry_until, common/node/retry.h); else refused for good
// (kRefused, or kBadRequest for a malformed message). A TransportError, so
// code that only cares that the request failed still catches it.
class SchedulerRefusal : public TransportError {
 public:
  SchedulerRefusal(Status status, const std::string& what) : TransportError(what), status_(status) {}
  Status status() const { return status_; }
  bool retryable() const { return status_ == Status::kRetryLater; }

 private:
  Status status_;
};

// Whether this whole process ran, as its heartbeat thread sees it: that
// thread wakes every heartbeat interval while the process runs, so a pause
// between two of its wake-ups well past the interval (more than the interval
// + kSlack) is a time when the process was stopped or starved of the CPU.
// SchedulerClient::check_scheduler_alive asks it whether a long gap between
// two of its checks was such a pause (the process's silence, not the
// scheduler's). A record under a mutex: beat() from the
// heartbeat thread, stalled() from the checking thread, O(1) both (no
// clock of the process's CPU, which the kernel sums over every thread).
// Pure: time is passed in (tests).
class ProcessPulse {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  static constexpr std::chrono::milliseconds kSlack{100};
  explicit ProcessPulse(std::chrono::milliseconds interval) : interval_(interval) {}
  // The heartbeat thread woke at `now`.
  void beat(TimePoint now);
  // The heartbeat thread has ended: no more evidence (stalled() says false).
  void stop();
  // Whether the process was paused over at least half of [from, now]: its
  // latest long pause (between two wake-ups, or since the last one and
  // still going at `now`) overlaps that window by at least half its length.
  // False before the first beat and after stop().
  bool stalled(TimePoint from, TimePoint now) const;

 private:
  std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  bool running_ = false;
  TimePoint last_{};                     // the latest wake-up
  TimePoint pause_from_{}, pause_to_{};  // the latest long pause between two (empty: none)
};

class SchedulerClient {
 public:
  // `traffic` (may be null, else outliving the client) counts the bytes of
  // both sockets: requests, replies and heartbeats.
  // `security` (may be null = plain; else outliving the client): CURVE keys
  // for both sockets (common/wire/security.h).
  // Over the node's transport (outliving the client).
  SchedulerClient(Transport& transport, std::string scheduler_endpoint, Role role, const ClusterConfig& cluster,
                  TrafficCounters* traffic = nullptr, const SecurityContext* security = nullptr);
  // Over a transport of its own (make_transport, common/transport/make_transport.h).
  SchedulerClient(std::unique_ptr<Transport> transport, std::string scheduler_endpoint, Role role, const ClusterConfig& cluster,
                  TrafficCounters* traffic = nullptr, const SecurityContext* security = nullptr);
  ~SchedulerClient();
  SchedulerClient(const SchedulerClient&) = delete;
  SchedulerClient& operator=(const SchedulerClient&) = delete;

  // Registers and waits until every node has: returns this node's rank, the
  // servers' endpoints and the model layout. Starts the heartbeats.
  RegisterReply register_node(RegisterRequest request);
  // The same for a process replacing a dropped node of its rank
  // (--rejoin, cluster.on_worker_failure = "restart"): the scheduler checks
  // the rank was dropped, and its reply sets where this node's barriers
  // continue the others' sequence. Refused (SchedulerRefusal with the
  // scheduler's reason) for a rank that is alive (retryable: until the
  // scheduler has dropped it) or never existed (for good).
  RegisterReply rejoin_node(RegisterRequest request);
  // The same for a worker started with --join (elastic membership): it takes
  // a vacant slot of a running job; refused (SchedulerRefusal with the
  // reason) when the job cannot take it, retryable while another change is
  // under way. Its barriers continue at the number its start gives
  // (continue_barriers_at; worker/train/ps_join.h).
  RegisterReply join_node(RegisterRequest request);
  void continue_barriers_at(std::int64_t seq) { barrier_seq_ = seq; }
  // Blocks until every worker (group = workers) has reached the barrier.
  void barrier(const std::string& name);
  // The same wait, calling `on_news` whenever the scheduler announces a
  // membership change meanwhile (take_membership_changes has it): a worker
  // in a checkpoint's barrier answers there, as a worker behind it may wait
  // for that answer before it reaches the barrier. `on_news` may make store
  // requests (the barrier's reply, should it come during one, is kept).
  void barrier(const std::string& name, const std::function<void()>& on_news);
  // Runs `wait`, a wait on other endpoints that reads this client's
  // messages (handle_incoming: a KV client's wait), calling `on_news` for a
  // membership change heard before it and whenever one is announced
  // meanwhile: a worker entering a running job answers from the pull of its
  // first step (worker/train/ps_rejoin.h). The same rules as barrier's.
  void answering_news(const std::function<void()>& on_news, const std::function<void()>& wait);
  // The scheduler's key-value store, kept for the job's lifetime (the
  // collectives' rendezvous: Gloo's addresses, NCCL's unique id). A set
  // replaces any earlier value. A get blocks until some node has set the key,
  // at most timeout_ms capped by cluster.timeout_ms (then TransportError with
  // the scheduler's reason).
  // Keys have 1..kMaxStoreKeyBytes bytes, values at most kMaxStoreValueBytes
  // (ProtocolError before anything is sent).
  void store_set(const std::string& key, const std::string& value);
  std::string store_get(const std::string& key, int timeout_ms);
  // The same get, calling `watch` before it and while it waits (at least
  // every 200 ms, and after each drop announced meanwhile): a throw from
  // `watch` abandons the get (the scheduler's late answer to it is ignored)
  // and propagates. An allreduce worker's rendezvous ends at a drop so.
  std::string store_get(const std::string& key, int timeout_ms, const std::function<void()>& watch);
  // Worker: tells the scheduler it has finished and waits for the shutdown.
  // `retired`: it left at a membership change that did not keep it (a
  // shrink, kDoneRetired); the scheduler answers at once.
  void finish(bool retired = false);
  // Best effort: tells the scheduler this node failed (it aborts the job).
  void report_failure(const std::string& reason) noexcept;

  Connection& connection() { return *conn_; }
  Transport& transport() { return transport_; }
  // Handles one message that arrived on connection() (none: nothing):
  // returns true on shutdown, throws AbortedError on abort, ignores nothing
  // silently (unexpected -> ProtocolError).
  bool handle_incoming();
  // Handles up to `max_messages` queued messages without waiting (news a
  // caller needs before going on: an abort, a shutdown, a server failure);
  // returns whether the shutdown was received.
  bool drain_incoming(int max_messages = 16);
  // Throws TransportError naming the scheduler if it has sent nothing (not
  // even a heartbeat) for heartbeat_timeout_ms since the rendezvous. A gap
  // of that length (and of at least 1 s: idle callers check every 500 ms at
  // most) between two checks, or the silence itself, over at least half of
  // which the whole process
  // was paused (ProcessPulse: its heartbeat thread did not run; not a long
  // compute or a blocking wait of the caller, while the rest ran), is this
  // process's own silence (it was stopped, or starved of the CPU), not the
  // scheduler's: the window starts again, and the scheduler gets its chance
  // to speak (a node it dropped meanwhile is told so and exits with that
  // reason, not "the scheduler is gone"). O(1): a steady clock read, and the
  // pulse's record after a long gap only (no clock summed over the
  // process's threads: with thousands of threads in one process that was
  // most of its CPU).
  void check_scheduler_alive() const;
  bool shutdown_received() const { return shutdown_; }
  // Workers the scheduler dropped from the job (failure policy "continue")
  // since the last call, as they were announced.
  std::vector<int> take_dropped() { return std::exchange(dropped_, {}); }
  // Workers that retired at a membership change (servers only): their slots are vacant again.
  std::vector<int> take_retired() { return std::exchange(retired_, {}); }
  // Server restarts (cluster.on_server_failure = "restart"; workers only):
  // whether a server failed and has not come back yet (requests to it wait
  // without a time limit), and the servers that came back since the last
  // call, with their new endpoints, in the order announced.
  bool server_restarting() const { return !restarting_servers_.empty(); }
  // How many server failures (kServerRestarting) this client has heard of.
  std::int64_t server_failures() const { return server_failures_; }
  bool server_restarting(int server) const { return restarting_servers_.count(server) != 0; }
  std::vector<std::pair<int, std::string>> take_servers_back() { return std::exchange(servers_back_, {}); }
  // Workers that a new process took back (kRejoined) since the last call:
  // rank and the new session token, as they were announced.
  struct Rejoined {
    int rank = -1;
    std::string token;
    std::int64_t take = 0;  // which take back of that rank (1, 2, ...)
  };
  std::vector<Rejoined> take_rejoined() { return std::exchange(rejoined_, {}); }
  // Elastic membership: the changes the scheduler announced
  // (kMembershipChange) since the last call, by number, in order.
  std::vector<std::int64_t> take_membership_changes() { return std::exchange(membership_changes_, {}); }
  // Servers: the workers joining vacant slots (kWorkerJoining) since the last call.
  struct Joining {
    int rank = -1;
    std::string token;
    std::int64_t step = 0;    // its first step (the job's global numbering)
    std::int64_t change = 0;  // the membership change it joins at
  };
  std::vector<Joining> take_joining() { return std::exchange(joining_, {}); }
  // After rejoin_node(): which take back of this rank it was (1, 2, ...).
  std::int64_t rejoin_take() const { return rejoin_take_; }
  // After rejoin_node(): the step of the highest checkpoint barrier the
  // others had passed when the scheduler took this process back (0: none;
  // the largest int64 once they had passed the final barrier). A
  // rejoiner entering at that very step must not write its part: the
  // manifest may be in the making (worker/train/ps_rejoin.h).
  std::int64_t released_checkpoint() const { return released_checkpoint_; }
  // After rejoin_node(): non-zero when the rank was retired while it was down
  // (RegisterReply::retired_by_change: the change, or kRetiredByRequest); the
  // process is then no member (no heartbeats) and leaves without training.
  std::int64_t retired_by_change() const { return retired_by_change_; }
  int rank() const { return rank_; }
  // This node's session token from the register reply (empty before).
  const std::string& token() const { return token_; }
  Role role() const { return role_; }
  TrafficCounters* traffic() const { return traffic_; }

 private:
  Header make_header(MsgType type) const;
  // Waits for a message of `type` (handling aborts); throws TimeoutError naming `what`.
  // `while_alive`: no time limit while the scheduler's heartbeats come. Either way, after the
  // rendezvous, a scheduler silent for heartbeat_timeout_ms ends the wait (TransportError).
  Message wait_for(MsgType type, const std::string& what, int extra_ms = 0, bool while_alive = false);
  // Sends a store request and returns the reply's entry (checked against the request).
  StoreEntry store_request(MsgType type, const StoreEntry& entry, int timeout_ms, const std::string& what);
  void heartbeat_loop(std::string endpoint);
  void note_server_news(const Message& m);  // kServerRestarting, kServerBack
  void call_on_news();                       // on_news_, if set, not re-entered by its own requests
  void stop_heartbeats();

  SchedulerClient(std::unique_ptr<Transport> owned, Transport* transport, std::string scheduler_endpoint, Role role,
                  const ClusterConfig& cluster, TrafficCounters* traffic, const SecurityContext* security);

  std::unique_ptr<Transport> owned_transport_;  // the owning constructor's
  Transport& transport_;
  std::string endpoint_;
  std::string token_;
  std::vector<int> dropped_;
  const std::function<void()>* watch_ = nullptr;  // a watched store get's (store_get with watch)
  std::set<std::uint64_t> abandoned_;             // requests whose answers are ignored (a watched get that ended)
  std::vector<int> retired_;
  std::set<int> restarting_servers_;
  std::int64_t server_failures_ = 0;
  std::vector<std::pair<int, std::string>> servers_back_;
  std::vector<Rejoined> rejoined_;
  std::vector<std::int64_t> membership_changes_;
  const std::function<void()>* on_news_ = nullptr;  // a barrier's or answering_news's, not while it runs
  std::optional<std::int64_t> barrier_waiting_;     // that barrier's number
  std::optional<Message> barrier_reply_;            // its reply, come during a store request of on_news
  std::vector<Joining> joining_;
  std::int64_t rejoin_take_ = 0;
  std::int64_t released_checkpoint_ = 0;
  std::int64_t retired_by_change_ = 0;
  RegisterReply register_as(RegisterRequest request, std::int64_t kind);
  // Security mode "off" with a job secret: asks the scheduler for a nonce
  // and sets request.challenge and request.proof (common/wire/job_secret.h).
  void answer_challenge_for(RegisterRequest& request);
  mutable std::chrono::steady_clock::time_point last_check_{};  // check_scheduler_alive's last call
  mutable std::chrono::steady_clock::time_point last_heard_;  // last message from the scheduler (main socket)
  Role role_;
  ClusterConfig cluster_;
  TrafficCounters* traffic_;
  const SecurityContext* security_;
  std::unique_ptr<Connection> conn_;
  int rank_ = -1;
  std::int64_t barrier_seq_ = 0;
  std::uint64_t next_request_id_ = 1;
  bool shutdown_ = false;

  std::mutex hb_mutex_;
  std::condition_variable hb_cv_;
  bool hb_stop_ = false;
  std::thread hb_thread_;
  ProcessPulse pulse_;  // the heartbeat thread's wake-ups
};

// This machine's host name (gethostname), for registration messages.
std::string this_host();

}  // namespace pstrain
