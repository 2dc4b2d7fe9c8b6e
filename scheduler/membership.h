// The scheduler's membership: who is in the job. Registration (the checks a
// node must pass to be admitted, ranks, the rendezvous reply's shared part),
// which nodes are live, dropped, restarting or done, and the admission of a
// rejoin (a new process taking back a failed rank). Pure: no sockets, no clock
// of its own (every time is passed in), no randomness (tokens come from the
// caller). A refusal throws ProtocolError with the reason the node is told.
// Owned by the scheduler's thread (scheduler/scheduler.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/wire/protocol.h"
#include "common/wire/security.h"
#include "common/transport/transport.h"

namespace pstrain {

using SchedulerClock = std::chrono::steady_clock;

// One registered node. Its done and dropped flags change only through
// Membership (mark_done, drop, take_back_worker), which keeps the counts a
// barrier and the end read in O(1) (live_worker_list, barrier_members).
struct Member {
  Role role = Role::kWorker;
  int rank = -1;
  PeerId routing_id;
  RegisterRequest request;
  SchedulerClock::time_point last_seen;
  bool done = false;
  bool dropped = false;  // failure policy "continue" or "restart": left the job
  bool told_dropped = false;
  std::string token;  // RegisterReply::token; the heartbeat connection is "h" + token
  // Servers under on_server_failure "restart": failed, waiting for a rejoin until restart_deadline.
  bool restarting = false;
  SchedulerClock::time_point restart_deadline{};
  SchedulerClock::time_point failed_at{};
  std::string failure;
  int restarts = 0;
  int rejoins = 0;  // new processes that took this rank back (on_worker_failure "restart")
  SchedulerClock::time_point dropped_at{};
  // Elastic membership: a worker that joined a vacant slot after the
  // rendezvous (--join), and one retired on purpose (a shrink: it left
  // gracefully; neither a failure nor a drop, and its slot is vacant again).
  bool joined = false;
  bool retired = false;
  // A joiner until the boundary of its change: registered (heard, checked
  // for silence) but not yet live: not in live_worker_list(), not waited for
  // by barriers or the end (enter_joined, abandon_join).
  bool joining = false;
};

// Whether two layouts name the same tensors with the same shapes, in order.
bool same_layout(const ParamLayout& a, const ParamLayout& b);

// CURVE with per-worker keys: worker-R's key (`owner`, named `key_name`)
// registers rank R only; a key shared by the role, any free rank.
void bind_rank_to_key(const KeyOwner& owner, const std::string& key_name, RegisterRequest& req);

// Elastic membership (cluster.min_workers / max_workers; docs/architecture.md,
// "Elastic membership"): the job has worker slots 0..slots()-1, slots() =
// max(cluster.max_workers, num_workers). The rendezvous fills ranks
// 0..num_workers-1 (a resume: the checkpoint's members); the others are vacant: nobody waits for them (barriers,
// the end). A worker registering with --join after the rendezvous takes a
// vacant slot (admit_worker_join, add_joined_worker); a retired worker's
// slot is vacant again.
class Membership {
 public:
  // `initial_workers`: the worker ranks the rendezvous waits for (ascending;
  // a resumed elastic job's checkpoint members, common/checkpoint/
  // checkpoint_members.h); empty: 0..num_workers-1. The other slots are vacant.
  // ConfigError for ranks not ascending or outside the slots.
  Membership(int num_servers, int num_workers, ClusterConfig cluster, std::vector<int> initial_workers = {});

  // --- Registration (before the rendezvous) ---
  // Admits `req` from connection `from`, heard at `now`: refused when the
  // job has all the nodes of its role, the requested rank is out of range or
  // taken, it runs another job (fingerprint), or a worker's layout is invalid
  // or differs from the workers registered so far.
  Member& admit(const PeerId& from, RegisterRequest req, SchedulerClock::time_point now);
  bool complete() const;  // every server and worker registered
  // "registered S/N servers and W/M workers".
  std::string roster() const;
  // Ranks: a requested rank is kept, the rest fill the gaps in arrival order.
  void assign_ranks();
  // After assign_ranks: the reason the job cannot start when a worker's
  // layout differs from the first worker's; nullopt when all agree.
  std::optional<std::string> layout_mismatch() const;
  // The part of every RegisterReply that is the job's: counts, the servers'
  // endpoints by rank, the model layout (the first worker's).
  RegisterReply job_reply() const;
  // Every worker's token, by rank.
  std::vector<std::string> worker_tokens() const;

  // --- Who is in the job ---
  std::vector<Member>& all() { return nodes_; }
  const std::vector<Member>& all() const { return nodes_; }
  // O(1) once ranks are assigned (an index by rank), a scan before.
  Member* find(Role role, int rank);
  // The node registered on connection `from`; null if none.
  const Member* on_connection(const PeerId& from) const;
  // Workers not dropped or retired (O(1)).
  int live_workers() const { return static_cast<int>(live_.size()); }
  // The workers not dropped, by rank ascending (kept up to date, not rebuilt per call).
  const std::vector<int>& live_worker_list() const { return live_; }
  // The same as text: "0,2,3".
  std::string live_worker_ranks() const;
  // Workers neither dropped, retired nor done: those a barrier waits for (O(1)).
  int barrier_members() const { return barrier_members_; }
  // Whether the end of the job has come at `now`: every worker done, or
  // dropped with no rejoin to wait for (may_rejoin). O(1) while a worker is
  // neither (the scheduler asks after every message); a scan after that.
  bool workers_done(SchedulerClock::time_point now) const;
  // Node `m` said it is done (kDone): the one way to set Member::done (a
  // direct write would leave barrier_members() and workers_done() stale).
  void mark_done(Member& m);

