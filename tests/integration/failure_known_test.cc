// Failures known at once: the launcher tells the scheduler when a node's
// process exits (RUN_DIR/exits.txt, common/node/exit_report.h), so a killed
// worker is dropped or restarted without waiting for the heartbeat timeout,
// which these runs set to 60 s: before, a sync job stalled those 60 s, and
// under "restart" the scheduler refused the new process ("is alive") until
// then. The status line shows the dropped worker and ends with a done line.
#include <doctest/doctest.h>

#include <csignal>

#include "tests/integration/launch_test_util.h"
#include "tools/report/metrics.h"

namespace {

namespace report = pstrain::report;

// A sync run of tiny_sync with `workers` workers, `policy` for a worker's
// failure and a heartbeat timeout of 60 s; worker 1 is killed (SIGKILL)
// after 3 of its steps. Returns the launcher's output once it has exited 0.
std::string kill_worker_1(const it::fs::path& run, const it::fs::path& dir, int workers, const std::string& policy) {
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "cluster.workers=" + std::to_string(workers), "--set",
                           "cluster.on_worker_failure=" + policy, "--set", "cluster.heartbeat_timeout_ms=60000",
                           "--set", "cluster.timeout_ms=120000", "--set", "workload.epochs=3", "--set",
                           "output.trace=off", "--quiet", "--status-interval-s", "1000"});
  it::LaunchProcess p(args, dir / "out.txt");
  const bool training = it::wait_until([&] { return it::count_lines(report::worker_metrics_path(run, 1)) >= 4; },
                                       std::chrono::seconds(180), "worker 1's first steps");
  INFO(p.output());
  REQUIRE(training);
  REQUIRE(kill(it::read_pids(run).at("worker-1"), SIGKILL) == 0);
  // Known within seconds, not after the 60 s of silence (a wide margin for a loaded machine).
  const bool known = it::wait_until(
      [&] { return it::contains(it::read_file(run / "logs/scheduler.log"), "(reported by the launcher)"); },
      std::chrono::seconds(30), "the scheduler acting on the launcher's report");
  INFO(it::read_file(run / "logs/scheduler.log"));
  CHECK(known);
  const auto exit = p.wait(std::chrono::seconds(240));
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 0);
  return output;
}

// The status line's last line ("[ t status] done: ...").
std::string last_status_line(const std::string& output) {
  std::string last;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (it::contains(line, " status] ")) last = line;
  }
  return last;
}

}  // namespace

TEST_CASE("continue: a killed worker is dropped at once, not after the heartbeat timeout, and shown dropped") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const std::string output = kill_worker_1(run, dir.path(), 3, "continue");
  const std::string scheduler_log = it::read_file(run / "logs/scheduler.log");
  INFO(scheduler_log);
  CHECK(it::contains(scheduler_log, "was killed by signal 9 (Killed) (reported by the launcher): dropped from the job"));
  CHECK_FALSE(it::contains(scheduler_log, "sent no heartbeat"));
  CHECK(it::contains(it::read_file(run / "summary.json"), "\"dropped_workers\": [1]"));
  const std::string status = last_status_line(output);
  CAPTURE(status);
  CHECK(it::contains(status, " status] done: "));  // the live workers' end, not the dropped one's step
  CHECK(it::contains(status, "| w0 done | w1 dropped | w2 done"));
}

TEST_CASE("restart: the new process is admitted at once; no 'is alive' refusals, no heartbeat noise") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const std::string output = kill_worker_1(run, dir.path(), 2, "restart");
  CHECK(it::contains(output, "worker 1 was killed by signal 9 (Killed): restarting it (1 of "));
  const std::string scheduler_log = it::read_file(run / "logs/scheduler.log");
  INFO(scheduler_log);
  CHECK(it::contains(scheduler_log, "(reported by the launcher): dropped from the job"));
  CHECK_FALSE(it::contains(scheduler_log, "is alive"));
  CHECK_FALSE(it::contains(scheduler_log, "sent no heartbeat"));
  CHECK_FALSE(it::contains(scheduler_log, "found its peer gone"));  // no heartbeat to the dead process is logged
  CHECK(it::contains(it::read_file(run / "metrics/worker-1.jsonl"), "\"type\":\"rejoin\""));
  const std::string status = last_status_line(output);
  CAPTURE(status);
  CHECK(it::contains(status, " status] done: "));
  CHECK(it::contains(status, "| w0 done | w1 done"));  // back, and finished
}
