// A job started by hand the torchrun way: every process gets only RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT (no --rank, no --scheduler), and
// tools/pstrain-node.sh picks its program from RANK. Such a run directory
// gets what `launch` writes: config.toml, logs/, metrics/ and the summary.
#include <doctest/doctest.h>

#include "common/config/config.h"
#include "tests/integration/launch_test_util.h"
#include "tools/report/metrics.h"


TEST_CASE("a job started by hand with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT runs to its end") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const std::string port = std::to_string(it::free_port());
  const std::string node_sh = (it::kSourceDir / "tools/pstrain-node.sh").string();
  const std::string config = (it::kSourceDir / "configs/tiny_sync.toml").string();  // 2 servers, 2 workers
  const std::string secret = it::secret_override(dir.path());  // the job's, as a SLURM script would write it
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 5; ++rank) {
    const std::map<std::string, std::string> env{{"RANK", std::to_string(rank)},
                                                 {"WORLD_SIZE", "5"},
                                                 {"MASTER_ADDR", "127.0.0.1"},
                                                 {"MASTER_PORT", port},
                                                 {"PSTRAIN_BIN_DIR", it::kBinDir.string()}};
    pids.push_back(it::spawn({node_sh, config, "--set", "output.run_dir=" + run.string(), "--set", "workload.epochs=1", "--set", secret},
                         env, dir.path() / ("rank-" + std::to_string(rank) + ".txt")));
  }
  std::vector<std::optional<int>> codes(pids.size());
  const bool all_done = it::wait_until(
      [&] {
        bool done = true;
        for (std::size_t i = 0; i < pids.size(); ++i) {
          int status = 0;
          if (!codes[i] && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
            codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          }
          done = done && codes[i].has_value();
        }
        return done;
      },
      std::chrono::seconds(120), "every node started by hand to exit");
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (codes[i]) continue;
    kill(pids[i], SIGKILL);
    waitpid(pids[i], nullptr, 0);
  }
  for (int rank = 0; rank < 5; ++rank) {
    const std::string output = it::read_file(dir.path() / ("rank-" + std::to_string(rank) + ".txt"));
    CAPTURE(rank);
    INFO(output);
    CHECK(codes[static_cast<std::size_t>(rank)] == std::optional<int>(0));
  }
  REQUIRE(all_done);
  // Each got the role its RANK says: 0 the scheduler, 1..2 servers 0..1, 3..4 workers 0..1.
  CHECK(it::contains(it::read_file(dir.path() / "rank-0.txt"), " scheduler] "));
  CHECK(it::contains(it::read_file(dir.path() / "rank-2.txt"), " server 1] "));
  CHECK(it::contains(it::read_file(dir.path() / "rank-4.txt"), " worker 1] "));
  for (int w = 0; w < 2; ++w) {
    const auto m = pstrain::report::read_worker_metrics(pstrain::report::worker_metrics_path(run, w), w);
    REQUIRE(m.plan.has_value());
    CHECK(m.end.has_value());
    CHECK(static_cast<std::int64_t>(m.steps.size()) == m.plan->total_steps);
  }
  // The scheduler wrote the resolved config (with the overrides), the script
  // each process's log under launch's names, rank 0 the summary.
  REQUIRE(it::fs::exists(run / "config.toml"));
  const pstrain::RunConfig resolved = pstrain::load_config((run / "config.toml").string());
  CHECK(resolved.output.run_dir == run.string());
  CHECK(resolved.workload.epochs == 1);
  for (const char* log : {"scheduler", "server-0", "server-1", "worker-0", "worker-1"}) {
    CAPTURE(log);
    CHECK(it::count_lines(run / "logs" / (std::string(log) + ".log")) > 0);
  }
  CHECK(it::contains(it::read_file(run / "logs/worker-1.log"), " worker 1] "));
  CHECK(it::fs::exists(run / "summary.json"));
  CHECK(it::fs::exists(run / "summary.md"));
  CHECK(it::contains(it::read_file(dir.path() / "rank-0.txt"), "Run directory: " + run.string()));

  // pstrain-summary rebuilds a lost summary from the same files.
  it::fs::remove(run / "summary.json");
  const pid_t again = it::spawn({(it::kBinDir / "pstrain-summary").string(), run.string(), "--quiet"}, {},
                                dir.path() / "summary.txt");
  CHECK(it::wait_exit(again, std::chrono::seconds(30)) == std::optional<int>(0));
  CHECK(it::contains(it::read_file(run / "summary.json"), "\"mode\": \"sync\""));
}

TEST_CASE("pstrain-summary refuses what is not a run directory, saying why") {
  it::TempDir dir;
  const auto summary = (it::kBinDir / "pstrain-summary").string();
  const pid_t missing = it::spawn({summary, (dir.path() / "nope").string()}, {}, dir.path() / "missing.txt");
  CHECK(it::wait_exit(missing, std::chrono::seconds(30)) == std::optional<int>(3));
  CHECK(it::contains(it::read_file(dir.path() / "missing.txt"), "nope: no such directory"));
  it::fs::create_directories(dir.path() / "empty");
  const pid_t empty = it::spawn({summary, (dir.path() / "empty").string()}, {}, dir.path() / "empty.txt");
  CHECK(it::wait_exit(empty, std::chrono::seconds(30)) == std::optional<int>(3));
  CHECK(it::contains(it::read_file(dir.path() / "empty.txt"), "has no config.toml: not a run directory"));
}

TEST_CASE("a WORLD_SIZE that does not match the config stops the process with a config error") {
  it::TempDir dir;
  const std::string config = (it::kSourceDir / "configs/tiny_sync.toml").string();
  const pid_t pid = it::spawn({(it::kBinDir / "pstrain-worker").string(), "--config", config},
                          {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}},
                          dir.path() / "out.txt");
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  CHECK(it::contains(it::read_file(dir.path() / "out.txt"),
                     "pstrain-worker: config error: environment variable WORLD_SIZE=4, but the config's job has 5 "
                     "processes"));
}
