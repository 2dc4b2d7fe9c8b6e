// Checkpoints and resume with real processes through `launch`: a sync run
// killed with SIGKILL (launcher and every node) and resumed ends with the
// weights of the run never interrupted, also when its newest checkpoint is
// corrupt (the previous one is used, and the launcher says why); a resume
// with another mode, model or worker count is refused (exit 3); an async
// resume runs to its end.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "common/checkpoint/checkpoint.h"
#include "tests/integration/launch_test_util.h"
#include "worker/train/checkpoint.h"

namespace {

using namespace std::chrono_literals;

// tiny_sync with plain determinism (one thread per worker, fixed seed),
// momentum kept (its state is in the checkpoint), a checkpoint every 4 steps.
std::vector<std::string> ckpt_args(const it::fs::path& run, const std::vector<std::string>& sets) {
  auto args = it::launch_args(it::kSourceDir / "configs" / "tiny_sync.toml", run);
  for (const char* s : {"workload.seed=3", "workload.epochs=3", "checkpoint.interval_steps=4"}) {
    args.insert(args.end(), {"--set", std::string(s)});
  }
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  args.push_back("--quiet");
  return args;
}

std::vector<std::string> resume_args(const it::fs::path& run, const std::vector<std::string>& sets = {}) {
  std::vector<std::string> args{"--resume", run.string(), "--bin-dir", it::kBinDir.string(), "--timeout-s", "300",
                                "--quiet"};
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  return args;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0.0, scale = 1e-12;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
  }
  return diff / scale;
}

// The "step" numbers of a worker's metrics file, in order.
std::vector<long> step_records(const it::fs::path& file) {
  std::vector<long> steps;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"type\":\"step\"") == std::string::npos) continue;
    const auto at = line.find("\"step\":");
    REQUIRE(at != std::string::npos);
    steps.push_back(std::stol(line.substr(at + 7)));
  }
  return steps;
}

void flip_byte(const it::fs::path& file, std::size_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x10));
}

}  // namespace

TEST_CASE("sync: killed with kill -9 and resumed == never interrupted (newest checkpoint corrupt: the previous one)") {
  it::TempDir dir;
  const auto whole = dir.path() / "whole";
  const it::Result a = it::run_launch(ckpt_args(whole, {}), dir.path());
  INFO(a.output);
  REQUIRE(a.exit.code == 0);
  // keep = 2: two complete checkpoints left (steps 44 and 48 of 48).
  CHECK(it::fs::exists(whole / "checkpoints/step-00000048/manifest.json"));
  CHECK(it::fs::exists(whole / "checkpoints/step-00000044/manifest.json"));
  CHECK_FALSE(it::fs::exists(whole / "checkpoints/step-00000040"));

  // The same run, killed (launcher and every node, SIGKILL) once a checkpoint of step 12 or later
  // is complete. Worker 0 is made a straggler (it sleeps; the sync math is the same) so that the
  // run is still going when the test looks: unslowed, all 48 steps take a third of a second on an
  // idle machine, and with keep = 2 step 12's checkpoint is gone again by step 20.
  const auto run = dir.path() / "killed";
  {
    it::LaunchProcess p(ckpt_args(run, {"workload.straggler_rank=0", "workload.straggler_slowdown=20"}),
                        dir.path() / "killed-output.txt");
    const bool reached = it::wait_until(
        [&] {
          const auto newest = pstrain::find_newest_checkpoint(run / "checkpoints");
          return newest.has_value() && newest->manifest.step >= 12;
        },
        180s, "a checkpoint of step 12 or later");
    INFO(p.output());
    REQUIRE(reached);
    for (const auto& [name, pid] : it::read_pids(run)) kill(pid, SIGKILL);
    kill(p.pid(), SIGKILL);
    const auto exit = p.wait(10s);
    REQUIRE(exit.has_value());
    CHECK(exit->signaled);
  }
  REQUIRE_FALSE(it::fs::exists(run / "weights.bin"));  // it was killed before its end
  const auto newest = pstrain::find_newest_checkpoint(run / "checkpoints");
  REQUIRE(newest.has_value());
  const std::int64_t newest_step = newest->manifest.step;
  REQUIRE(newest_step >= 12);
  flip_byte(newest->dir / "server-0.ckpt", 100);

  const it::Result b = it::run_launch(resume_args(run), dir.path());
  INFO(b.output);
  REQUIRE(b.exit.code == 0);
  const std::string skipped_name = pstrain::checkpoint_dir_name(newest_step);
  CHECK(it::contains(b.output, "passed over checkpoint " + skipped_name + ": part server-0.ckpt fails its CRC-32 check"));
  CHECK(it::contains(b.output, "resuming from " + (run / "checkpoints" / pstrain::checkpoint_dir_name(newest_step - 4)).string() +
                                   " (step " + std::to_string(newest_step - 4) + ")"));
  CHECK_FALSE(it::contains(b.output, ".prev-"));  // the run was not moved away
  CHECK(it::contains(b.output, "removed " + (run / "checkpoints" / skipped_name).string() +
                                   " (newer than the checkpoint resumed from)"));

  const auto expected = pstrain::read_weights(pstrain::weights_path(whole.string()));
  const auto resumed = pstrain::read_weights(pstrain::weights_path(run.string()));
  const double diff = relative_difference(expected, resumed);
  it::note("max relative difference, resumed vs never interrupted: " + std::to_string(diff));
  CHECK(diff < 1e-5);

  // Metrics: every step once, in order, across the kill; a summary of the whole run.
  for (const char* file : {"metrics/worker-0.jsonl", "metrics/worker-1.jsonl"}) {
    CAPTURE(file);
    const std::vector<long> steps = step_records(run / file);
    REQUIRE(steps.size() == 48);
    for (std::size_t i = 0; i < steps.size(); ++i) CHECK(steps[i] == static_cast<long>(i));
  }
  // Both workers' images over the whole run: 48 steps x 32 (counters restored from the checkpoint).
  const std::string summary = it::read_file(run / "summary.json");
  CHECK(it::contains(summary, "\"rank\": 0, \"time_s\""));
  CHECK(it::contains(summary, "\"images\": 1536"));
}

