// security.mode = "curve" with cluster.on_worker_failure = "restart" and
// the launcher's per-worker keys, real processes (issue 27, item 7): worker 1
// killed with SIGKILL, its replacement registers with --rejoin over worker-1's
// own key, takes rank 1 back, and the job completes (it was refused: "not a
// worker's key", the scheduler wanting the shared key's name).
#include <doctest/doctest.h>

#include <csignal>
#include <string>

#include "tests/integration/launch_test_util.h"

TEST_CASE("curve with on_worker_failure = restart: a killed worker's replacement takes its rank back with its own key") {
  it::TempDir dir("admission");
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "security.mode=curve", "--set", "cluster.on_worker_failure=restart", "--set",
                           "cluster.heartbeat_timeout_ms=1500", "--set", "cluster.timeout_ms=30000", "--set",
                           "workload.epochs=4", "--set", "output.trace=off", "--quiet"});
  it::LaunchProcess p(args, dir.path() / "out.txt");
  const auto metrics = run / "metrics/worker-1.jsonl";
  const auto steps = [&] {
    const std::string text = it::read_file(metrics);
    int n = 0;
    for (auto at = text.find("\"type\":\"step\""); at != std::string::npos; at = text.find("\"type\":\"step\"", at + 1)) ++n;
    return n;
  };
  const bool training = it::wait_until([&] { return steps() >= 3; }, std::chrono::seconds(180), "3 steps of worker 1");
  INFO(p.output());
  REQUIRE(training);
  const auto pids = it::read_pids(run);
  REQUIRE(pids.count("worker-1") == 1);
  REQUIRE(kill(pids.at("worker-1"), SIGKILL) == 0);
  const auto exit = p.wait(std::chrono::seconds(240));
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK_FALSE(exit->signaled);
  CHECK(exit->code == 0);
  CHECK(it::contains(output, "worker 1 was killed by signal 9 (Killed): restarting it (1 of "));
  const std::string scheduler_log = it::read_file(run / "logs/scheduler.log");
  CHECK_FALSE(it::contains(scheduler_log, "not a worker's key"));
  CHECK(it::contains(scheduler_log, "worker 1 rejoined the job"));
  const std::string victim = it::read_file(metrics);
  CHECK(victim.find("\"type\":\"rejoin\"") != std::string::npos);
  CHECK(victim.find("\"type\":\"end\"", victim.find("\"type\":\"rejoin\"")) != std::string::npos);
}
