// The launcher's process handling, with stand-in node programs (shell
// scripts): output prefixing and logs, the flags each node gets, failures
// and their reports, SIGTERM then SIGKILL, timeouts, Ctrl-C, and the summary
// at the end of a successful run.
#include <doctest/doctest.h>

#include "tests/integration/fake_nodes.h"

namespace {

const it::fs::path kTinySync = it::kSourceDir / "configs/tiny_sync.toml";

// Writes the metrics docs/run_directory.md asks of a worker.
const std::string kWorkerMetrics =
    "mkdir -p \"$rd/metrics\"\n"
    "m=\"$rd/metrics/worker-$rank.jsonl\"\n"
    "echo '{\"type\":\"step\",\"time_s\":0.1,\"step\":0,\"epoch\":0,\"batch\":32,\"loss\":2.0,\"accuracy\":0.1,"
    "\"images_per_s\":320,\"compute_ms\":50,\"pull_ms\":10,\"push_ms\":20,\"lr\":0.05,\"staleness\":0,"
    "\"simulated\":false}' > \"$m\"\n"
    "echo '{\"type\":\"eval\",\"time_s\":0.2,\"step\":1,\"epoch\":0,\"test_loss\":1.0,\"test_accuracy\":0.875}' >> \"$m\"\n"
    "echo '{\"type\":\"end\",\"time_s\":0.5,\"steps\":1,\"images\":32,\"compute_s\":0.05,\"pull_s\":0.01,"
    "\"push_s\":0.02}' >> \"$m\"\n";

const std::string kServerMetrics =
    "mkdir -p \"$rd/metrics\"\n"
    "echo \"{\\\"rank\\\": $rank, \\\"updates\\\": 1, \\\"pushes_accepted\\\": 2, \\\"pushes_rejected\\\": 0, "
    "\\\"staleness_histogram\\\": {}}\" > \"$rd/metrics/server-$rank.json\"\n";

it::Result launch_fake(const it::TempDir& dir, const std::vector<std::string>& extra = {}) {
  auto args = it::launch_args(kTinySync, dir.path() / "run", dir.path() / "bin");
  args.insert(args.end(), extra.begin(), extra.end());
  return it::run_launch(args, dir.path(), std::chrono::seconds(60));
}

void check_all_gone(const it::fs::path& run) {
  for (const auto& [name, pid] : it::read_pids(run)) {
    CAPTURE(name);
    CHECK(it::process_gone(pid));
  }
}

}  // namespace

TEST_CASE("a successful run: prefixed whole lines, logs, node flags, pids and the summary") {
  it::TempDir dir;
  it::write_fake_bin(dir.path() / "bin", it::scheduler_body("sleep 0.5"),
                     "echo \"server $rank up\"\n" + kServerMetrics +
                         "if [ $rank = 0 ]; then echo '[   0.041 server] before its rank' >&2; fi\n",
                     "echo \"args: $args\"\nprintf 'partial'\nsleep 0.3\nprintf ' line\\n'\necho oops >&2\n"
                     "echo \"[   0.042 worker $rank] own prefix\" >&2\n" +
                         kWorkerMetrics + "printf 'no newline at the end'");
  const auto r = launch_fake(dir);
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  const auto run = dir.path() / "run";
  const std::string config = (run / "config.toml").string();
  CHECK(it::has_line(r.output, "worker 1",
                     "args: --config " + config + " --scheduler " + it::kFakeEndpoint + " --rank 1"));
  CHECK(it::has_line(r.output, "server 1", "server 1 up"));
  CHECK(it::has_line(r.output, "worker 0", "partial line"));
  CHECK(it::has_line(r.output, "worker 1", "no newline at the end"));
  CHECK(it::has_line(r.output, "worker 1", "oops"));  // stderr too
  // A line with the node's own logger prefix is echoed as it is: one prefix.
  CHECK(it::contains(r.output, "\n[   0.042 worker 1] own prefix\n"));
  CHECK(it::contains(r.output, "\n[   0.041 server] before its rank\n"));
  CHECK_FALSE(it::contains(r.output, "] [   0.04"));
  CHECK(it::read_file(run / "logs/worker-1.log").find("\n[   0.042 worker 1] own prefix\n") != std::string::npos);
  CHECK(it::contains(r.output, " launch] scheduler is at " + it::kFakeEndpoint));
  CHECK(it::read_file(run / "logs/worker-1.log").find("partial line\n") != std::string::npos);
  CHECK(it::read_file(run / "logs/worker-1.log").find("oops\n") != std::string::npos);
  CHECK(it::read_file(run / "logs/server-0.log") == "server 0 up\n[   0.041 server] before its rank\n");
  CHECK(it::read_pids(run).size() == 5);
  CHECK(it::read_file(run / "summary.json").find("\"final_test_accuracy\": 0.875") != std::string::npos);
  CHECK(it::contains(r.output, "| sync | 2 | 2 | small_cnn | synthetic | 87.50 | 0.50 | 128.0 |"));
  CHECK(it::contains(r.output, "Run directory: " + run.string()));
  check_all_gone(run);
}

