// run_allreduce_node() of allreduce_worker.h: one pstrain-worker process in
// allreduce mode, from the config to the exit code.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>

#include "common/base/endpoint_address.h"
#include "common/base/errors.h"
#include "common/checkpoint/checkpoint.h"
#include "common/checkpoint/checkpoint_members.h"
#include "common/config/job_fingerprint.h"
#include "common/node/node_cli.h"
#include "common/node/retry.h"
#include "common/observe/resource_sampler.h"
#include "common/transport/make_transport.h"
#include "worker/collective/counting_collective.h"
#include "worker/collective/collective_factory.h"
#include "worker/collective/gpu_assignment.h"
#include "worker/collective/scheduler_store.h"
#include "worker/train/allreduce_worker.h"
#include "worker/train/epoch_members.h"
#include "worker/train/ps_rejoin.h"
#include "worker/train/records.h"

namespace pstrain {
namespace {

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

// The address of this worker that its Gloo peers dial: its entry of
// cluster.worker_hosts, else loopback when the scheduler is local, else
// this machine's host name.
std::string collective_host(const ClusterConfig& cluster, int rank) {
  if (!cluster.worker_hosts.empty()) return cluster.worker_hosts.at(static_cast<std::size_t>(rank));
  const std::string host = tcp_host(cluster.scheduler).value_or("127.0.0.1");
  return is_loopback(host) ? "127.0.0.1" : this_host();
}

// "cuda:N" -> N; anything else -> 0.
int cuda_index(const std::string& device) {
  return device.rfind("cuda:", 0) == 0 ? std::stoi(device.substr(5)) : 0;
}

// The workload on this worker's device (returned in `device`): one GPU per
// worker by local rank.
Workload make_local_workload(const RunConfig& config, int rank, Logger& log, std::string& device) {
  int local_rank = local_rank_from_env();
  if (local_rank < 0) local_rank = config.cluster.worker_hosts.empty() ? std::max(rank, 0) : 0;
  RunConfig local = config;
  std::string why_no_gpu;
  const int gpus = config.workload.device == "cpu" ? 0 : visible_cuda_devices(&why_no_gpu);
  local.workload.device = worker_device(config.workload.device, local_rank, gpus);
  if (local.workload.device != config.workload.device) {
    log.info("device " + config.workload.device + " -> " + local.workload.device + " (local rank " +
             std::to_string(local_rank) + " of a machine with " + std::to_string(gpus) + " GPU(s))");
  }
  device = local.workload.device;
  return make_workload(local, config.workload.batch_size, log);
}

// --rejoin: waits for the survivors to take this worker in (AllreduceJoin
// under allreduce_join_key in the scheduler's store); nullopt when the job
// ended first (the survivors said so, or the scheduler ended the job).
std::optional<AllreduceJoin> wait_to_join(WorkerSession& session, const ClusterConfig& cluster, Logger& log) {
  const std::string key = allreduce_join_key(session.rank(), session.scheduler().rejoin_take());
  log.info("rejoined the job (take " + std::to_string(session.scheduler().rejoin_take()) +
           "); waiting for the other workers to take this one into the collective at an epoch's end");
  // Each get is answered as soon as the key is set; one that expires costs a line in the
  // scheduler's log, so they are long (the job's end sets the key too: "end").
  const int poll_ms = std::min(cluster.timeout_ms, 10000);
  for (;;) {
    try {
      const AllreduceJoin join = parse_join(session.scheduler().store_get(key, poll_ms));
      if (join.live.empty()) return std::nullopt;
      return join;
    } catch (const TransportError&) {  // not set yet (the store's wait ended)
    } catch (const TimeoutError&) {
    }
    if (session.scheduler().shutdown_received() || session.scheduler().handle_incoming()) return std::nullopt;
    session.scheduler().check_scheduler_alive();
  }
}

// --join: waits for the change this worker's registration started to reach
// its boundary: its start (the scheduler's), then the collective the members
// form there (published by the lowest of them). nullopt when the join was
// abandoned (no step left; the scheduler said shutdown).
std::optional<AllreduceJoin> wait_to_grow(WorkerSession& session, const ClusterConfig& cluster, Logger& log) {
  const std::optional<JoinStart> start = wait_for_join_start(session.scheduler(), cluster.timeout_ms, log);
  if (!start) return std::nullopt;
  const std::string key = allreduce_grow_key(start->change);
  AllreduceJoin join = parse_join(session.scheduler().store_get(key, cluster.timeout_ms));
  const bool in = std::find(join.live.begin(), join.live.end(), session.rank()) != join.live.end();
  if (!in || join.first_step != start->global_step) {
    throw ProtocolError("join: '" + key + "' names workers " + format_members(join.live) + " from step " +
                        std::to_string(join.first_step) + ", but worker " + std::to_string(session.rank()) +
                        " was let in at step " + std::to_string(start->global_step));
  }
  join.start = start;
  return join;
}

// A --rejoin or --join process: the collective it enters, or nullopt when
// it leaves without training (told so; a rejoiner's end is said here).
std::optional<AllreduceJoin> wait_to_enter(WorkerSession& session, const ClusterConfig& cluster, bool rejoin,
                                           Logger& log) {
  if (rejoin) {
    std::optional<AllreduceJoin> join = wait_to_join(session, cluster, log);
    if (!join) {
      log.info("the job ended before this worker was taken back into the collective");
      session.finish();
    }
    return join;
  }
  std::optional<AllreduceJoin> join = wait_to_grow(session, cluster, log);
  // (Else the scheduler vacated the slot and said shutdown.)
  if (!join) log.info("the job had no step left to join at: leaving without training");
  return join;
}

// This worker's session options (its rank, --rejoin, the job's fingerprint
// naming the collective backend); traffic and security are the caller's.
WorkerSessionOptions session_options(const RunConfig& config, int rank, bool rejoin, bool join,
                                     const std::string& backend_name) {
  WorkerSessionOptions options;
  options.join = join;
  options.scheduler_endpoint = config.cluster.scheduler;
  options.cluster = config.cluster;
  options.partition_bytes = config.ps.partition_bytes;
  options.requested_rank = rank;
  options.rejoin = rejoin;
  options.job_fingerprint = job_fingerprint(config.mode, config.ps.partition_bytes, 0, config.cluster.num_workers) +
                            " collective=" + backend_name;
  return options;
}

// The options of the collective a worker starts in: the job's (`co`), or for
// a rejoined worker the survivors' grown collective of `join`'s generation.
CollectiveOptions first_collective(const CollectiveOptions& co, const std::optional<AllreduceJoin>& join, int worker) {
  CollectiveOptions first = co;
  if (join) {
    first.rank = static_cast<int>(std::find(join->live.begin(), join->live.end(), worker) - join->live.begin());
    first.size = static_cast<int>(join->live.size());
    first.key_prefix += "gen-" + generation_label(join->generation, join->live) + "/";
  }
  return first;
}

// The collective a worker starts in: the job's, or a --join / --rejoin
// worker's (`join`). Under "continue"/"restart" a member of `join` lost
// before or in its rendezvous ends it at its drop (the scheduler's
// announcement, the store's watch), and the worker forms the next generation
// without it, as the others do (allreduce_loop.h reform_collective); with
// every member alive (a connect timed out) the same members form it again
// (settle_failed_forming). `join` then says that generation and its members.
std::unique_ptr<Collective> form_first(const std::string& backend, const CollectiveOptions& co,
                                       std::optional<AllreduceJoin>& join, SchedulerStore& store,
                                       WorkerSession& session, const ClusterConfig& cluster, Logger& log,
                                       std::chrono::milliseconds connect_timeout) {
  if (!join || !drops_failed_workers(cluster.on_worker_failure)) {
    return make_collective(backend, first_collective(co, join, session.rank()), store);
  }
  CollectiveOptions watched = co;
  watched.connect_timeout = connect_timeout;
  SchedulerClient& scheduler = session.scheduler();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(cluster.heartbeat_timeout_ms + cluster.timeout_ms);
  const std::string doing = "worker " + std::to_string(session.rank()) + " was forming the collective";
  std::size_t members = 0;
  const std::function<bool()> member_dropped = [&] {
    for (const int r : scheduler.take_dropped()) {
      join->dropped.push_back(r);
      std::erase(join->live, r);
    }
    return join->live.size() < members;
  };
  for (;;) {
    members = join->live.size();
    store.set_watch([&] {
      if (member_dropped()) throw TransportError("a worker of the collective was dropped from the job");
    });
    std::string failure;
    try {
      std::unique_ptr<Collective> c = make_collective(backend, first_collective(watched, join, session.rank()), store);
      store.set_watch({});
      return c;
    } catch (const TransportError& e) {
      failure = e.what();
    } catch (const TimeoutError& e) {
      failure = e.what();
    } catch (...) {
      store.set_watch({});
      throw;
    }
    store.set_watch({});
    log.warn("forming the collective of generation " + std::to_string(join->generation) + " failed: " + failure +
             "; waiting for the scheduler to drop a failed worker");
    if (!settle_failed_forming(scheduler, cluster, member_dropped, deadline, failure, doing)) {
      log.warn("no worker of the collective was dropped: all " + std::to_string(members) +
               " are alive; forming the collective again");
      ++join->generation;  // the same members: the next number (one dropped: the same number, generation_label)
    }
    if (std::find(join->live.begin(), join->live.end(), session.rank()) == join->live.end()) {
      throw AbortedError("worker " + std::to_string(session.rank()) + " was dropped from the job");
    }
  }
}

// The collective of `options`, counted into `traffic`, `watch` set on the
// store while its rendezvous waits (a throw from it ends the rendezvous).
std::unique_ptr<Collective> make_watched(const std::string& backend, const CollectiveOptions& options,
                                         SchedulerStore& store, const std::function<void()>& watch,
                                         TrafficCounters& traffic) {
  store.set_watch(watch);
  try {
    auto made = std::make_unique<CountingCollective>(make_collective(backend, options, store), traffic);
    store.set_watch({});
    return made;
  } catch (...) {
    store.set_watch({});
    throw;
  }
}

// The workers of the collective a worker starts in (not joining): on a
// resume of an elastic job the checkpoint's members (resume_members: the
// ranks the launcher starts and the scheduler's rendezvous waits for; a grown
// job's joiners among them), else 0..workers-1. This worker must be one.
std::vector<int> members_at_start(const RunConfig& config, const std::string& resume_dir, int rank) {
  std::vector<int> members;
  if (!resume_dir.empty()) {
    members = resume_members(read_checkpoint_manifest(resume_dir), config.cluster);
  } else {
    for (int w = 0; w < config.cluster.num_workers; ++w) members.push_back(w);
  }
  if (std::find(members.begin(), members.end(), rank) == members.end()) {
    throw ConfigError("worker " + std::to_string(rank) + " is not a member of the collective it would start in (" +
                      format_members(members) + (resume_dir.empty() ? ")" : ", the members of " + resume_dir + ")"));
  }
  return members;
}

}  // namespace

int run_allreduce_node(const RunConfig& config, int requested_rank, const std::string& resume_dir, bool rejoin,
                       bool join) {
  const int workers = config.cluster.num_workers;
  // A joiner's slot is its --rank or the scheduler's choice, never a launcher's task index.
  const int rank = requested_rank >= 0 || join ? requested_rank : role_rank_from_launcher(1, workers, "worker");
  Logger log(rank >= 0 ? "worker " + std::to_string(rank) : "worker", parse_log_level(config.output.log_level));
  TraceRecorder trace(parse_trace_level(config.output.trace), log.clock());
  trace.set_process("worker", rank);
  trace.name_this_thread("training");
  const TraceFileGuard trace_file(trace, trace_dir(config.output.run_dir));  // also when training fails
  std::string device;
  Workload workload = make_local_workload(config, rank, log, device);
  nn::Backend& backend = *workload.backend;
  const std::string backend_name =
      resolve_collective_backend(config.collective.backend, backend.is_cuda(), backend.name());

  WorkerSessionOptions options = session_options(config, rank, rejoin, join, backend_name);
  TrafficCounters traffic;
  options.traffic = &traffic;
  const auto security = SecurityContext::load(config.security, Role::kWorker, rank);
  options.security = &security;
  WorkerSession session(make_zmq_transport(), options, workload.model->layout());
  log.set_name("worker " + std::to_string(session.rank()));
  trace.set_process("worker", session.rank());
  const auto sampler = start_resource_sampler(config.output, "worker", session.rank(), &traffic, log,
                                              cuda_device_index(backend), true);
  session.run_reporting_failure([&] {
    if (const std::int64_t change = session.retired_while_down(); change != 0) {  // its rank left while it was down
      leave_retired_while_down(*start_rejoined_worker(session.rank(), config, log).metrics, log, change);
      return;
    }
    SchedulerStore store(session.scheduler());
    std::optional<AllreduceJoin> join_at;
    if ((rejoin || join) && !(join_at = wait_to_enter(session, config.cluster, rejoin, log))) return;
    const std::vector<int> members = join_at ? join_at->live : members_at_start(config, resume_dir, session.rank());
    CollectiveOptions co;  // the first collective's place (a joiner's: first_collective)
    co.rank = static_cast<int>(std::find(members.begin(), members.end(), session.rank()) - members.begin());
    co.size = static_cast<int>(members.size());
    co.timeout = std::chrono::milliseconds(config.cluster.timeout_ms);
    co.host = collective_host(config.cluster, session.rank());
    co.cuda_device = backend.is_cuda() ? cuda_index(device) : 0;
    co.trace = &trace;
    // A collective whose members may be lost while it forms (a joiner's, a re-formed one): once every
    // member has arrived, one that does not connect within the heartbeat timeout is gone (the scheduler
    // drops it by then); a connect that times out with every member alive is retried (reform_collective).
    // Under "abort" a lost member ends the job anyway: Gloo's own connect wait (0), as without elasticity.
    const auto connect_timeout = std::chrono::milliseconds(
        drops_failed_workers(config.cluster.on_worker_failure) ? std::max(1000, config.cluster.heartbeat_timeout_ms) : 0);
    std::unique_ptr<Collective> collective = std::make_unique<CountingCollective>(
        form_first(backend_name, co, join_at, store, session, config.cluster, log, connect_timeout), traffic);
    WorkerStart start = rejoin ? start_rejoined_worker(session.rank(), config, log)
                               : start_worker(resume_dir, session.rank(), config, workload.model->num_params(), log);
    const std::optional<WorkerCheckpoint>& resume = start.resume;
    MetricsWriter& metrics = *start.metrics;
    write_compute_record(metrics, *workload.backend);
    // cluster.on_worker_failure = "continue": the collective re-formed among the workers left.
    const ReformCollective reform = [&](int new_rank, int new_size, const std::string& generation,
                                        const std::function<void()>& watch) {
      CollectiveOptions again = co;
      again.connect_timeout = connect_timeout;
      again.rank = new_rank;
      again.size = new_size;
      again.key_prefix = co.key_prefix + "gen-" + generation + "/";
      return make_watched(backend_name, again, store, watch, traffic);  // its rendezvous ends at a member's drop
    };
    // Under "restart" the others go on as under "continue" and take the restarted worker back at an
    // epoch's end; a membership change re-forms it under any policy.
    const TrainResult r = run_allreduce_worker(config, session, workload, *collective, metrics, log, &trace,
                                               resume ? &*resume : nullptr, &reform, join_at ? &*join_at : nullptr,
                                               &members);
    collective.reset();
    char line[200];
    std::snprintf(line, sizeof(line),
                  "done: %lld steps, %lld images in %.1f s (compute %.1f s, allreduce wait %.1f s, update %.1f s)",
                  static_cast<long long>(r.steps), static_cast<long long>(r.images), r.time_s, r.compute_s, r.push_s,
                  r.pull_s);
    log.info(line);
    if (!r.retired) session.finish();  // a retired worker told the scheduler already
  });
  return 0;
}

}  // namespace pstrain
