// One server_options() for every server (server/server_options.h): the
// in-process LocalCluster's servers run the optimizer a real pstrain-server
// runs for the same config, the momentum correction of async included.
#include <doctest/doctest.h>

#include <memory>

#include "common/checkpoint/checkpoint.h"
#include "common/config/job_fingerprint.h"
#include "common/math/optimizer.h"
#include "server/server_options.h"
#include "tests/cluster/run_workers.h"
#include "tools/cluster/local_cluster.h"

using namespace pstrain;
using pstrain::test::run_workers;

TEST_CASE("server_options: what a config gives every server") {
  RunConfig config;
  config.mode = Mode::kSsp;
  config.ps.staleness_bound = 3;
  config.ps.partition_bytes = 4096;
  config.cluster.num_servers = 3;
  config.cluster.num_workers = 4;
  config.cluster.scheduler = "tcp://sched:5555";
  config.optimizer.momentum = 0.9;
  config.checkpoint.interval_steps = 10;
  config.checkpoint.dir = "/tmp/ckpt";
  double implicit = 0.0;
  const ServerOptions o = server_options(config, &implicit);
  CHECK(o.mode == Mode::kSsp);
  CHECK(o.staleness_bound == 3);
  CHECK(o.partition_bytes == 4096);
  CHECK(o.scheduler_endpoint == "tcp://sched:5555");
  CHECK(o.optimizer.momentum == doctest::Approx(0.15));  // 0.9 - (1 - 1/4)
  CHECK(implicit == doctest::Approx(0.75));
  CHECK(o.job_fingerprint == job_fingerprint(Mode::kSsp, 4096, 3, 4));
  CHECK(o.checkpoint_interval == 10);
  CHECK(o.checkpoint_root == "/tmp/ckpt");
  CHECK(o.fingerprint == checkpoint_fingerprint(config));
}

// Worker 0 pushes three gradients to an async cluster of two workers with
// momentum 0.9: a real server runs momentum 0.9 - (1 - 1/2) = 0.4 there
// (optimizer.momentum_correction), so must the in-process one.
TEST_CASE("LocalCluster: an async cluster applies the momentum a real server would") {
  LocalClusterOptions o;
  o.mode = Mode::kAsync;
  o.num_servers = 1;
  o.num_workers = 2;
  o.optimizer.name = "sgd";
  o.optimizer.momentum = 0.9;
  o.optimizer.weight_decay = 0.0;
  o.cluster.timeout_ms = 20000;
  o.cluster.heartbeat_interval_ms = 100;
  RunConfig config;  // as pstrain-server reads it from a config file
  config.mode = Mode::kAsync;
  config.cluster.num_workers = 2;
  config.optimizer = o.optimizer;
  const OptimizerConfig real = server_optimizer(config);
  REQUIRE(real.momentum == doctest::Approx(0.4));

  constexpr std::size_t n = 8;
  constexpr int steps = 3;
  ParamLayout layout;
  layout.add("w", {static_cast<std::int64_t>(n)});
  auto grad_of = [](int step, std::size_t i) { return 0.25f * static_cast<float>(step + 1) + 0.125f * static_cast<float>(i); };
  std::vector<float> expected(n, 1.0f);
  const std::unique_ptr<Optimizer> reference = make_optimizer(real, static_cast<std::int64_t>(n));
  for (int step = 0; step < steps; ++step) {
    std::vector<float> g(n);
    for (std::size_t i = 0; i < n; ++i) g[i] = grad_of(step, i);
    reference->step(expected, g, 0.5);
  }

  LocalCluster cluster(o);
  std::vector<float> final_weights;
  run_workers(2, [&](int r) {
    WorkerSession session(cluster.transport(), cluster.worker_options(r), layout);
    std::vector<float> params(n, 1.0f);
    session.broadcast_initial(params);
    if (session.rank() == 0) {
      std::vector<float> grad(n);
      for (int step = 0; step < steps; ++step) {
        session.kv().wait(session.kv().pull(params, step));
        for (std::size_t i = 0; i < n; ++i) grad[i] = grad_of(step, i);
        session.kv().wait(session.kv().push(grad, step, 0.5));
      }
    }
    session.scheduler().barrier("pushed");
    if (session.rank() == 0) {
      session.kv().wait(session.kv().pull(params, steps));
      final_weights = params;
    }
    session.finish();
  });
  cluster.join();
  REQUIRE(final_weights.size() == n);
  for (std::size_t i = 0; i < n; ++i) CHECK(final_weights[i] == expected[i]);
}
