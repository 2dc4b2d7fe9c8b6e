// Real allreduce runs: `launch` starts pstrain-scheduler and two
// pstrain-worker processes (no servers) that average their gradients with
// Gloo over TCP loopback; the run directory is the same as the other modes'.
#include <doctest/doctest.h>

#include "common/observe/gpu_presence.h"

#include "common/config/config.h"
#include "tests/integration/launch_test_util.h"
#include "tests/support/skip.h"
#include "tools/report/json_value.h"
#include "tools/report/metrics.h"

namespace {

using pstrain::report::JsonValue;

double mean_loss(const std::vector<pstrain::report::StepRecord>& steps, std::size_t begin, std::size_t end) {
  double sum = 0;
  for (std::size_t i = begin; i < end; ++i) sum += steps[i].loss;
  return sum / static_cast<double>(end - begin);
}

}  // namespace

TEST_CASE("the tiny allreduce config runs to a summary through the launcher, without servers") {
  it::TempDir dir;
  const auto run = dir.path() / "allreduce";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_allreduce.toml", run);
  args.insert(args.end(), {"--set", "workload.seed=7"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE_FALSE(r.exit.signaled);
  REQUIRE(r.exit.code == 0);

  CHECK(pstrain::to_string(pstrain::load_config((run / "config.toml").string()).mode) == "allreduce");
  for (const char* log : {"scheduler", "worker-0", "worker-1"}) {
    CAPTURE(log);
    CHECK(it::count_lines(run / "logs" / (std::string(log) + ".log")) > 0);
  }
  CHECK_FALSE(it::fs::exists(run / "logs/server-0.log"));
  CHECK(it::read_pids(run).size() == 3);
  CHECK(it::contains(r.output, "over gloo (tcp, 127.0.0.1)"));
  CHECK(it::contains(r.output, "bucket(s) of at least 16384 bytes"));

  for (int w = 0; w < 2; ++w) {
    CAPTURE(w);
    const auto m = pstrain::report::read_worker_metrics(pstrain::report::worker_metrics_path(run, w), w);
    REQUIRE(m.steps.size() == 32);
    REQUIRE(m.end.has_value());
    REQUIRE(m.compute.has_value());  // allreduce workers say what they computed on too
    CHECK(m.compute->conv_path == "onednn");
    CHECK(m.end->steps == 32);
    CHECK(m.end->images == 1024);
    const std::size_t k = m.steps.size() / 4;
    CHECK(mean_loss(m.steps, 0, k) > mean_loss(m.steps, m.steps.size() - k, m.steps.size()));
    for (const auto& s : m.steps) {
      CHECK(s.staleness == 0.0);
      CHECK(s.push_ms > 0.0);  // the wait for the allreduces after backward
      CHECK(s.pull_ms > 0.0);  // the local optimizer update
      CHECK_FALSE(s.simulated);
    }
    CHECK(m.evals.size() == (w == 0 ? 2 : 0));
  }
  const JsonValue summary = pstrain::report::parse_json(it::read_file(run / "summary.json"), "summary.json");
  CHECK(summary.find("mode")->as_string("mode") == "allreduce");
  CHECK(summary.find("servers")->as_number("servers") == 0);
  CHECK(summary.find("per_worker")->items().size() == 2);
  CHECK(summary.find("staleness")->is_null());
  const double accuracy = summary.find("final_test_accuracy")->as_number("final_test_accuracy");
  CHECK(accuracy > 0.5);  // it learned: chance is 0.1 on the 10 synthetic classes
  CHECK(it::fs::exists(run / "summary.md"));
  // small_cnn on 1x28x28 synthetic images: 9098 parameters after a 16-byte header.
  CHECK(it::fs::file_size(run / "weights.bin") == 16 + 4 * 9098);
}

TEST_CASE("simulated compute runs in allreduce mode too, with null losses like the other modes") {
  it::TempDir dir;
  const auto run = dir.path() / "simulated";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_allreduce.toml", run);
  args.insert(args.end(), {"--set", "workload.simulated_step_ms=5", "--set", "workload.max_steps=6", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  const auto m = pstrain::report::read_worker_metrics(pstrain::report::worker_metrics_path(run, 1), 1);
  REQUIRE(m.steps.size() == 6);
  CHECK(m.steps[0].simulated);
  CHECK(m.steps[0].compute_ms >= 5.0);
  CHECK(m.evals.empty());
}

// How often `what` occurs in `text`.
static int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Its own CTest entry (integration_no_gpu), skipped where a GPU is present.
// Refused before anything starts (tools/launcher/gpu_check.h): before, the
// job started and every worker failed in NCCL's set-up (exit 1).
TEST_CASE("collective.backend nccl on a machine without a GPU: a config error before anything starts") {
  if (pstrain::probe_gpu_presence().driver) {
    return pstrain::test::skip_case("a GPU is present: the no-GPU error is not exercised here");
  }
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_allreduce.toml", run);
  args.insert(args.end(), {"--set", "workload.device=auto", "--set", "collective.backend=nccl", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path(), std::chrono::seconds(120));
  INFO(r.output);
  CHECK_FALSE(r.exit.signaled);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, "config error: --set collective.backend=nccl: key 'collective.backend': \"nccl\" "
                               "reduces on GPUs, but this machine has no usable GPU (no NVIDIA driver: "));
  CHECK(it::contains(r.output, "use \"gloo\" or \"auto\""));
  CHECK_FALSE(it::fs::exists(run));
}

// The same entry: device "cuda" without a GPU is refused up front, and "auto" says once, in the
// launcher, that the workers use the CPU (before, each worker printed CUDA's error, after
// about a second of CUDA start-up).
TEST_CASE("workload.device cuda on a machine without a GPU: a config error; auto: one launcher line") {
  if (pstrain::probe_gpu_presence().driver) {
    return pstrain::test::skip_case("a GPU is present: the no-GPU paths are not exercised here");
  }
  it::TempDir dir;
  const auto run = dir.path() / "run";
  for (const char* config : {"configs/tiny_sync.toml", "configs/tiny_allreduce.toml"}) {
    CAPTURE(config);
    auto cuda = it::launch_args(it::kSourceDir / config, run);
    cuda.insert(cuda.end(), {"--set", "workload.device=cuda", "--check"});
    const it::Result refused = it::run_launch(cuda, dir.path(), std::chrono::seconds(60));
    INFO(refused.output);
    CHECK(refused.exit.code == 3);
    CHECK(it::contains(refused.output, "key 'workload.device': \"cuda\" but this machine has no usable GPU (no NVIDIA "
                                       "driver: none of /proc/driver/nvidia/version, /dev/nvidiactl, /dev/dxg); use "
                                       "\"auto\""));
  }
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "workload.device=auto"});
  const it::Result r = it::run_launch(args, dir.path(), std::chrono::seconds(120));
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  CHECK(occurrences(r.output, "workload.device = \"auto\": this machine has no NVIDIA driver, so its 2 worker(s) "
                            "train on the CPU") == 1);
  CHECK_FALSE(it::contains(r.output, "cudaGetDeviceCount"));
  CHECK_FALSE(it::contains(r.output, "driver version is insufficient"));
  CHECK(occurrences(r.output, "device auto: no NVIDIA driver") == 2);  // each worker's start-up line, no CUDA error
}
