#include "tools/bench/ps_pushpull.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "common/base/errors.h"
#include "common/transport/make_transport.h"
#include "common/transport/transport.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "server/server_options.h"
#include "tools/bench/processes.h"
#include "worker/client/worker_session.h"

namespace pstrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A worker's rounds; returns "median_seconds wrong".
SecurityContext security_for(const std::string& key_dir, Role role) {
  // Plain: no job secret, registration open (the bench's own processes only).
  return key_dir.empty() ? SecurityContext{} : SecurityContext::load(SecurityConfig{"curve", key_dir}, role);
}

// A node's transport, with the I/O threads a node of this security would get (or `io_threads`).
std::unique_ptr<Transport> node_transport(const std::string& kind, std::int64_t partition, const std::string& key_dir,
                                          int io_threads) {
  return make_transport(kind, partition, io_threads > 0 ? io_threads : io_threads_for(!key_dir.empty()));
}

std::string worker_rounds(const std::string& sched, const ClusterConfig& cluster, std::int64_t partition, int rank,
                          const std::string& fp, const ParamLayout& layout, int rounds, const std::string& key_dir,
                          DType wire_dtype, int io_threads) {
  const std::unique_ptr<Transport> transport = node_transport(cluster.transport, partition, key_dir, io_threads);
  const SecurityContext security = security_for(key_dir, Role::kWorker);
  WorkerSessionOptions options{sched, cluster, partition, rank, fp};
  options.security = &security;
  options.wire_dtype = wire_dtype;
  WorkerSession session(*transport, options, layout);
  const auto num_elems = static_cast<std::size_t>(layout.total_elems());
  std::vector<float> params(num_elems, 0.0f);
  // The gradients in the transport's send memory, as a worker's are
  // (worker/train/ps_worker.cc): with shm an arena the servers read in place.
  const SendFloats grads = transport->allocate_send_floats(num_elems);
  std::fill(grads.values.begin(), grads.values.end(), 1.0f);
  session.broadcast_initial(params);
  std::vector<double> times;
  KVClient& kv = session.kv();
  for (int r = 0; r < rounds + 2; ++r) {
    const auto t0 = Clock::now();
    // The pull is sent at once: the servers park it until the update is applied.
    const auto push = kv.push(grads.values, r, 1.0);
    const auto pull = kv.pull(params, r + 1);
    kv.wait(push);
    kv.wait(pull);
    if (r >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  int wrong = 0;
  for (float x : params) wrong += x != -static_cast<float>(rounds + 2) ? 1 : 0;
  session.finish();
  return std::to_string(median(times)) + " " + std::to_string(wrong);
}

}  // namespace

PsRound ps_pushpull_round(std::size_t num_bytes, int rounds, const PsBenchOptions& a) {
  const auto num_elems = static_cast<std::int64_t>(num_bytes / sizeof(float));
  ParamLayout layout;
  layout.add("tensor", {num_elems});
  ClusterConfig cluster;
  cluster.timeout_ms = 120000;
  cluster.transport = a.transport;
  const std::int64_t partition =
      a.partition_bytes > 0 ? a.partition_bytes
                            : std::max<std::int64_t>(4, (static_cast<std::int64_t>(num_bytes) + a.servers - 1) / a.servers);
  const std::string fp = job_fingerprint(Mode::kSync, partition, a.servers, a.workers);
  LinePipe endpoint_pipe, result_pipe;
  std::vector<pid_t> pids;
  pids.push_back(spawn([&] {
    const SecurityContext security = security_for(a.key_dir, Role::kScheduler);
    Logger log("scheduler", LogLevel::kWarn);
    SchedulerOptions so{a.servers, a.workers, cluster, "tcp://127.0.0.1:*"};
    so.security = &security;
    Scheduler s(make_zmq_transport(), so, log);
    if (!endpoint_pipe.write_line(s.endpoint())) return 1;
    s.run();
    return 0;
  }));
  endpoint_pipe.close_write();
  const std::string sched = endpoint_pipe.read_line();
  for (int s = 0; s < a.servers; ++s) {
    pids.push_back(spawn([&, s] {
      const SecurityContext security = security_for(a.key_dir, Role::kServer);
      Logger log("server", LogLevel::kWarn);
      RunConfig config;
      config.optimizer.momentum = 0.0;
      config.optimizer.lr = 1.0;  // the rate the workers push (the servers refuse a higher one)
      config.ps.partition_bytes = partition;
      config.cluster = cluster;
      config.cluster.num_servers = a.servers;
      config.cluster.num_workers = a.workers;
      config.cluster.scheduler = sched;
      ServerOptions o = server_options(config);  // its job fingerprint is fp
      o.security = &security;
      o.bind_endpoint = a.transport == "ipc" ? "ipc:///tmp/pstrain-bench-" + std::to_string(getpid()) : "tcp://127.0.0.1:*";
      o.requested_rank = s;
      const std::unique_ptr<Transport> transport = node_transport(a.transport, partition, a.key_dir, a.io_threads);
      Server server(*transport, o, log);
      server.run();
      return 0;
    }));
  }
  for (int w = 0; w < a.workers; ++w) {
    pids.push_back(spawn([&, w] {
      const std::string line =
          worker_rounds(sched, cluster, partition, w, fp, layout, rounds, a.key_dir, wire_dtype_of(a.wire_dtype),
                        a.io_threads);
      return w != 0 || result_pipe.write_line(line) ? 0 : 1;
    }));
  }
  result_pipe.close_write();
  const std::string out = result_pipe.read_line();
  const bool ok = wait_all(pids);
  PsRound result;
  if (!ok || out.empty() || std::sscanf(out.c_str(), "%lf %d", &result.seconds, &result.wrong) != 2) {
    throw Error("a parameter-server benchmark process failed");
  }
  return result;
}

}  // namespace pstrain::bench