TEST_CASE("resume with another mode, model or worker count is refused with exit 3") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const it::Result a = it::run_launch(ckpt_args(run, {"workload.max_steps=9"}), dir.path());
  INFO(a.output);
  REQUIRE(a.exit.code == 0);
  REQUIRE(it::fs::exists(run / "checkpoints/step-00000008/manifest.json"));
  const std::string weights_before = it::read_file(run / "weights.bin");

  const it::Result mode = it::run_launch(resume_args(run, {"mode=async"}), dir.path());
  CHECK(mode.exit.code == 3);
  CHECK(it::contains(mode.output, "mode: the checkpoint has \"sync\", the config \"async\""));
  const it::Result model = it::run_launch(resume_args(run, {"workload.model=fmnist_cnn"}), dir.path());
  CHECK(model.exit.code == 3);
  CHECK(it::contains(model.output, "workload.model: the checkpoint has \"small_cnn\", the config \"fmnist_cnn\""));
  const it::Result workers = it::run_launch(resume_args(run, {"cluster.workers=4"}), dir.path());
  CHECK(workers.exit.code == 3);
  CHECK(it::contains(workers.output, "cluster.workers: the checkpoint has \"2\", the config \"4\""));
  // Refused before anything started: the run is as it was.
  CHECK(it::read_file(run / "weights.bin") == weights_before);

  // No checkpoint at all: refused too, saying so.
  const it::Result none = it::run_launch(resume_args(dir.path() / "nothing"), dir.path());
  CHECK(none.exit.code == 3);
}

TEST_CASE("async: a resumed run goes on to its end and exits 0") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const it::Result a = it::run_launch(ckpt_args(run, {"mode=async", "workload.max_steps=10"}), dir.path());
  INFO(a.output);
  REQUIRE(a.exit.code == 0);
  REQUIRE(it::fs::exists(run / "checkpoints/step-00000008/manifest.json"));
  const it::Result b = it::run_launch(resume_args(run, {"workload.max_steps=20"}), dir.path());
  INFO(b.output);
  CHECK(b.exit.code == 0);
  CHECK(it::contains(b.output, "(step 8)"));
  CHECK(it::fs::exists(run / "weights.bin"));
  const std::vector<long> steps = step_records(run / "metrics/worker-0.jsonl");
  REQUIRE(steps.size() == 20);
  CHECK(steps.back() == 19);
}

