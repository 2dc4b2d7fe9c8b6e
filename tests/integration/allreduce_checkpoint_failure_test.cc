// Checkpoints of an allreduce job that loses a worker (cluster.on_worker_failure
// = "continue"), with real processes: a checkpoint every step (or every two),
// so the kill lands in a step right before a checkpoint or inside one. The
// survivors must neither stall (one in the checkpoint, one re-forming the
// collective: the checkpoint is an operation of the collective, a phase of
// its own in the resync, replica_resync.h) nor lose a checkpoint: every
// checkpoint of the run is complete (manifest), the leader's part holds the
// model (worker 1's once worker 0 is dropped), and `launch --resume` goes on
// from the newest one.
//
// The kill comes after a seeded number of the victim's steps in epoch 0 (the
// seed is printed; PSTRAIN_FAULT_SEED=<seed> repeats a run).
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <set>

#include "common/checkpoint/checkpoint.h"
#include "tests/integration/launch_test_util.h"

namespace {

using namespace std::chrono_literals;

std::uint64_t fault_seed() {
  static const std::uint64_t seed = [] {
    const char* env = std::getenv("PSTRAIN_FAULT_SEED");
    const std::uint64_t s = env != nullptr && *env != '\0' ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    MESSAGE("fault seed " << s << " (PSTRAIN_FAULT_SEED=" << s << " repeats these kills)");
    return s;
  }();
  return seed;
}

// The "step" numbers of a worker's metrics file, in order.
std::vector<long> step_records(const it::fs::path& file) {
  std::vector<long> steps;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"type\":\"step\"") == std::string::npos) continue;
    const auto at = line.find("\"step\":");
    REQUIRE(at != std::string::npos);
    steps.push_back(std::stol(line.substr(at + 7)));
  }
  return steps;
}

// 3 workers (11 steps in epoch 0), then the two left (16 steps an epoch): 3 epochs are 43 steps.
constexpr long kSteps = 11 + 16 + 16;

void kill_before_checkpoint(int victim, int interval) {
  std::mt19937_64 rng(fault_seed() * 31 + static_cast<std::uint64_t>(victim * 7 + interval));
  const int kill_after = 1 + static_cast<int>(rng() % 6);  // the victim's step records before the kill
  MESSAGE("allreduce continue, a checkpoint every " << interval << " step(s): kill -9 worker " << victim << " after "
                                                    << kill_after << " steps (seed " << fault_seed() << ")");
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_allreduce.toml", run);
  args.insert(args.end(), {"--set", "cluster.workers=3", "--set", "cluster.on_worker_failure=continue", "--set",
                           "cluster.heartbeat_timeout_ms=1500", "--set", "cluster.timeout_ms=30000", "--set",
                           "workload.epochs=3", "--set", "checkpoint.interval_steps=" + std::to_string(interval),
                           "--set", "checkpoint.keep=1000", "--set", "output.trace=off", "--quiet"});
  it::LaunchProcess p(args, dir.path() / "out.txt");
  const auto metrics = run / ("metrics/worker-" + std::to_string(victim) + ".jsonl");
  const bool training =
      it::wait_until([&] { return step_records(metrics).size() >= static_cast<std::size_t>(kill_after); }, 180s,
                     "the victim's step records before the kill");
  INFO(p.output());
  REQUIRE(training);
  const auto pids = it::read_pids(run);
  const std::string name = "worker-" + std::to_string(victim);
  REQUIRE(pids.count(name) == 1);
  REQUIRE(kill(pids.at(name), SIGKILL) == 0);

  const auto exit = p.wait(240s);
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK_FALSE(exit->signaled);
  REQUIRE(exit->code == 0);
  CHECK(it::contains(output, "worker " + std::to_string(victim) + " was killed by signal 9 (Killed): the job goes on without it"));
  const int leader = victim == 0 ? 1 : 0;
  const int other = victim == 2 ? 1 : 2;
  for (const int w : {leader, other}) {
    CAPTURE(w);
    const std::vector<long> steps = step_records(run / ("metrics/worker-" + std::to_string(w) + ".jsonl"));
    REQUIRE_FALSE(steps.empty());
    CHECK(steps.back() == kSteps - 1);
  }

  // Every checkpoint of the run was taken and is complete; those after the kill lack the victim's part.
  std::set<std::int64_t> complete;
  bool dropped_seen = false;
  for (const auto& entry : it::fs::directory_iterator(run / "checkpoints")) {
    if (!entry.path().filename().string().starts_with("step-")) continue;
    CAPTURE(entry.path());
    CHECK(pstrain::checkpoint_problem(entry.path()).empty());
    const auto m = pstrain::read_checkpoint_manifest(entry.path());
    complete.insert(m.step);
    if (!it::fs::exists(entry.path() / ("worker-" + std::to_string(victim) + ".ckpt"))) {
      dropped_seen = true;
      // The model is in the leader's part: far larger than the other survivor's.
      CHECK(it::fs::file_size(entry.path() / ("worker-" + std::to_string(leader) + ".ckpt")) >
            10 * it::fs::file_size(entry.path() / ("worker-" + std::to_string(other) + ".ckpt")));
    }
  }
  CHECK(dropped_seen);
  CHECK(complete.size() == static_cast<std::size_t>(kSteps / interval));
  REQUIRE_FALSE(complete.empty());
  CHECK(*complete.rbegin() == kSteps - kSteps % interval);
  // The leader wrote the manifests of the checkpoints without the victim.
  CHECK(it::contains(it::read_file(run / ("logs/worker-" + std::to_string(leader) + ".log")),
                     "no part of dropped worker(s) " + std::to_string(victim)));

  // Resumed from the newest checkpoint with one more epoch (11 steps, the three workers again).
  const std::int64_t from = *complete.rbegin();
  std::vector<std::string> resume{"--resume", run.string(), "--bin-dir", it::kBinDir.string(), "--timeout-s", "300",
                                  "--quiet", "--set", "workload.epochs=4"};
  const it::Result b = it::run_launch(resume, dir.path());
  INFO(b.output);
  CHECK(b.exit.code == 0);
  CHECK(it::contains(b.output, "(step " + std::to_string(from) + ")"));
  for (const int w : {0, 1, 2}) {
    CAPTURE(w);
    CHECK(it::contains(it::read_file(run / ("logs/worker-" + std::to_string(w) + ".log")),
                       "resuming from " + (run / "checkpoints").string()));
    const std::vector<long> steps = step_records(run / ("metrics/worker-" + std::to_string(w) + ".jsonl"));
    REQUIRE_FALSE(steps.empty());
    CHECK(steps.back() == kSteps + 11 - 1);
  }
}

}  // namespace

TEST_CASE("allreduce continue: a worker killed right before a checkpoint step; every checkpoint complete, resumable") {
  kill_before_checkpoint(1, 1);
}

TEST_CASE("allreduce continue: a worker killed with a checkpoint every 2 steps; every checkpoint complete, resumable") {
  kill_before_checkpoint(2, 2);
}

TEST_CASE("allreduce continue: worker 0 killed; worker 1 leads and writes the checkpoints; resume takes its model") {
  kill_before_checkpoint(0, 1);
}
