// A parameter server node: registers with the scheduler, learns the model
// layout and its shard of it, then serves init/push/pull requests from the
// workers on one Listener of its transport (common/transport/transport.h) until the
// scheduler says shutdown.
//
// One event-loop thread owns everything (socket, store). A bad request gets
// an error reply saying what was wrong and the loop goes on; only the
// scheduler's abort or shutdown, a broken socket and a scheduler gone silent
// end run(): the loop waits on the scheduler's connection too and, when
// nothing came from it, checks that it is still alive
// (SchedulerClient::check_scheduler_alive: silent for
// cluster.heartbeat_timeout_ms throws), so a server whose scheduler died ends.
// A request goes through one stage per concern, in this order:
//  1. receive and decode (handle_request; a malformed message gets an error
//     reply), then admit: who may send what (server/admission.h: only a
//     worker, over its own connection and key);
//  2. catch up, a rejoined server's own step, only while any chunk is
//     catching up (ShardStore::catch_up, the policy's rule);
//  3. consistency and apply: the shard store (server/shard_store.h) checks
//     and applies it, asking the consistency policy (server/consistency.h)
//     whatever differs by mode;
//  4. at a step boundary only (the chunk's slowest clock moved:
//     PushOutcome::clock_advanced, a catch-up, a drop), the checkpoint copy
//     (server/checkpointing.h), before the reply;
//  5. reply, then answer the parked pulls the request made ready.
// A refused request (RequestError from any stage) gets an error reply (a
// run of several chunks, kPushChunks / kPullChunks: one per chunk, and each
// chunk of a run goes through stages 2-5 as the single request it stands for).
// Sync reads what is queued at once (up to kMaxSyncBatch requests), serves its
// pulls first, then one other request, and reads again: a next step's pull is
// parked before the pushes it was queued behind and answered the moment its
// chunk is applied; the weights are those of arrival order (handle_sync_queue).
// No peer can stop or exhaust a server: a reply to a peer that has gone is
// counted and dropped, warnings about bad input are limited per connection,
// and parked pulls are capped per connection (kMaxParkedPerChunk per chunk
// held) and expire after cluster.timeout_ms (answered with an error, or
// dropped if the peer has gone).
// Pulls the consistency policy cannot answer yet (sync: the step's update is
// not applied; ssp: the bound would be broken) are parked and answered as
// soon as a push makes them ready; the reply's aux says how long the pull
// was parked (microseconds), which is the time the worker was held back.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/base/errors.h"
#include "common/base/log.h"
#include "common/wire/protocol.h"
#include "common/node/scheduler_client.h"
#include "common/wire/security.h"
#include "common/math/shard_map.h"
#include "common/observe/traffic_counters.h"
#include "common/observe/trace.h"
#include "common/transport/transport.h"
#include "server/admission.h"
#include "server/checkpointing.h"
#include "server/parallel_apply.h"
#include "server/shard_store.h"

