#include "worker/client/worker_session.h"

#include <unistd.h>

#include <chrono>
#include <optional>

#include "common/base/errors.h"
#include "common/node/retry.h"

namespace pstrain {

namespace {

// A rejoin is refused for now (retryable) while the scheduler still counts
// the process it replaces as alive (until its heartbeat timeout): asked again
// every 200 ms, at most for timeout_ms.
RegisterReply rejoin_with_retries(SchedulerClient& scheduler, RegisterRequest req, const ClusterConfig& cluster) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cluster.timeout_ms);
  return *retry_until(deadline, "", retryable_refusal, [&] { return std::optional(scheduler.rejoin_node(req)); });
}

// A join waits (retryable refusals) while another membership change is under way.
RegisterReply join_with_retries(SchedulerClient& scheduler, RegisterRequest req, const ClusterConfig& cluster) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cluster.timeout_ms);
  return *retry_until(deadline, "", retryable_refusal, [&] { return std::optional(scheduler.join_node(req)); });
}

}  // namespace

WorkerSession::WorkerSession(std::unique_ptr<Transport> transport, const WorkerSessionOptions& options,
                             const ParamLayout& layout)
    : scheduler_(std::move(transport), options.scheduler_endpoint, Role::kWorker, options.cluster, options.traffic, options.security) {
  start(options, layout);
}

WorkerSession::WorkerSession(Transport& transport, const WorkerSessionOptions& options, const ParamLayout& layout)
    : scheduler_(transport, options.scheduler_endpoint, Role::kWorker, options.cluster, options.traffic,
                 options.security) {
  start(options, layout);
}

void WorkerSession::start(const WorkerSessionOptions& options, const ParamLayout& layout) {
  RegisterRequest req;
  req.requested_rank = options.requested_rank;
  req.host = this_host();
  req.pid = static_cast<std::int64_t>(getpid());
  req.job_fingerprint = options.job_fingerprint;
  req.layout = layout;
  const RegisterReply info = options.rejoin ? rejoin_with_retries(scheduler_, std::move(req), options.cluster)
                             : options.join ? join_with_retries(scheduler_, std::move(req), options.cluster)
                                            : scheduler_.register_node(std::move(req));
  num_workers_ = info.num_workers;
  server_endpoints_ = info.server_endpoints;
  if (info.retired_by_change != 0) return;  // retired while it was down: leaves without training
  if (info.num_servers > 0) {
    map_ = ShardMap(info.layout, info.num_servers, options.partition_bytes);
    KVClientOptions kv_options;
    kv_options.worker_rank = info.rank;
    kv_options.token = info.token;
    kv_options.timeout = std::chrono::milliseconds(options.cluster.timeout_ms);
    kv_options.max_message_bytes = options.cluster.max_message_bytes;
    kv_options.traffic = options.traffic;
    kv_options.trace = options.trace;
    kv_options.security = options.security;
    kv_options.wire_dtype = options.wire_dtype;
    kv_ = std::make_unique<KVClient>(scheduler_.transport(), map_, info.server_endpoints, kv_options, &scheduler_);
  }
}

DType wire_dtype_of(const std::string& name) {
  if (name == "float32") return DType::kFloat32;
  if (name == "bfloat16") return DType::kBFloat16;
  throw ConfigError("ps.wire_dtype: '" + name + "' is neither \"float32\" nor \"bfloat16\"");
}

void WorkerSession::run_reporting_failure(const std::function<void()>& body) {
  try {
    body();
  } catch (const AbortedError&) {
    throw;
  } catch (const DivergedError& e) {
    report_failure(e.what());  // already names the worker
    throw;
  } catch (const std::exception& e) {
    // Named once: the KV client's errors already start with "worker R: ".
    const std::string name = "worker " + std::to_string(rank()) + ": ";
    const std::string what = e.what();
    report_failure(what.rfind(name, 0) == 0 ? what : name + what);
    throw;
  }
}

void WorkerSession::broadcast_initial(std::span<float> params) {
  if (rank() == 0) kv_->wait(kv_->init(params));
  kv_->wait(kv_->pull(params, 0));
  // Nobody pushes before everyone holds version 0: in async mode a late
  // worker would otherwise start from weights already updated by others.
  scheduler_.barrier("initial weights");
}

}  // namespace pstrain