TEST_CASE("allreduce: stopped after 10 steps and resumed to 16 == 16 steps at once (worker 0's model and optimizer)") {
  it::TempDir dir;
  const auto config = it::kSourceDir / "configs" / "tiny_allreduce.toml";
  const auto run_with = [&](const it::fs::path& run, const char* max_steps) {
    auto args = it::launch_args(config, run);
    const std::vector<std::string> sets{"workload.seed=3", "checkpoint.interval_steps=4",
                                        std::string("workload.max_steps=") + max_steps};
    for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
    args.push_back("--quiet");
    return it::run_launch(args, dir.path());
  };
  const auto whole = dir.path() / "whole";
  const it::Result a = run_with(whole, "16");
  INFO(a.output);
  REQUIRE(a.exit.code == 0);
  const auto run = dir.path() / "stopped";
  const it::Result b = run_with(run, "10");
  INFO(b.output);
  REQUIRE(b.exit.code == 0);
  REQUIRE(it::fs::exists(run / "checkpoints/step-00000008/worker-0.ckpt"));
  CHECK(it::fs::file_size(run / "checkpoints/step-00000008/worker-0.ckpt") >
        10 * it::fs::file_size(run / "checkpoints/step-00000008/worker-1.ckpt"));  // the model is in worker 0's
  const it::Result c = it::run_launch(resume_args(run, {"workload.max_steps=16"}), dir.path());
  INFO(c.output);
  REQUIRE(c.exit.code == 0);
  CHECK(it::contains(c.output, "(step 8)"));
  const double diff = relative_difference(pstrain::read_weights(pstrain::weights_path(whole.string())),
                                          pstrain::read_weights(pstrain::weights_path(run.string())));
  it::note("max relative difference, resumed vs at once: " + std::to_string(diff));
  CHECK(diff < 1e-5);
  const std::vector<long> steps = step_records(run / "metrics/worker-1.jsonl");
  REQUIRE(steps.size() == 16);
  CHECK(steps.back() == 15);
}

// 3 workers: 1024 / 3 samples each, 11 steps an epoch; a checkpoint every 4. `victim` is killed in
// epoch 0 (after checkpoint 4); epochs 1 and 2 belong to the two left (512 samples each, 16 steps):
// 43 steps. Every checkpoint after the kill completes without the victim's part, written by the
// lowest live worker (`writer`; before, worker 0 always: with worker 0 the victim, none completed).
void continue_after_kill(const it::fs::path& run, const it::fs::path& out, int victim, int writer) {
  // The kill must land in epoch 0 (steps 4..10): worker 2 straggles 30x (steps of about 0.1 s), so
  // the test has about 0.6 s after checkpoint 4 to kill; at 3x (0.03 s steps) a loaded machine let
  // the job reach epoch 1 first twice (the survivors then split only epoch 2: 38 steps, not 43).
  it::LaunchProcess p(ckpt_args(run, {"cluster.workers=3", "cluster.on_worker_failure=continue",
                                      "cluster.heartbeat_timeout_ms=3000", "workload.straggler_rank=2",
                                      "workload.straggler_slowdown=30"}),
                      out);
  const bool reached = it::wait_until([&] { return it::fs::exists(run / "checkpoints/step-00000004/manifest.json"); },
                                      180s, "the checkpoint of step 4");
  INFO(p.output());
  REQUIRE(reached);
  REQUIRE(kill(it::read_pids(run).at("worker-" + std::to_string(victim)), SIGKILL) == 0);
  const auto exit = p.wait(240s);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 0);
  const auto last = pstrain::find_newest_checkpoint(run / "checkpoints");
  REQUIRE(last.has_value());
  CHECK(last->manifest.step == 40);
  CHECK_FALSE(it::fs::exists(last->dir / ("worker-" + std::to_string(victim) + ".ckpt")));
  CHECK(it::contains(it::read_file(run / ("logs/worker-" + std::to_string(writer) + ".log")),
                     "no part of dropped worker(s) " + std::to_string(victim)));
}

TEST_CASE("continue: checkpoints go on without a dropped worker; resumed, it rejoins at the checkpoint's step") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  continue_after_kill(run, dir.path() / "out.txt", 1, 0);

  const it::Result b = it::run_launch(resume_args(run, {"workload.epochs=4"}), dir.path());
  INFO(b.output);
  CHECK(b.exit.code == 0);
  CHECK(it::contains(b.output, "(step 40)"));
  // Epoch 2 (steps 27..42) stays the two survivors' (the checkpoint's epoch members); worker 1, back,
  // walks one of their shards to its end; epoch 3 is split three ways again: 11 steps, 43..53.
  CHECK(it::contains(it::read_file(run / "logs/worker-1.log"), "epoch 2 was begun by workers 0,2 before this worker was back"));
  for (const int w : {0, 1, 2}) {
    CAPTURE(w);
    const std::vector<long> steps = step_records(run / ("metrics/worker-" + std::to_string(w) + ".jsonl"));
    REQUIRE_FALSE(steps.empty());
    CHECK(steps.back() == 53);
  }
}

TEST_CASE("continue: worker 0 killed; the lowest live worker completes the checkpoints from then on; resumable") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  continue_after_kill(run, dir.path() / "out.txt", 0, 1);
  const it::Result b = it::run_launch(resume_args(run, {"workload.epochs=4"}), dir.path());
  INFO(b.output);
  CHECK(b.exit.code == 0);
  CHECK(it::contains(b.output, "(step 40)"));
}