  // --- Failure and rejoin ---
  // Drops worker `m` at `now` (failure policy "continue" or "restart").
  void drop(Member& m, SchedulerClock::time_point now);
  // Server `m` failed at `now` under on_server_failure "restart": it waits
  // for a rejoin until now + timeout_ms.
  void begin_restart(Member& m, const std::string& reason, SchedulerClock::time_point now);
  // Under "restart", whether the end still waits for dropped worker `m`: a
  // new process may take its rank back (fewer than max_restarts so far, not
  // an allreduce worker, dropped less than timeout_ms before `now`).
  bool may_rejoin(const Member& m, SchedulerClock::time_point now) const;
  // The workers down now whose rank a new process may still take back
  // (on_worker_failure "restart", fewer than max_restarts takes, not retired
  // or done), by rank ascending: counted in the job's size by a resize request.
  std::vector<int> restartable_workers() const;
  // The worker whose rank a --rejoin registration `req` (described as `who`)
  // may take back; refused unless on_worker_failure is "restart" and it names
  // a dropped worker of this job, taken back fewer than max_restarts times,
  // with the job's fingerprint and layout.
  Member& admit_worker_rejoin(const RegisterRequest& req, const std::string& who);
  // The restarting server whose rank a registration after the rendezvous
  // (`req`, described as `who`) takes back; refused for a rank out of range,
  // another job, or a server that is alive (heard at last_seen, before `now`).
  Member& admit_server_rejoin(const RegisterRequest& req, const std::string& who, SchedulerClock::time_point now);
  // A new process (`req` on `from`, with `token`) takes back admitted worker `m`.
  void take_back_worker(Member& m, const PeerId& from, RegisterRequest req, std::string token,
                        SchedulerClock::time_point now);
  // Likewise a restarting server.
  void take_back_server(Member& m, const PeerId& from, RegisterRequest req, std::string token,
                        SchedulerClock::time_point now);

  // --- Elastic membership ---
  // The worker slots: max(cluster.max_workers, num_workers).
  int slots() const { return slots_; }
  // Whether worker slot `rank` is vacant: in range, and nobody registered
  // there or its worker retired.
  bool vacant(int rank);
  // The slot a --join registration `req` (described as `who`) takes: its
  // requested rank, else the lowest vacant one. Refused (ProtocolError with
  // the reason) before the rendezvous is over, when the job is not elastic
  // or full (every slot taken), for a rank outside the slots or in use, or
  // another job's fingerprint or another model's layout.
  int admit_worker_join(const RegisterRequest& req, const std::string& who);
  // Adds the joiner (`req` on `from`, with `token`) at `rank` (from
  // admit_worker_join), joining: its slot taken, not live until enter_joined.
  Member& add_joined_worker(const PeerId& from, RegisterRequest req, int rank, std::string token,
                            SchedulerClock::time_point now);
  // The joiner's change took effect: live, counted by barriers and the end from now on.
  void enter_joined(Member& m);
  // The joiner leaves before its change took effect (it failed, or no step
  // was left): its slot is vacant again, nothing waits for it.
  void abandon_join(Member& m);
  // Why the job cannot have `workers` workers now (below cluster.min_workers
  // or above the slots); nullopt when it can.
  std::optional<std::string> resize_refusal(int workers) const;
  // Worker `m` left gracefully (a shrink): no longer live, not waited for,
  // its slot vacant again. Not a failure: nothing is dropped.
  void retire(Member& m);

  const ClusterConfig& cluster() const { return cluster_; }
  int num_servers() const { return num_servers_; }
  int num_workers() const { return num_workers_; }
  // The worker ranks the rendezvous waits for (ascending).
  const std::vector<int>& initial_workers() const { return initial_; }

 private:
  // A worker whose model layout differs from the workers registered so far
  // is refused at once, not left to fail the rendezvous.
  void refuse_other_layout(const RegisterRequest& req) const;
  std::string initial_text() const;  // "0,1,3"
  // Rebuilds live_ and barrier_members_ from the flags (a drop, a take back: rare).
  void recount();

  int num_servers_;
  int num_workers_;
  int slots_;
  ClusterConfig cluster_;
  std::vector<int> initial_;  // initial_workers()
  // In registration order, then the joiners; capacity for every server and
  // slot reserved up front, so a join never moves a Member (a joiner into
  // a retired worker's slot reuses its entry).
  std::vector<Member> nodes_;
  // After assign_ranks: by rank, the node's index in nodes_ (find's index).
  std::vector<std::size_t> worker_at_, server_at_;
  std::vector<int> live_;     // live_worker_list()
  int barrier_members_ = 0;   // barrier_members()
};

}  // namespace pstrain