TEST_CASE("a run directory used before gets a fresh start; the old run's files are kept aside") {
  it::TempDir dir;
  it::write_fake_bin(dir.path() / "bin", it::scheduler_body("exit 0"), kServerMetrics, kWorkerMetrics);
  it::write_file(dir.path() / "run/metrics/worker-7.jsonl", "old");
  const auto r = launch_fake(dir);
  INFO(r.output);
  CHECK(r.exit.code == 0);
  CHECK(it::contains(r.output, " launch] kept the previous run's 1 file(s) and folder(s) in " +
                                   (dir.path() / "run.prev-").string()));
  CHECK_FALSE(it::fs::exists(dir.path() / "run/metrics/worker-7.jsonl"));
  int kept = 0;
  for (const auto& e : it::fs::directory_iterator(dir.path())) {
    if (e.path().filename().string().rfind("run.prev-", 0) == 0) {
      ++kept;
      CHECK(it::read_file(e.path() / "metrics/worker-7.jsonl") == "old");
    }
  }
  CHECK(kept == 1);
}

TEST_CASE("a scheduler that fails before listening is reported with its stderr; nothing else starts") {
  it::TempDir dir;
  it::write_fake_bin(dir.path() / "bin", "echo 'starting' >&2\necho 'pstrain-scheduler: error: bind failed' >&2\nexit 1",
                     "exit 0", "exit 0");
  const auto r = launch_fake(dir);
  INFO(r.output);
  CHECK(r.exit.code == 1);
  CHECK(it::contains(r.output, " launch] scheduler exited with code 1\n"));
  CHECK(it::contains(r.output, " launch]   pstrain-scheduler: error: bind failed\n"));
  CHECK(it::read_pids(dir.path() / "run").size() == 1);
  CHECK_FALSE(it::fs::exists(dir.path() / "run/logs/worker-0.log"));
}

