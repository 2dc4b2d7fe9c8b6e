// run_ps_worker, the training loop of the PS worker program (worker/main.cc),
// in-process: the workers on threads, the scheduler and servers of a
// LocalCluster over one FakeTransport (common/transport/fake/fake_transport.h)
// with a fault plan. Delayed messages and lost heartbeats must not change a
// sync run's final weights by one bit; a lost reply fails the worker that
// waits for it, saying how many replies never came, and ends the job.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/config/config.h"
#include "common/transport/fake/fake_transport.h"
#include "tests/cluster/run_workers.h"
#include "tests/support/temp_dir.h"
#include "tools/cluster/local_cluster.h"
#include "worker/train/checkpoint.h"
#include "worker/train/metrics.h"
#include "worker/train/ps_worker.h"
#include "worker/train/workload.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

// configs/tiny_sync.toml (small_cnn on synthetic data, 2 servers) with 3
// workers, so that the order in which gradients arrive could change the bits
// of their sum (float addition is not associative) were it not taken in rank
// order, for one epoch: 10 steps of batch 32 per worker.
RunConfig tiny_sync(const std::string& run_dir) {
  RunConfig c = load_config(std::string(PSTRAIN_SOURCE_DIR) + "/configs/tiny_sync.toml");
  c.cluster.num_workers = 3;
  c.workload.synthetic_train = 960;  // 320 samples per worker
  c.workload.epochs = 1;
  c.cluster.heartbeat_interval_ms = 100;
  c.cluster.timeout_ms = 30000;
  c.output.run_dir = run_dir;
  c.output.trace = "off";
  return c;
}

LocalClusterOptions cluster_options(const RunConfig& c) {
  LocalClusterOptions o;
  o.mode = c.mode;
  o.num_servers = c.cluster.num_servers;
  o.num_workers = c.cluster.num_workers;
  o.optimizer = c.optimizer;
  o.partition_bytes = c.ps.partition_bytes;
  o.cluster = c.cluster;
  o.transport = "fake";
  o.log_level = LogLevel::kError;
  return o;
}

struct JobResult {
  std::vector<float> weights;           // worker 0's weights.bin; empty if it failed
  std::vector<std::string> errors;      // per worker: what run_ps_worker threw, "" if nothing
  std::vector<std::int64_t> steps;      // per worker: steps trained
};

// One job: every worker runs run_ps_worker on its own thread, as its process would.
JobResult run_job(const RunConfig& c, const std::vector<FakeFault>& faults) {
  LocalCluster cluster(cluster_options(c));
  for (const FakeFault& f : faults) cluster.fake()->add_fault(f);
  const auto workers = static_cast<std::size_t>(c.cluster.num_workers);
  JobResult result{{}, std::vector<std::string>(workers), std::vector<std::int64_t>(workers, -1)};
  test::run_workers(c.cluster.num_workers, [&](int r) {
    Logger log("worker " + std::to_string(r), LogLevel::kError);
    Workload workload = make_workload(c, c.workload.batch_size, log, 1);
    WorkerSession session(cluster.transport(), cluster.worker_options(r), workload.model->layout());
    MetricsWriter metrics(c.output.run_dir, "worker-" + std::to_string(r) + ".jsonl");
    try {
      session.run_reporting_failure([&] {
        result.steps[static_cast<std::size_t>(r)] = run_ps_worker(c, session, workload, metrics, log).steps;
        session.finish();
      });
    } catch (const std::exception& e) {
      result.errors[static_cast<std::size_t>(r)] = e.what();
    }
  });
  try {
    cluster.join();
  } catch (const std::exception& e) {
    result.errors.push_back(std::string("cluster: ") + e.what());
  }
  if (result.errors[0].empty()) result.weights = read_weights(weights_path(c.output.run_dir));
  return result;
}

// Whether `error` is worker w's KV client giving up on replies that never came.
bool timed_out(const std::string& error, int w) {
  static const std::regex pattern("worker ([0-9]+): [1-9][0-9]* replies from the servers still missing after 5000 ms");
  std::smatch m;
  return std::regex_match(error, m, pattern) && m[1] == std::to_string(w);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

FakeFault delay_of(MsgType type, Role role, double probability, milliseconds delay) {
  FakeFault f;
  f.action = FakeFault::Action::kDelay;
  f.type = type;
  f.sender_role = role;
  f.probability = probability;
  f.delay = delay;
  return f;
}

}  // namespace

