// A checkpoint part swapped in from another checkpoint, with real processes
// (issue: every manifest recorded the CRC-32 residue, so a server part copied
// from an older checkpoint passed every check, was restored, and the resumed
// job hung until "replies from the servers still missing"). Now the part is
// refused with its reason, the resume falls back to the previous complete
// checkpoint, and it ends with the weights of a run never interrupted.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "common/checkpoint/checkpoint.h"
#include "tests/integration/launch_test_util.h"
#include "worker/train/checkpoint.h"

namespace {

std::vector<std::string> sync_args(const it::fs::path& run, const std::string& max_steps) {
  auto args = it::launch_args(it::kSourceDir / "configs" / "tiny_sync.toml", run);
  for (const std::string& s :
       std::vector<std::string>{"workload.seed=3", "checkpoint.interval_steps=4", "workload.max_steps=" + max_steps}) {
    args.insert(args.end(), {"--set", s});
  }
  args.push_back("--quiet");
  return args;
}

// The number of "step" records in a worker's metrics file.
int step_records(const it::fs::path& file) {
  std::ifstream in(file);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.find("\"type\":\"step\"") != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("sync: a server part swapped in from an older checkpoint is refused; the resume uses the previous one") {
  it::TempDir dir;
  const auto whole = dir.path() / "whole";
  const it::Result a = it::run_launch(sync_args(whole, "16"), dir.path());
  INFO(a.output);
  REQUIRE(a.exit.code == 0);

  // 12 steps: complete checkpoints of steps 8 and 12 (keep = 2).
  const auto run = dir.path() / "stopped";
  const it::Result b = it::run_launch(sync_args(run, "12"), dir.path());
  INFO(b.output);
  REQUIRE(b.exit.code == 0);
  const auto step8 = run / "checkpoints" / pstrain::checkpoint_dir_name(8);
  const auto step12 = run / "checkpoints" / pstrain::checkpoint_dir_name(12);
  REQUIRE(pstrain::checkpoint_problem(step12).empty());
  REQUIRE(it::fs::file_size(step8 / "server-0.ckpt") == it::fs::file_size(step12 / "server-0.ckpt"));
  it::fs::copy_file(step8 / "server-0.ckpt", step12 / "server-0.ckpt", it::fs::copy_options::overwrite_existing);

  const it::Result c = it::run_launch({"--resume", run.string(), "--bin-dir", it::kBinDir.string(), "--timeout-s",
                                       "300", "--quiet", "--set", "workload.max_steps=16"},
                                      dir.path());
  INFO(c.output);
  REQUIRE(c.exit.code == 0);
  CHECK(it::contains(c.output, "passed over checkpoint step-00000012: part server-0.ckpt fails its CRC-32 check"));
  CHECK(it::contains(c.output, "resuming from " + step8.string() + " (step 8)"));

  const auto expected = pstrain::read_weights(pstrain::weights_path(whole.string()));
  const auto resumed = pstrain::read_weights(pstrain::weights_path(run.string()));
  REQUIRE(expected.size() == resumed.size());
  double diff = 0.0, scale = 1e-12;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(expected[i] - resumed[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(expected[i])));
  }
  it::note("max relative difference, resumed past a swapped part vs never interrupted: " + std::to_string(diff / scale));
  CHECK(diff / scale < 1e-5);
  // The summary says the run was resumed, and from which step.
  CHECK(it::contains(it::read_file(run / "summary.json"), "\"resumed_from\": [8]"));
  // Every step once per worker: 8 before the checkpoint resumed from, 8 after it.
  CHECK(step_records(run / "metrics/worker-0.jsonl") == 16);
  CHECK(step_records(run / "metrics/worker-1.jsonl") == 16);
}
