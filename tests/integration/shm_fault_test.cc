// cluster.transport = "shm" (the default) under faults, with real processes
// through the launcher and the default CNN: its chunks (up to 1 MiB) go
// through the shared-memory slots, where the tiny model's (all under the
// 64 KiB below which bodies travel inline) do not, so the other fault tests
// do not exercise the segments. A worker killed with SIGKILL mid-run
// (continue), and a server killed and restarted from a checkpoint (restart):
// each job ends with exit 0, the servers' metrics show the bodies that went
// through shared memory (the restarted server's from the workers' new
// segments), and nothing of the job is left in /dev/shm. A server stopped
// with SIGSTOP (hung, holding its peers' slots) past the heartbeat timeout:
// the launcher fences it (tools/launcher/fencing.h) and restarts it.
#include <doctest/doctest.h>

#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"

namespace {

using namespace std::chrono_literals;
using pstrain::report::JsonValue;

std::vector<std::string> cnn_args(const it::fs::path& run, const std::vector<std::string>& sets) {
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  for (const char* s : {"workload.model=fmnist_cnn", "workload.epochs=4", "cluster.heartbeat_timeout_ms=2000",
                        "cluster.heartbeat_interval_ms=100", "cluster.timeout_ms=60000"}) {
    args.insert(args.end(), {"--set", std::string(s)});
  }
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  args.push_back("--quiet");
  return args;
}

JsonValue server_metrics(const it::fs::path& run, int rank) {
  return pstrain::report::parse_json(it::read_file(run / "metrics" / ("server-" + std::to_string(rank) + ".json")),
                                     "server metrics");
}

double number(const JsonValue& j, const char* key) {
  const JsonValue* v = j.find(key);
  REQUIRE(v != nullptr);
  return v->as_number(key);
}

// Names in /dev/shm that a pstrain process made (segments are memfds: none, ever).
int shm_names() {
  int count = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    count += e.path().filename().string().rfind("pstrain", 0) == 0;
  }
  return count;
}

int steps_of(const it::fs::path& run, int worker) {
  const auto file = run / "metrics" / ("worker-" + std::to_string(worker) + ".jsonl");
  if (!it::fs::exists(file)) return 0;
  int n = 0;
  for (std::size_t at = 0; (at = it::read_file(file).find("\"type\":\"step\"", at)) != std::string::npos; ++at) ++n;
  return n;
}

}  // namespace

TEST_CASE("shm: a worker killed (SIGKILL) mid-run with the default CNN: the others go on through their segments, exit 0") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  it::LaunchProcess p(cnn_args(run, {"cluster.workers=3", "cluster.on_worker_failure=continue"}),
                      dir.path() / "out.txt");
  const bool training = it::wait_until([&] { return steps_of(run, 1) >= 4; }, 180s, "4 steps of worker 1");
  INFO(p.output());
  REQUIRE(training);
  REQUIRE(kill(it::read_pids(run).at("worker-1"), SIGKILL) == 0);
  const auto exit = p.wait(300s);
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 0);
  CHECK(it::contains(output, "worker 1 was killed by signal 9 (Killed): the job goes on without it"));
  for (int s = 0; s < 2; ++s) {
    CAPTURE(s);
    const JsonValue m = server_metrics(run, s);
    CHECK(number(m, "shm_connections") == 3);
    CHECK(number(m, "shm_bodies_sent") > 0);
  }
  CHECK(shm_names() == 0);
}

// The default CNN under on_server_failure = "restart": `sig` to server 1
// past the first checkpoint; the job must end with exit 0, the restarted
// server's pull replies through the workers' new segments (both workers said
// hello to it again), nothing left in /dev/shm. Returns the launcher's
// output and the pid that got the signal.
static std::pair<std::string, pid_t> server_fault_then_restart(const it::TempDir& dir, int sig) {
  const auto run = dir.path() / "run";
  it::LaunchProcess p(cnn_args(run, {"cluster.on_server_failure=restart", "checkpoint.interval_steps=8"}),
                      dir.path() / "out.txt");
  const bool past_checkpoint = it::wait_until(
      [&] { return it::fs::exists(run / "checkpoints/step-00000008/manifest.json") && steps_of(run, 0) >= 10; }, 180s,
      "the checkpoint of step 8 and 10 steps of worker 0");
  INFO(p.output());
  REQUIRE(past_checkpoint);
  const pid_t victim = it::read_pids(run).at("server-1");
  REQUIRE(kill(victim, sig) == 0);
  const auto exit = p.wait(300s);
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 0);
  CHECK(it::contains(output, "server 1 was killed by signal 9 (Killed): restarting it (1 of"));
  const JsonValue m = server_metrics(run, 1);
  CHECK(number(m, "rejoined_from_step") >= 8);
  CHECK(number(m, "shm_connections") == 2);
  CHECK(number(m, "shm_bodies_sent") > 0);
  CHECK(shm_names() == 0);
  return {output, victim};
}

TEST_CASE("shm: a server killed (SIGKILL) mid-run with the default CNN is restarted; the workers come back through new segments") {
  it::TempDir dir;
  server_fault_then_restart(dir, SIGKILL);
}

TEST_CASE("shm: a server stopped (SIGSTOP) mid-run is fenced by the launcher and restarted; the job ends well") {
  // Before fencing the job waited for an exit that never came, then aborted
  // after cluster.timeout_ms (60 s here).
  it::TempDir dir;
  const auto [output, stopped] = server_fault_then_restart(dir, SIGSTOP);
  INFO(output);
  CHECK(it::contains(output, it::fenced_line("server 1", stopped)));
  CHECK(it::process_gone(stopped));
  const std::string failures = it::read_file(dir.path() / "run/failures.jsonl");
  CHECK(it::contains(failures, "\"role\":\"server\",\"rank\":1,\"pid\":" + std::to_string(stopped)));
  CHECK(it::contains(failures, "\"silent\":true"));
}
