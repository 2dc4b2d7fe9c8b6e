// cluster.on_worker_failure = "continue" with real processes: a worker
// killed with SIGKILL in the middle of a run is dropped after the heartbeat
// timeout, the others finish the training, the launcher exits 0 and the
// summary says who was dropped and how many updates were made without it.
// In allreduce the survivors re-form the collective among themselves.
#include <doctest/doctest.h>

#include "tests/integration/launch_test_util.h"

namespace {

void kill_worker_mid_run(const std::string& mode, int victim = 1) {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / (mode == "allreduce" ? "configs/tiny_allreduce.toml" : "configs/tiny_sync.toml"), run);
  args.insert(args.end(), {"--set", "mode=" + mode, "--set", "cluster.workers=3", "--set",
                           "cluster.on_worker_failure=continue", "--set", "cluster.heartbeat_timeout_ms=1500",
                           "--set", "workload.epochs=3", "--set", "output.trace=off", "--quiet"});
  it::LaunchProcess p(args, dir.path() / "out.txt");
  const auto metrics = run / ("metrics/worker-" + std::to_string(victim) + ".jsonl");
  const bool training = it::wait_until([&] { return it::count_lines(metrics) >= 4; }, std::chrono::seconds(180));
  INFO(p.output());
  REQUIRE(training);
  const auto pids = it::read_pids(run);
  const std::string name = "worker-" + std::to_string(victim);
  REQUIRE(pids.count(name) == 1);
  REQUIRE(kill(pids.at(name), SIGKILL) == 0);

  const auto exit = p.wait(std::chrono::seconds(240));
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK_FALSE(exit->signaled);
  CHECK(exit->code == 0);
  CHECK(it::contains(output, "worker " + std::to_string(victim) + " was killed by signal 9 (Killed): the job goes on without it"));
  const std::string scheduler_log = it::read_file(run / "logs/scheduler.log");
  CHECK(it::contains(scheduler_log, "worker " + std::to_string(victim)));
  CHECK(it::contains(scheduler_log, "dropped from the job"));
  const std::string summary = it::read_file(run / "summary.json");
  CHECK(it::contains(summary, "\"dropped_workers\": [" + std::to_string(victim) + "]"));
  if (mode == "sync") CHECK_FALSE(it::contains(summary, "\"partial_updates\": 0,"));
  // The others trained to the end; worker 0, or the lowest one left, evaluated the final weights.
  std::vector<int> survivors;
  for (int w = 0; w < 3; ++w) {
    if (w != victim) survivors.push_back(w);
  }
  for (const int w : survivors) {
    CAPTURE(w);
    CHECK(it::contains(it::read_file(run / ("metrics/worker-" + std::to_string(w) + ".jsonl")), "\"type\":\"end\""));
  }
  CHECK(it::fs::exists(run / "weights.bin"));
  CHECK_FALSE(it::contains(summary, "\"final_test_accuracy\": null"));
  if (mode == "allreduce") {
    // Both survivors re-formed the collective as 2 workers and took the lowest one's state; the
    // replica check after each later epoch (an allreduce of weight fingerprints) passed.
    const std::string ranks = std::to_string(survivors[0]) + ", " + std::to_string(survivors[1]);
    for (const int w : survivors) {
      const std::string log = it::read_file(run / ("logs/worker-" + std::to_string(w) + ".log"));
      CAPTURE(w);
      CHECK(it::contains(log, "re-formed the collective without the dropped worker(s): 2 workers (" + ranks + ")"));
    }
  }
}

}  // namespace

TEST_CASE("continue: a worker killed mid-run in sync is dropped and the job finishes without it") {
  kill_worker_mid_run("sync");
}

TEST_CASE("continue: a worker killed mid-run in async is dropped and the job finishes without it") {
  kill_worker_mid_run("async");
}

TEST_CASE("continue: a worker killed mid-run in allreduce is dropped; the others re-form the collective and finish") {
  kill_worker_mid_run("allreduce");
}

TEST_CASE("continue: worker 0 killed mid-run in allreduce: worker 1 leads the others, evaluates and writes the weights") {
  kill_worker_mid_run("allreduce", 0);
}

TEST_CASE("continue: a worker stopped (SIGSTOP) past the heartbeat timeout is dropped; woken, it learns it and exits") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "cluster.workers=3", "--set", "cluster.on_worker_failure=continue", "--set",
                           "cluster.heartbeat_timeout_ms=1000", "--set", "workload.epochs=6", "--set",
                           "output.trace=off", "--quiet"});
  it::LaunchProcess p(args, dir.path() / "out.txt");
  const auto metrics = run / "metrics/worker-1.jsonl";
  REQUIRE(it::wait_until([&] { return it::count_lines(metrics) >= 4; }, std::chrono::seconds(180)));
  const auto pids = it::read_pids(run);
  const pid_t w1 = pids.at("worker-1");
  REQUIRE(kill(w1, SIGSTOP) == 0);
  const auto scheduler_log = run / "logs/scheduler.log";
  const bool dropped = it::wait_until([&] { return it::contains(it::read_file(scheduler_log), "dropped from the job"); },
                                      std::chrono::seconds(30));
  REQUIRE(kill(w1, SIGCONT) == 0);
  INFO(p.output());
  REQUIRE(dropped);
  const auto exit = p.wait(std::chrono::seconds(240));
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 0);
  CHECK(it::contains(output, "worker 1 exited with code"));  // it left on its own, after it woke
  CHECK(it::contains(output, "the job goes on without it"));
  CHECK(it::contains(it::read_file(run / "summary.json"), "\"dropped_workers\": [1]"));
  CHECK(it::process_gone(w1));
}

TEST_CASE("abort: a worker stopped past the heartbeat timeout is named in the launcher's headline") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "cluster.heartbeat_timeout_ms=1000", "--set", "workload.epochs=100", "--set",
                           "output.trace=off", "--quiet"});
  it::LaunchProcess p(args, dir.path() / "out.txt");
  REQUIRE(it::wait_until([&] { return it::count_lines(run / "metrics/worker-1.jsonl") >= 4; },
                         std::chrono::seconds(180)));
  const pid_t w1 = it::read_pids(run).at("worker-1");
  REQUIRE(kill(w1, SIGSTOP) == 0);
  const auto exit = p.wait(std::chrono::seconds(60));
  kill(w1, SIGCONT);  // let the stopped process take its SIGTERM
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 1);
  // The first line after the failure names the culprit, not whichever process exited first.
  const auto headline = output.find("the scheduler aborted the job: worker 1");
  CHECK(headline != std::string::npos);
  CHECK(it::contains(output, "sent no heartbeat"));
  const auto first_exit_line = output.find("exited with code 2");
  CHECK((first_exit_line == std::string::npos || headline < first_exit_line));
}
