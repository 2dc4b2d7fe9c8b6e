// The launcher's restart bookkeeping (tools/launcher/restart_policy.h):
// node names, the per-node budget, which policy applies, the log line.
#include <doctest/doctest.h>

#include "tools/launcher/restart_policy.h"

using namespace pstrain;
using namespace pstrain::launcher;

TEST_CASE("restart policy: names, budget per node, policy per role, the launcher's line") {
  const auto w3 = parse_node_name("worker 3");
  REQUIRE(w3.has_value());
  CHECK(w3->role == "worker");
  CHECK(w3->rank == 3);
  CHECK_FALSE(parse_node_name("scheduler").has_value());
  CHECK_FALSE(parse_node_name("worker x1").has_value());

  RestartBudget budget(2);
  CHECK(budget.take("worker 1") == 1);
  CHECK(budget.take("worker 1") == 2);
  CHECK_FALSE(budget.take("worker 1").has_value());  // past max_restarts
  CHECK(budget.take("worker 0") == 1);               // counted per node
  CHECK(budget.used("worker 1") == 2);
  CHECK(budget.used("server 0") == 0);

  RunConfig config;
  config.cluster.on_worker_failure = WorkerFailurePolicy::kRestart;
  config.cluster.on_server_failure = ServerFailurePolicy::kAbort;
  CHECK(failure_policy(config, "worker 2") == WorkerFailurePolicy::kRestart);
  CHECK(failure_policy(config, "server 0") == WorkerFailurePolicy::kAbort);
  CHECK(failure_policy(config, "scheduler") == WorkerFailurePolicy::kAbort);
  config.cluster.on_server_failure = ServerFailurePolicy::kRestart;
  CHECK(failure_policy(config, "server 0") == WorkerFailurePolicy::kRestart);

  CHECK(restart_line("worker 1", "exited with signal 9", 1, 3) ==
        "worker 1 exited with signal 9: restarting it (1 of 3, cluster.on_worker_failure = \"restart\")");
  CHECK(restart_line("server 0", "exited with code 1", 2, 3) ==
        "server 0 exited with code 1: restarting it (2 of 3, cluster.on_server_failure = \"restart\")");
}