namespace pstrain {

// Parked pulls one connection may have per chunk the server holds (a worker
// has at most two: the next step's and an evaluation's).
inline constexpr int kMaxParkedPerChunk = 4;

struct ServerOptions {
  Mode mode = Mode::kSync;
  int staleness_bound = 0;  // ssp
  OptimizerConfig optimizer;
  // The highest learning rate a push may carry: the schedule's
  // (schedule_max_lr, common/math/lr_schedule.h; StoreOptions::max_lr).
  // 0 = no bound, only for servers built by hand in tests.
  double max_lr = 0.0;
  std::int64_t partition_bytes = std::int64_t{1} << 20;
  ClusterConfig cluster;
  std::string scheduler_endpoint;
  std::string bind_endpoint = "tcp://127.0.0.1:*";  // where to listen (ephemeral port allowed)
  std::string advertise_host;                        // tcp: host workers dial; empty = as bound
  int requested_rank = -1;
  std::string job_fingerprint;
  TrafficCounters* traffic = nullptr;  // the node's byte counters (may be null; must outlive the server)
  // Called once registration has assigned this server its rank, before it serves.
  std::function<void(int rank)> on_registered;
  // Level "all": a span per request (receive, finite check, sum, update,
  // reply inside it); null = none.
  TraceRecorder* trace = nullptr;
  // CURVE on (common/wire/security.h): the socket is a CURVE server admitting the
  // workers' key only, the link to the scheduler a CURVE client. Null = off.
  const SecurityContext* security = nullptr;
  // Checkpoints (server/checkpointing.h): a part every checkpoint_interval
  // steps under checkpoint_root (0 = none); resume_dir non-empty: the
  // chunks start from that checkpoint, which must match `fingerprint` (the
  // config's, the layout is added here).
  std::int64_t checkpoint_interval = 0;
  std::string checkpoint_root;
  std::string resume_dir;
  CheckpointFingerprint fingerprint;
  // --rejoin (cluster.on_server_failure = "restart"): this server replaces a
  // failed one of its rank in a running job. resume_dir is then the newest
  // complete checkpoint; the chunks catch up to the workers' step
  // (ShardStore::catch_up) and the lost updates are counted.
  bool rejoin = false;
  // Parallel apply (server/parallel_apply.h): threads per update, 0 = the
  // host's cores shared among its servers (resolve_apply_threads, once the
  // rank is known); the smallest part a thread takes, in bytes.
  int apply_threads = 0;
  std::int64_t apply_split_bytes = std::int64_t{1} << 17;
};

class Server {
 public:
  // Over the node's transport (outliving the server).
  Server(Transport& transport, ServerOptions options, Logger& log);
  // Over a transport of its own (make_transport, common/transport/make_transport.h).
  Server(std::unique_ptr<Transport> transport, ServerOptions options, Logger& log);

  // Serves until shutdown (returns) or failure (throws).
  void run();

  int rank() const { return rank_; }
  const StoreStats& stats() const;
  const ShardMap& shard_map() const { return map_; }
  // The apply threads (after registration; before it: 0 threads, no runs).
  int apply_threads() const { return apply_pool_ ? apply_pool_->threads() : 0; }
  ApplyPoolStats apply_stats() const { return apply_pool_ ? apply_pool_->stats() : ApplyPoolStats{}; }
  // Its listener's unsent replies and the most the budget lets them reach
  // (Listener::unsent_bytes / unsent_limit; 0 before registration): safe
  // from any thread (the fuzzer's memory invariant).
  std::int64_t unsent_reply_bytes() const { return router_->unsent_bytes(); }
  std::int64_t unsent_reply_limit() const { return router_->unsent_limit(); }
  // Requests of several chunks (kPushChunks, kPullChunks) served, and the chunks they named.
  std::int64_t run_requests() const { return run_requests_; }
  std::int64_t run_chunks() const { return run_chunks_; }

 private:
  struct ParkedPull {
    PeerId from;
    Header request;
    std::chrono::steady_clock::time_point since;
  };

