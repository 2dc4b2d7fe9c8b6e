// A whole parameter-server job inside one process: the scheduler and the
// servers run as threads over one shared Transport (common/transport/transport.h):
// ZeroMQ on a context the cluster owns (inproc:// by default, or tcp/ipc on
// loopback) or a FakeTransport (transport = "fake"), and the caller runs the
// workers on its own threads with WorkerSession (over transport(), or a
// ZmqTransport of their own on zmq_context()). Used by the unit tests and
// benchmarks. Its threads are named (ps-scheduler, ps-server-N) so a benchmark
// can read each node's CPU time (tools/bench/thread_cpu.h).
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/config/config.h"
#include "common/transport/fake/fake_transport.h"
#include "common/base/log.h"
#include "common/transport/shm/shm_transport.h"
#include "common/transport/zmq/zmq_transport.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "worker/client/worker_session.h"

namespace pstrain {

struct LocalClusterOptions {
  Mode mode = Mode::kSync;
  int staleness_bound = 0;  // ssp
  int num_servers = 1;
  int num_workers = 1;
  OptimizerConfig optimizer;
  std::int64_t partition_bytes = std::int64_t{1} << 20;
  ClusterConfig cluster;
  std::string transport = "inproc";  // "inproc" | "ipc" | "tcp" | "shm" | "fake"
  std::uint64_t fake_seed = 1;       // transport "fake": its fault plan's seed
  LogLevel log_level = LogLevel::kWarn;
  // The scheduler's SchedulerOptions::on_failure (called on its thread); may be empty.
  std::function<void(const NodeFailure&)> on_failure = nullptr;
  // Empty: security mode "off" with a job secret the cluster generates
  // (job_secret(); every node answers the scheduler's challenge with it),
  // unless open_registration (below).
  // Non-empty: CURVE on with the job keys in this directory (pstrain-keygen).
  // The scheduler and each server then get a zmq context of their own (one
  // ZAP handler per context), so transport must be "tcp" or "ipc".
  std::string key_dir;
  // ZeroMQ's socket limit for the cluster's context (ZMQ_MAX_SOCKETS; 0: ZeroMQ's
  // default, 1023): a thousand workers on this context need a few sockets each.
  int zmq_max_sockets = 0;
  // Byte counters for the scheduler and for each server (num_servers of them);
  // may be null/empty; they must outlive the cluster.
  TrafficCounters* scheduler_traffic = nullptr;
  std::span<TrafficCounters> server_traffic;
  // No job secret: the scheduler takes registrations without a challenge
  // (for tests that send registrations by hand to exercise the rules behind it).
  bool open_registration = false;
  // The scheduler's SchedulerOptions::ctl_file ("workers N" requests; empty: none).
  std::string ctl_file;
  // The scheduler's SchedulerOptions::exits_file (the launcher's exit reports; empty: none).
  std::string exits_file;
};

// The run config `options` stand for (mode, sizes, optimizer, cluster with
// num_servers and num_workers): its servers get server_options() of it
// (server/server_options.h) as pstrain-server would, without its lr bound.
RunConfig run_config(const LocalClusterOptions& options);

class LocalCluster {
 public:
  explicit LocalCluster(LocalClusterOptions options);
  ~LocalCluster();  // joins the threads
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // Options for a worker's session in this cluster (rank -1: assigned).
  WorkerSessionOptions worker_options(int requested_rank = -1) const;
  const std::string& scheduler_endpoint() const { return scheduler_endpoint_; }
  // The transport every node of the cluster uses (workers: WorkerSession(cluster.transport(), ...)).
  Transport& transport() { return *transport_; }
  // transport "fake": its fault plan (add_fault before the workers start); else null.
  FakeTransport* fake() { return fake_; }
  // Mode "off": the job's secret (a worker without it is refused at registration); empty with CURVE.
  const std::string& job_secret() const { return scheduler_security_.job_secret; }
  // transport "shm": the ShmTransport (its counters say what went through shared memory); else null.
  ShmTransport* shm() { return shm_; }
  // The ZeroMQ context the cluster's endpoints live in: a worker's own
  // ZmqTransport, or a test's raw socket, must share it to reach inproc://
  // endpoints (any transport; "fake" has one all the same, unused).
  zmq::context_t& zmq_context() { return *ctx_; }
  // Waits for the scheduler and servers to end; rethrows the first failure.
  void join();

 private:
  std::string endpoint_for(const std::string& name) const;
  void run_guarded(const std::function<void()>& body);

  std::unique_ptr<zmq::context_t> ctx_;  // before transport_: outlives its sockets
  LocalClusterOptions options_;
  std::unique_ptr<Transport> transport_;  // ZmqTransport or ShmTransport over ctx_, or a FakeTransport
  FakeTransport* fake_ = nullptr;
  ShmTransport* shm_ = nullptr;
  std::string tag_;
  Logger log_;
  SecurityContext scheduler_security_;
  SecurityContext server_security_;
  SecurityContext worker_security_;               // the shared worker.key (rank -1)
  std::vector<SecurityContext> worker_security_of_rank_;  // by rank: worker-R.key, or worker.key
  std::unique_ptr<Scheduler> scheduler_;
  std::string scheduler_endpoint_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::exception_ptr failure_;
  bool joined_ = false;
};

}  // namespace pstrain
