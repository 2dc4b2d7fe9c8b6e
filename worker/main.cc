// pstrain-worker: trains on its shard of the data against the parameter
// servers (sync, async; worker/train/ps_worker.h) or with its peers by
// allreduce (worker/train/allreduce_worker.h).
#include <optional>

#include "common/base/errors.h"
#include "common/base/log.h"
#include "common/node/node_cli.h"
#include "common/observe/resource_sampler.h"
#include "common/transport/make_transport.h"
#include "common/observe/trace.h"
#include "worker/client/worker_session.h"
#include "worker/collective/gpu_assignment.h"
#include "worker/train/allreduce_worker.h"
#include "worker/train/ps_rejoin.h"
#include "worker/train/ps_worker.h"
#include "worker/train/records.h"

namespace {

int run_worker(const pstrain::NodeArgs& args) {
  using namespace pstrain;
  const RunConfig config = load_node_config(args);
  check_scheduler_known(config, "worker");
  // A rejoin takes the job's current state from the servers (or its peers), never a checkpoint.
  const std::string resume_dir = args.rejoin ? std::string() : resume_checkpoint(args, config, [](const std::string& m) {
    std::fprintf(stderr, "pstrain-worker: %s\n", m.c_str());
  });
  if (config.mode == Mode::kAllreduce) return run_allreduce_node(config, args.rank, resume_dir, args.rejoin, args.join);
  const int servers = config.cluster.num_servers, workers = config.cluster.num_workers;
  // A joiner's slot is its --rank or the scheduler's choice, never a launcher's task index.
  const int rank = args.rank >= 0 || args.join ? args.rank : role_rank_from_launcher(1 + servers, workers, "worker");
  Logger log(rank >= 0 ? "worker " + std::to_string(rank) : "worker", parse_log_level(config.output.log_level));
  TraceRecorder trace(parse_trace_level(config.output.trace), log.clock());
  trace.set_process("worker", rank);
  trace.name_this_thread("training");
  const TraceFileGuard trace_file(trace, trace_dir(config.output.run_dir));  // also when training fails
  // A launcher's LOCAL_RANK picks the GPU of "auto"/"cuda", as in allreduce mode.
  RunConfig local = config;
  if (const int local_rank = local_rank_from_env(); local_rank >= 0 && config.workload.device != "cpu") {
    local.workload.device = worker_device(config.workload.device, local_rank, visible_cuda_devices());
  }
  Workload workload = make_workload(local, config.workload.batch_size, log);

  WorkerSessionOptions options;
  options.scheduler_endpoint = config.cluster.scheduler;
  options.cluster = config.cluster;
  options.partition_bytes = config.ps.partition_bytes;
  options.wire_dtype = wire_dtype_of(config.ps.wire_dtype);
  options.requested_rank = rank;
  options.job_fingerprint = job_fingerprint(config.mode, config.ps.partition_bytes, servers, workers);
  options.rejoin = args.rejoin;
  options.join = args.join;
  TrafficCounters traffic;
  options.traffic = &traffic;
  options.trace = &trace;
  const auto security = SecurityContext::load(config.security, Role::kWorker, rank);
  options.security = &security;
  // cluster.transport "shm": pushes and pull replies through shared memory with servers on this host.
  const std::unique_ptr<Transport> transport = make_transport(config.cluster.transport, config.ps.partition_bytes,
                                                                 io_threads_for(config.security.mode == "curve"));
  WorkerSession session(*transport, options, workload.model->layout());
  log.set_name("worker " + std::to_string(session.rank()));
  trace.set_process("worker", session.rank());
  const auto sampler = start_resource_sampler(config.output, "worker", session.rank(), &traffic, log,
                                              cuda_device_index(*workload.backend));
  session.run_reporting_failure([&] {
    WorkerStart start = args.rejoin ? start_rejoined_worker(session.rank(), config, log)
                                    : start_worker(resume_dir, session.rank(), config, workload.model->num_params(), log);
    const std::optional<WorkerCheckpoint>& resume = start.resume;
    MetricsWriter& metrics = *start.metrics;
    if (const std::int64_t change = session.retired_while_down(); change != 0) {
      leave_retired_while_down(metrics, log, change);  // its rank left the job while it was down
      return;
    }
    write_compute_record(metrics, *workload.backend);
    const TrainResult r =
        run_ps_worker(config, session, workload, metrics, log, &trace, resume ? &*resume : nullptr, args.rejoin, args.join);
    char line[200];
    std::snprintf(line, sizeof(line), "done: %lld steps, %lld images in %.1f s (compute %.1f s, pull %.1f s, push %.1f s)",
                  static_cast<long long>(r.steps), static_cast<long long>(r.images), r.time_s, r.compute_s, r.pull_s,
                  r.push_s);
    log.info(line);
    if (!r.retired) session.finish();  // a retired worker told the scheduler already
  });
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  pstrain::close_to_other_processes();  // before any segment, key or secret is held (node_cli.h)
  CLI::App app{"pstrain worker: trains the model on its data shard against the parameter servers"};
  pstrain::NodeArgs args;
  pstrain::add_node_options(app, args);
  CLI11_PARSE(app, argc, argv);
  return pstrain::guarded_main("pstrain-worker", [&] { return run_worker(args); });
}