TEST_CASE("run_ps_worker over a fake network: delays and lost heartbeats leave a sync run's weights bit for bit") {
  const test::TempDir clean_dir("ps-clean");
  const JobResult clean = run_job(tiny_sync(clean_dir.path().string()), {});
  for (const std::string& e : clean.errors) CHECK(e == "");
  REQUIRE_FALSE(clean.weights.empty());
  CHECK(clean.steps == std::vector<std::int64_t>{10, 10, 10});

  struct Plan {
    std::string name;
    std::vector<FakeFault> faults;
  };
  FakeFault heartbeats_lost;
  heartbeats_lost.action = FakeFault::Action::kDrop;
  heartbeats_lost.type = MsgType::kHeartbeat;
  heartbeats_lost.probability = 0.5;  // the heartbeat timeout (10 s) is far off
  FakeFault worker0_pushes = delay_of(MsgType::kPush, Role::kWorker, 0.5, milliseconds(20));
  worker0_pushes.sender = 0;  // rank 0's gradient often comes last
  const std::vector<Plan> plans{
      {"worker 0's pushes delayed", {worker0_pushes}},
      {"pull replies delayed", {delay_of(MsgType::kPullReply, Role::kServer, 0.3, milliseconds(15))}},
      {"every worker's pushes delayed, heartbeats lost",
       {delay_of(MsgType::kPush, Role::kWorker, 0.3, milliseconds(10)), heartbeats_lost}},
  };
  for (const Plan& plan : plans) {
    CAPTURE(plan.name);
    const test::TempDir dir("ps-faults");
    const JobResult faulty = run_job(tiny_sync(dir.path().string()), plan.faults);
    for (const std::string& e : faulty.errors) CHECK(e == "");
    CHECK(faulty.steps == clean.steps);
    CHECK(same_bits(faulty.weights, clean.weights));
  }
}

TEST_CASE("run_ps_worker over a fake network: a lost push reply fails its worker, saying so, and ends the job") {
  const test::TempDir dir("ps-lost");
  RunConfig c = tiny_sync(dir.path().string());
  c.cluster.timeout_ms = 5000;  // how long the worker waits for the reply that never comes
  FakeFault lost;
  lost.action = FakeFault::Action::kDrop;
  lost.type = MsgType::kPushReply;
  lost.nth = 5;
  const JobResult r = run_job(c, {lost});
  // The worker whose reply was lost times out and reports it; the scheduler
  // aborts the job. The others, waiting for the stuck one's next push, are
  // stopped by the abort or (on a loaded machine) time out and report first.
  // Either way every worker stops with the reason and nothing waits for ever.
  REQUIRE(r.errors.size() == 4);  // the three workers', then the cluster's
  const std::string& cluster = r.errors[3];
  CAPTURE(cluster);
  CHECK(r.weights.empty());
  int reporter = -1;  // the worker whose failure ended the job
  for (int w = 0; w < 3; ++w) {
    const std::string& own = r.errors[static_cast<std::size_t>(w)];
    CHECK(r.steps[static_cast<std::size_t>(w)] == -1);
    // The scheduler's reason names the worker once; the cluster's first error is the
    // scheduler's own or a server's, which the abort reached first.
    const std::string reason = "worker " + std::to_string(w) + " failed: " + own;
    if (timed_out(own, w) &&
        (cluster == "cluster: " + reason || cluster == "cluster: job aborted by the scheduler: " + reason)) {
      reporter = w;
    }
  }
  REQUIRE(reporter >= 0);
  const std::string abort = "job aborted by the scheduler: " + ("worker " + std::to_string(reporter) + " failed: " +
                                                                r.errors[static_cast<std::size_t>(reporter)]);
  for (int w = 0; w < 3; ++w) {
    const std::string& own = r.errors[static_cast<std::size_t>(w)];
    CAPTURE(own);
    CHECK((own == abort || timed_out(own, w)));
  }
}
