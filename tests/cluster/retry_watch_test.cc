// retry_until watching a real scheduler (common/node/retry.h watch_scheduler):
// a failure the scheduler reports ends the wait at once with its reason, not
// at the deadline. Ordered by the event itself: the waiting worker retries
// until the scheduler's abort reaches it.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/node/retry.h"
#include "tests/cluster/run_workers.h"
#include "tools/cluster/local_cluster.h"

using namespace pstrain;

TEST_CASE("retry_until watching the scheduler: another worker's reported failure ends the wait with the reason") {
  LocalClusterOptions o;
  o.mode = Mode::kSync;
  o.num_servers = 1;
  o.num_workers = 2;
  o.cluster.timeout_ms = 60000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 5000;
  o.cluster.on_worker_failure = WorkerFailurePolicy::kAbort;
  o.log_level = LogLevel::kError;
  LocalCluster cluster(o);
  ParamLayout layout;
  layout.add("w", {16});
  std::string reason;
  int attempts = 0;
  const auto start = RetryClock::now();
  test::run_workers(2, [&](int r) {
    WorkerSession session(cluster.transport(), cluster.worker_options(r), layout);
    std::vector<float> params(16, 1.0f);
    session.broadcast_initial(params);
    if (r == 1) {
      session.scheduler().report_failure("worker 1: the disk is full");
      return;
    }
    RetryOptions retry;
    retry.interval = std::chrono::milliseconds(10);
    retry.watch = watch_scheduler(session.scheduler(), "worker 0 was waiting");
    try {
      retry_until(start + std::chrono::minutes(10), "", nullptr, [&]() -> std::optional<bool> {
        ++attempts;
        return std::nullopt;  // never ready: only the scheduler can end this wait
      }, retry);
    } catch (const AbortedError& e) {
      reason = e.what();
    }
  });
  CHECK(reason.find("worker 1: the disk is full") != std::string::npos);
  CHECK(attempts >= 1);
  CHECK_THROWS_AS(cluster.join(), AbortedError);
}
