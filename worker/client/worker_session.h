// Everything a worker process needs to talk to the job: its scheduler link
// (rendezvous, barriers, heartbeats, end) and its parameter-server client.
// Construction registers with the scheduler (blocking, at most timeout_ms)
// and connects to every server. One thread owns a session.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/config/config.h"
#include "common/config/job_fingerprint.h"
#include "common/math/param_layout.h"
#include "common/node/scheduler_client.h"
#include "common/wire/security.h"
#include "common/math/shard_map.h"
#include "worker/client/kv_client.h"

namespace pstrain {

struct WorkerSessionOptions {
  std::string scheduler_endpoint;
  ClusterConfig cluster;
  std::int64_t partition_bytes = std::int64_t{1} << 20;
  int requested_rank = -1;
  std::string job_fingerprint;
  TrafficCounters* traffic = nullptr;  // the node's byte counters (may be null; must outlive the session)
  TraceRecorder* trace = nullptr;  // the worker's timeline (per-chunk spans in the KV client); null = none
  const SecurityContext* security = nullptr;  // CURVE keys (common/wire/security.h); null = plain; must outlive the session
  DType wire_dtype = DType::kFloat32;  // ps.wire_dtype (wire_dtype_of below)
  // --rejoin: take back the rank of a dropped worker (requested_rank) in a
  // running job; refusals are tried again for at most cluster.timeout_ms (the
  // scheduler may not have dropped the process this one replaces yet).
  bool rejoin = false;
  // --join: take a vacant slot of a running elastic job (requested_rank, or
  // the lowest vacant one); a refusal for now (another change under way) is
  // tried again for at most cluster.timeout_ms, any other ends the process.
  bool join = false;
};

// ps.wire_dtype as the protocol's dtype; ConfigError for another name.
DType wire_dtype_of(const std::string& name);

class WorkerSession {
 public:
  // Over a transport of its own (make_transport, common/transport/make_transport.h).
  WorkerSession(std::unique_ptr<Transport> transport, const WorkerSessionOptions& options, const ParamLayout& layout);
  // Over the node's transport (common/transport/transport.h; outliving the session).
  WorkerSession(Transport& transport, const WorkerSessionOptions& options, const ParamLayout& layout);

  int rank() const { return scheduler_.rank(); }
  int num_workers() const { return num_workers_; }
  int num_servers() const { return map_.num_servers(); }
  const ShardMap& shard_map() const { return map_; }
  const std::vector<std::string>& server_endpoints() const { return server_endpoints_; }
  // A --rejoin of a rank retired while it was down (SchedulerClient::retired_by_change): non-zero,
  // and the session has no KV client; the process leaves without training (leave_retired_while_down).
  std::int64_t retired_while_down() const { return scheduler_.retired_by_change(); }
  KVClient& kv() { return *kv_; }
  SchedulerClient& scheduler() { return scheduler_; }

  // The initial model: worker 0 sends `params` to the servers; every worker
  // then pulls version 0 into `params`, and all meet at a barrier, so every
  // worker starts from exactly worker 0's initial weights.
  void broadcast_initial(std::span<float> params);
  // Tells the scheduler this worker is done and waits for the shutdown.
  void finish() { scheduler_.finish(); }
  void report_failure(const std::string& reason) noexcept { scheduler_.report_failure(reason); }
  // Runs `body`; if it throws anything but an abort, tells the scheduler
  // ("worker R: <what>") so the job stops at once, then rethrows.
  void run_reporting_failure(const std::function<void()>& body);

 private:
  void start(const WorkerSessionOptions& options, const ParamLayout& layout);  // registration, KV client

  SchedulerClient scheduler_;
  int num_workers_ = 0;
  ShardMap map_;
  std::vector<std::string> server_endpoints_;
  std::unique_ptr<KVClient> kv_;
};

}  // namespace pstrain
