// A parameter server node: registers with the scheduler, learns the model
// layout and its shard of it, then serves init/push/pull requests from the
// workers on one Listener of its transport (common/transport/transport.h) until the
// scheduler says shutdown.
//
// One event-loop thread owns everything (socket, store). A bad request gets
// an error reply saying what was wrong and the loop goes on; only the
// scheduler's abort or shutdown and a broken socket end run(). Nothing here
// watches the scheduler itself: a server whose scheduler died keeps serving
// until it is stopped (the launcher stops it; by hand, kill it).
// A request is served only if it comes from the connection of the worker
// it names: each worker's connection is named "w" + the session token the
// scheduler gave it, and the server learns the tokens at the rendezvous; a
// push or pull in another worker's name, or from a connection no worker of
// this job was given, is refused.
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
#include "common/base/log.h"
#include "common/wire/protocol.h"
#include "common/node/scheduler_client.h"
#include "common/wire/security.h"
#include "common/math/shard_map.h"
#include "common/observe/traffic_counters.h"
#include "common/observe/trace.h"
#include "common/transport/transport.h"
#include "server/checkpointing.h"
#include "server/shard_store.h"

namespace pstrain {

// Parked pulls one connection may have per chunk the server holds (a worker
// has at most two: the next step's and an evaluation's).
inline constexpr int kMaxParkedPerChunk = 4;

struct ServerOptions {
  Mode mode = Mode::kSync;
  int staleness_bound = 0;  // ssp
  OptimizerConfig optimizer;
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

 private:
  struct ParkedPull {
    PeerId from;
    Header request;
    std::chrono::steady_clock::time_point since;
  };

  void handle_request();
  // Registration; a rejoin refused because the scheduler has not yet noticed the failure is asked again.
  RegisterReply register_with(SchedulerClient& scheduler, const RegisterRequest& request);
  void on_worker_rejoined(int worker, const std::string& token);
  // CURVE with per-worker keys: a request in worker R's name only over worker-R's key.
  void check_key_binding(const Envelope& env) const;
  void start_checkpoints();  // server/checkpointing.h: the saver, and the restore on resume
  void serve(const PeerId& from, const Message& msg);
  void reply_pull(const PeerId& to, const Header& request, std::int64_t parked_us = 0);
  void answer_parked(std::int64_t key);
  void reply(const PeerId& to, Header header, Payload payload = {});
  // Error reply; a peer that has gone is counted, not fatal.
  void reply_error(const PeerId& to, const Header& request, Status status, const std::string& text);
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
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<ServerCheckpointer> checkpointer_;
  std::map<std::int64_t, std::vector<ParkedPull>> parked_;
  std::vector<float> scratch_;
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
  std::int64_t unreachable_replies_ = 0;
  std::int64_t expired_pulls_ = 0;
  std::map<PeerId, int> parked_per_peer_;  // connection -> parked pulls
  std::map<std::string, int> worker_of_connection_;  // "w" + token -> worker rank (from the rendezvous)
  PeerWarnings warnings_;
  StoreStats no_stats_;  // what stats() returns before the rendezvous
};

// "tcp://0.0.0.0:41234" + host "node7" -> "tcp://node7:41234"; other endpoints unchanged.
std::string advertised_endpoint(const std::string& bound, const std::string& host);

}  // namespace pstrain