  void handle_request();
  void handle_sync_queue();
  // Whether `env`, a pull with `ahead` requests queued before it
  // (sync_queue_[0, ahead)), may be served before them with the replies of
  // arrival order (handle_sync_queue).
  bool pull_goes_first(const Envelope& env, std::size_t ahead) const;
  void serve_traced(Envelope& env);
  // Stage 1's read: the next queued request (nullopt: none); a malformed one
  // is answered with an error and skipped.
  std::optional<Envelope> receive_request();
  // Stages 1 (admission) to 5 of a received request, inside its trace span.
  void serve_request(Envelope& env, TraceSpan& span);
  // Registration; a rejoin refused because the scheduler has not yet noticed the failure is asked again.
  RegisterReply register_with(SchedulerClient& scheduler, const RegisterRequest& request);
  void on_worker_dropped(int worker, bool retired = false);
  void on_worker_rejoined(int worker, const std::string& token);
  // Elastic membership (server/server_elastic.cc): the slots past the
  // job's workers are vacant at the start; a worker joining one is admitted
  // from its announced step, acknowledged to the scheduler.
  int worker_slots(const RegisterReply& info) const;
  void vacate_slots(const RegisterReply& info);
  void on_worker_joining(SchedulerClient& scheduler, const SchedulerClient::Joining& joining);
  // After registration: the apply threads and the shard store of `info`'s job.
  void make_store(const RegisterReply& info);
  void limit_memory(int num_workers);  // the reply budget (server/admission.h)
  void note_unsent(const TransportError& e);
  void start_checkpoints();  // server/checkpointing.h: the saver, and the restore on resume
  // Stages 2-5 of an admitted request (above), by type.
  void serve(const PeerId& from, const Message& msg);
  void serve_init(const PeerId& from, const Message& msg);
  void serve_push(const PeerId& from, const Message& msg);
  void serve_pull(const PeerId& from, const Header& h);
  // kPushChunks, kPullChunks: each chunk of the run served as the single
  // request it stands for (chunk_request), with its own reply; a run that is
  // not this server's, or whose payload does not hold its chunks, gets an
  // error reply per chunk.
  void serve_chunks(const PeerId& from, const Message& msg);
  // The run's chunk sizes (RequestError when it is not wholly held here or
  // the payload's element count is not their sum); `sizes` is reused.
  void check_run(const Header& h, bool has_payload, std::vector<std::int64_t>& sizes) const;
  // Stage 2: whether the request moved its chunk's version or a clock.
  bool catch_up(const Header& h, bool pull);
  void reply_pull(const PeerId& to, const Header& request, std::int64_t parked_us = 0);
  void answer_parked(std::int64_t key);
  void reply(const PeerId& to, Header header, Payload payload = {});
  // Error reply; a peer that has gone is counted, not fatal.
  void reply_error(const PeerId& to, const Header& request, Status status, const std::string& text);
  // reply_error, once per chunk for a run (kPushChunks, kPullChunks): a
  // request refused whole (admission, a run not held here) still answers
  // each chunk's request id.
  void reply_error_each(const PeerId& to, const Header& request, Status status, const std::string& text);
  void park(const PeerId& from, const Header& h);
  void expire_parked();
  void unpark(const ParkedPull& p);

  Server(std::unique_ptr<Transport> owned, Transport* transport, ServerOptions options, Logger& log);

  std::unique_ptr<Transport> owned_transport_;  // the owning constructor's
  Transport& transport_;
  ServerOptions options_;
  Logger& log_;
  std::unique_ptr<ZapHandler> zap_;  // before router_: authenticates its connections
  std::unique_ptr<Listener> router_;
  std::string endpoint_;
  int rank_ = -1;
  ShardMap map_;
  std::unique_ptr<ApplyPool> apply_pool_;  // before store_, which uses it
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<ServerCheckpointer> checkpointer_;
  std::map<std::int64_t, std::vector<ParkedPull>> parked_;
  std::vector<float> scratch_;
  // Sync: requests read and not yet served, in arrival order (handle_sync_queue).
  static constexpr std::size_t kMaxSyncBatch = 64;
  std::vector<Envelope> sync_queue_;
  std::vector<std::int64_t> run_sizes_;  // serve_chunks: the run's chunk sizes (reused)
  // Pull replies in bfloat16 (ps.wire_dtype): per chunk, the weights of
  // `version` narrowed once and shared by every reply of that version; the
  // buffer is reused for a later version once no reply holds it.
  struct NarrowedWeights {
    std::int64_t version = -1;
    std::shared_ptr<std::vector<std::uint16_t>> values;
  };
  std::map<std::int64_t, NarrowedWeights> narrowed_;
  std::shared_ptr<const std::vector<std::uint16_t>> narrowed(std::int64_t key, const WeightsSnapshot& snap);
  std::int64_t bad_requests_ = 0;
  std::int64_t run_requests_ = 0, run_chunks_ = 0;
  std::int64_t unreachable_replies_ = 0;
  std::int64_t expired_pulls_ = 0;
  std::map<PeerId, int> parked_per_peer_;  // connection -> parked pulls
  Admission admission_;  // stage 1: who may send what
  PeerWarnings warnings_;
  StoreStats no_stats_;  // what stats() returns before the rendezvous
};

// "tcp://0.0.0.0:41234" + host "node7" -> "tcp://node7:41234"; other endpoints unchanged.
std::string advertised_endpoint(const std::string& bound, const std::string& host);

}  // namespace pstrain
