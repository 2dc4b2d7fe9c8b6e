// Heartbeats both ways: roles started by hand (no launcher to clean up), the
// scheduler killed with SIGKILL, or stopped with SIGSTOP and never continued
// (a hung scheduler: its sockets stay open, so no connection drops), mid-run;
// every server and worker notices its silence within
// cluster.heartbeat_timeout_ms and exits naming it, instead of serving
// forever or training to the end and failing at the last barrier.
#include <doctest/doctest.h>

#include <csignal>

#include "tests/integration/launch_test_util.h"

namespace {

void scheduler_lost_by(int signal) {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const std::string port = std::to_string(it::free_port());
  const std::string config = (it::kSourceDir / "configs/tiny_sync.toml").string();  // 2 servers, 2 workers
  const std::vector<std::string> common{"--config", config, "--set", "output.run_dir=" + run.string(), "--set",
                                        "workload.epochs=1000", "--set", "cluster.heartbeat_timeout_ms=2000",
                                        "--set", "output.trace=off", "--set", it::secret_override(dir.path())};
  auto role = [&](const std::string& program, const std::string& rank) {
    std::vector<std::string> argv{(it::kBinDir / program).string()};
    argv.insert(argv.end(), common.begin(), common.end());
    argv.insert(argv.end(), {"--scheduler", "tcp://127.0.0.1:" + port});
    if (!rank.empty()) argv.insert(argv.end(), {"--rank", rank});
    return argv;
  };
  std::vector<std::string> sched{(it::kBinDir / "pstrain-scheduler").string()};
  sched.insert(sched.end(), common.begin(), common.end());
  sched.insert(sched.end(), {"--set", "cluster.scheduler=tcp://127.0.0.1:" + port});
  const pid_t scheduler = it::spawn(sched, {}, dir.path() / "scheduler.txt");
  std::vector<std::pair<std::string, pid_t>> nodes;
  for (int s = 0; s < 2; ++s) {
    nodes.emplace_back("server " + std::to_string(s),
                       it::spawn(role("pstrain-server", std::to_string(s)), {}, dir.path() / ("server-" + std::to_string(s) + ".txt")));
  }
  for (int w = 0; w < 2; ++w) {
    nodes.emplace_back("worker " + std::to_string(w),
                       it::spawn(role("pstrain-worker", std::to_string(w)), {}, dir.path() / ("worker-" + std::to_string(w) + ".txt")));
  }
  const bool training = it::wait_until([&] { return it::count_lines(run / "metrics/worker-1.jsonl") >= 4; },
                                       std::chrono::seconds(120), "4 metrics lines of worker 1");
  INFO(it::read_file(dir.path() / "scheduler.txt"));
  REQUIRE(training);
  REQUIRE(kill(scheduler, signal) == 0);
  if (signal == SIGKILL) it::wait_exit(scheduler, std::chrono::seconds(5));
  const auto killed = std::chrono::steady_clock::now();
  for (const auto& [name, pid] : nodes) {
    CAPTURE(name);
    const std::optional<int> code = it::wait_exit(pid, std::chrono::seconds(20));
    if (!code) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    const std::string file = name.substr(0, name.find(' ')) + "-" + name.substr(name.find(' ') + 1) + ".txt";
    const std::string output = it::read_file(dir.path() / file);
    INFO(output);
    REQUIRE(code.has_value());
    CHECK(*code != 0);
    CHECK(it::contains(output, "the scheduler at tcp://127.0.0.1:" + port + " sent nothing for"));
    CHECK(it::contains(output, "it is gone"));
  }
  // All within the heartbeat timeout (2 s) and a margin for a loaded machine,
  // not the 120 s of timeout_ms.
  CHECK(std::chrono::steady_clock::now() - killed < std::chrono::seconds(60));
  if (signal != SIGKILL) {
    kill(scheduler, SIGKILL);
    it::wait_exit(scheduler, std::chrono::seconds(5));
  }
}

}  // namespace

TEST_CASE("a killed scheduler ends every node within the heartbeat timeout, by its silence") {
  scheduler_lost_by(SIGKILL);
}

TEST_CASE("a stopped scheduler (SIGSTOP, never continued) ends every node within the heartbeat timeout, by its silence") {
  scheduler_lost_by(SIGSTOP);
}

TEST_CASE("async with a 5x straggler: the fast worker waits at the final barrier longer than timeout_ms, and the job ends well") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "mode=async", "--set", "workload.straggler_rank=1", "--set",
                           "workload.straggler_slowdown=5", "--set", "workload.epochs=6", "--set", "workload.simulated_step_ms=20", "--set",
                           "cluster.timeout_ms=6000", "--set", "output.trace=off", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  CHECK(r.exit.code == 0);
  // The fast worker really finished more than timeout_ms before the straggler.
  const std::string w0 = it::read_file(run / "metrics/worker-0.jsonl");
  const std::string w1 = it::read_file(run / "metrics/worker-1.jsonl");
  auto last_step_time = [](const std::string& text) {
    const std::string mark = "\"type\":\"step\",\"time_s\":";
    const auto at = text.rfind(mark);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + mark.size()));
  };
  CHECK(last_step_time(w1) - last_step_time(w0) > 6.0);
}
