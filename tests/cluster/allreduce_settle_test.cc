// settle_failed_forming (worker/train/allreduce_worker.h) against a real
// scheduler: after an allreduce collective failed to form, every member waits
// the same bounded time for a drop; none means every member is alive and the
// same members form the collective again (not fatal) until the deadline.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "tests/cluster/run_workers.h"
#include "tests/support/throw_text.h"
#include "tools/cluster/local_cluster.h"
#include "worker/train/allreduce_worker.h"

using namespace pstrain;

TEST_CASE("settle_failed_forming: a drop ends the wait; none after its bound means every member is alive") {
  LocalClusterOptions o;
  o.mode = Mode::kSync;
  o.num_servers = 1;
  o.num_workers = 1;
  o.cluster.timeout_ms = 60000;
  o.cluster.heartbeat_interval_ms = 100;
  o.cluster.heartbeat_timeout_ms = 2000;
  o.log_level = LogLevel::kError;
  LocalCluster cluster(o);
  ParamLayout layout;
  layout.add("w", {16});
  test::run_workers(1, [&](int r) {
    WorkerSession session(cluster.transport(), cluster.worker_options(r), layout);
    std::vector<float> params(16, 1.0f);
    session.broadcast_initial(params);
    SchedulerClient& scheduler = session.scheduler();
    const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(10);

    int polls = 0;  // a drop seen at the 3rd look: at once, not after the bound
    CHECK(settle_failed_forming(scheduler, o.cluster, [&] { return ++polls == 3; }, far, "x", "worker 0 was forming"));
    CHECK(polls == 3);

    // Nobody dropped: false once heartbeat_timeout_ms x 1.5 + heartbeat_interval_ms (3100 ms) have passed,
    // by when a member lost before the failure would have been dropped (the wait is the feature).
    const auto start = std::chrono::steady_clock::now();
    CHECK_FALSE(settle_failed_forming(scheduler, o.cluster, [] { return false; }, far, "x", "worker 0 was forming"));
    CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(3100));

    // Past the deadline with nobody dropped: the failure is fatal, naming it and the limit.
    const std::string err = test::thrown_text([&] {
      settle_failed_forming(scheduler, o.cluster, [] { return false; }, std::chrono::steady_clock::now(),
                            "a connect timed out", "worker 0 was forming");
    });
    CHECK(err.find("forming the collective failed (a connect timed out) and no worker was dropped within 62000 ms") !=
          std::string::npos);
    session.finish();
  });
  cluster.join();
}