TEST_CASE("a scheduler that exits 0 without an endpoint, or never writes one, fails the launch") {
  it::TempDir dir;
  it::write_fake_bin(dir.path() / "bin", "exit 0", "exit 0", "exit 0");
  const auto r = launch_fake(dir);
  INFO(r.output);
  CHECK(r.exit.code == 1);
  CHECK(it::contains(r.output, " launch] the scheduler exited before writing its endpoint"));

  it::write_fake_bin(dir.path() / "bin", "exec sleep 60", "exit 0", "exit 0");
  const auto start = std::chrono::steady_clock::now();
  const auto r2 = launch_fake(dir, {"--startup-timeout-s", "0.5"});
  INFO(r2.output);
  CHECK(r2.exit.code == 1);
  CHECK(it::contains(r2.output, " launch] the scheduler did not write its endpoint to"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  check_all_gone(dir.path() / "run");
}

TEST_CASE("a failing worker stops the run; a process ignoring SIGTERM gets SIGKILL") {
  it::TempDir dir;
  it::write_fake_bin(dir.path() / "bin", it::scheduler_body("exec sleep 60"),
                     "trap '' TERM\nwhile :; do sleep 0.1; done",
                     "if [ \"$rank\" = 1 ]; then sleep 0.5; echo 'pstrain-worker: error: loss is NaN at step 3' >&2; "
                     "exit 1; fi\nexec sleep 60");
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch_fake(dir, {"--grace-s", "0.5"});
  INFO(r.output);
  CHECK(r.exit.code == 1);
  CHECK(it::contains(r.output, " launch] worker 1 exited with code 1\n"));
  CHECK(it::contains(r.output, " launch]   pstrain-worker: error: loss is NaN at step 3\n"));
  CHECK(it::contains(r.output, " launch] stopped the other processes; run failed"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  check_all_gone(dir.path() / "run");
}

TEST_CASE("the first real failure is blamed, not the peers that aborted because of it") {
  it::TempDir dir;
  it::write_fake_bin(dir.path() / "bin", it::scheduler_body("exec sleep 60"),
                     "sleep 0.3\necho 'pstrain-server: job aborted: worker 0 failed' >&2\nexit 2",
                     "if [ \"$rank\" = 0 ]; then sleep 0.8; echo 'pstrain-worker: error: out of memory' >&2; exit 1; fi\n"
                     "exec sleep 60");
  const auto r = launch_fake(dir);
  INFO(r.output);
  CHECK(r.exit.code == 1);
  CHECK(it::contains(r.output, " launch] worker 0 exited with code 1\n"));
  CHECK(it::contains(r.output, " launch]   pstrain-worker: error: out of memory\n"));
  CHECK(it::contains(r.output, " launch] then server 0 exited with code 2 (aborted: a peer failed)\n"));
}

TEST_CASE("a run past --timeout-s is stopped") {
  it::TempDir dir;
  it::write_fake_bin(dir.path() / "bin", it::scheduler_body("exec sleep 60"), "exec sleep 60", "exec sleep 60");
  auto args = it::launch_args(kTinySync, dir.path() / "run", dir.path() / "bin");
  args.back() = "1";  // --timeout-s 1
  const auto r = it::run_launch(args, dir.path(), std::chrono::seconds(30));
  INFO(r.output);
  CHECK(r.exit.code == 1);
  CHECK(it::contains(r.output, " launch] the run did not finish within --timeout-s 1 s; "));
  CHECK(it::contains(r.output, "still running: scheduler, server 0, server 1, worker 0, worker 1"));
  check_all_gone(dir.path() / "run");
}

TEST_CASE("a node still running after the scheduler ended the job is stopped after --shutdown-timeout-s") {
  it::TempDir dir;
  it::write_fake_bin(dir.path() / "bin", it::scheduler_body("exit 0"), kServerMetrics,
                     "if [ \"$rank\" = 1 ]; then exec sleep 60; fi\n" + kWorkerMetrics);
  const auto r = launch_fake(dir, {"--shutdown-timeout-s", "1.5"});
  INFO(r.output);
  CHECK(r.exit.code == 1);
  CHECK(it::contains(r.output, " launch] the scheduler ended the job, but these did not exit within "
                               "--shutdown-timeout-s 1.5 s: worker 1\n"));
  // No summary of a finished run: at most a partial one (of what ran until the failure).
  CHECK((!it::fs::exists(dir.path() / "run/summary.json") ||
         it::contains(it::read_file(dir.path() / "run/summary.json"), "\"partial\": true")));
  check_all_gone(dir.path() / "run");
}

TEST_CASE("SIGINT or SIGTERM to the launcher stops every process") {
  for (const int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    it::TempDir dir;
    it::write_fake_bin(dir.path() / "bin", it::scheduler_body("exec sleep 60"), "exec sleep 60", "exec sleep 60");
    it::LaunchProcess p(it::launch_args(kTinySync, dir.path() / "run", dir.path() / "bin"), dir.path() / "out.txt");
    REQUIRE(it::wait_until([&] { return it::read_pids(dir.path() / "run").size() == 5; }, std::chrono::seconds(20),
                           "pids.txt with all 5 nodes"));
    kill(p.pid(), sig);
    const auto exit = p.wait(std::chrono::seconds(20));
    INFO(p.output());
    REQUIRE(exit.has_value());
    CHECK(exit->code == 128 + sig);
    CHECK(it::contains(p.output(), " launch] got signal " + std::to_string(sig)));
    check_all_gone(dir.path() / "run");
  }
}
