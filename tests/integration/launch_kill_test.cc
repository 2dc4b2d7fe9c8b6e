// A real worker killed with SIGKILL in the middle of a real run: the
// launcher notices at once, names the worker and the signal, stops the rest
// and fails.
#include <doctest/doctest.h>

#include "tests/integration/launch_test_util.h"

TEST_CASE("killing worker 1 mid-run stops the run with a message naming it") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "workload.epochs=1000", "--quiet"});  // far longer than the test
  it::LaunchProcess p(args, dir.path() / "out.txt");
  const auto metrics = run / "metrics/worker-1.jsonl";
  const bool training = it::wait_until([&] { return it::count_lines(metrics) >= 3; }, std::chrono::seconds(180),
                                       "3 metrics lines of worker 1");
  INFO(p.output());
  REQUIRE(training);
  const auto pids = it::read_pids(run);
  REQUIRE(pids.count("worker-1") == 1);
  REQUIRE(kill(pids.at("worker-1"), SIGKILL) == 0);

  const auto start = std::chrono::steady_clock::now();
  const auto exit = p.wait(std::chrono::seconds(60));
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK_FALSE(exit->signaled);
  CHECK(exit->code == 1);
  CHECK(it::contains(output, " launch] worker 1 was killed by signal 9"));
  CHECK(it::contains(output, "run failed"));
  // Only a partial summary (what ran until the failure), saying why it ended.
  const std::string summary = it::read_file(run / "summary.json");
  CHECK(it::contains(summary, "\"partial\": true"));
  CHECK(it::contains(summary, "\"partial_reason\": \"failed: worker 1 was killed by signal 9"));
  // Stopped at once (SIGTERM to the rest), not after the scheduler's heartbeat timeout.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(8));
  for (const auto& [name, pid] : pids) {
    CAPTURE(name);
    CHECK(it::process_gone(pid));
  }
}
