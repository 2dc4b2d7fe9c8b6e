// workload.on_nonfinite = "skip" with real processes: with a huge rate the
// first step's update throws the weights so far that every later step's loss
// and gradients are non-finite. Skipped steps are counted (step records, end
// records, the summary) and the job finishes when the streak stays below
// max_skipped_steps; at max_skipped_steps in a row it ends with the one line
// and exit code 4. Sync, async and ssp (parameter servers) and allreduce.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include "tests/integration/launch_test_util.h"
#include "worker/train/checkpoint.h"

namespace {

std::vector<std::string> diverging_args(const std::string& mode, const it::fs::path& run, int max_steps,
                                        int max_skipped) {
  const std::string config = mode == "allreduce" ? "configs/tiny_allreduce.toml" : "configs/tiny_sync.toml";
  auto args = it::launch_args(it::kSourceDir / config, run);
  args.insert(args.end(), {"--set", "mode=" + mode, "--set", "optimizer.lr=1e20", "--set", "output.trace=off",
                           "--set", "workload.on_nonfinite=\"skip\"", "--set",
                           "workload.max_skipped_steps=" + std::to_string(max_skipped), "--set",
                           "workload.max_steps=" + std::to_string(max_steps), "--quiet"});
  if (mode == "allreduce") args.insert(args.end(), {"--set", "cluster.servers=0"});
  return args;
}

// The integer after `"key":` at its n-th occurrence (0 = first), or -1.
long long json_int(const std::string& text, const std::string& key, int n = 0) {
  std::size_t at = 0;
  for (int i = 0; i <= n; ++i) {
    at = text.find("\"" + key + "\":", i == 0 ? 0 : at + 1);
    if (at == std::string::npos) return -1;
  }
  return std::stoll(text.substr(at + key.size() + 3));  // stoll skips the space, if any
}

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("skip: non-finite steps are skipped and counted, and the job finishes with finite weights") {
  for (const std::string mode : {"sync", "async", "ssp", "allreduce"}) {
    CAPTURE(mode);
    it::TempDir dir;
    const auto run = dir.path() / "run";
    const it::Result r = it::run_launch(diverging_args(mode, run, 6, 10), dir.path());
    INFO(r.output);
    CHECK_FALSE(r.exit.signaled);
    REQUIRE(r.exit.code == 0);
    const std::string summary = it::read_file(run / "summary.json");
    INFO(summary);
    const std::string w0 = it::read_file(run / "metrics" / "worker-0.jsonl");
    const std::string w1 = it::read_file(run / "metrics" / "worker-1.jsonl");
    if (mode == "async" || mode == "ssp") {
      // Step 0 is finite; the steps after the first updates are not (when
      // exactly depends on the arrival order).
      CHECK(json_int(summary, "skipped_steps", 2) >= 8);
    } else {
      // Step 0 is finite and applied; steps 1..5 are all skipped, by both.
      CHECK(json_int(summary, "skipped_steps", 0) == 5);  // per_worker[0]
      CHECK(json_int(summary, "skipped_steps", 1) == 5);  // per_worker[1]
      CHECK(json_int(summary, "skipped_steps", 2) == 10);  // the total
      CHECK(count_of(w0, "\"skipped\":true") == 5);
      CHECK(count_of(w1, "\"skipped\":true") == 5);
      CHECK(count_of(w0, "\"skipped\":false") == 1);
    }
    CHECK(it::contains(w0, "\"skipped_steps\":"));
    CHECK(it::contains(it::read_file(run / "summary.md"), "## Skipped steps"));
    // The weights after step 0's update, untouched since: huge but finite.
    const std::vector<float> weights = pstrain::read_weights((run / "weights.bin").string());
    REQUIRE_FALSE(weights.empty());
    CHECK(std::count_if(weights.begin(), weights.end(), [](float x) { return !std::isfinite(x); }) == 0);
    if (mode == "sync") {
      const std::string s0 = it::read_file(run / "metrics" / "server-0.json");
      const std::string s1 = it::read_file(run / "metrics" / "server-1.json");
      CHECK(json_int(s0, "pushes_rejected") == 0);  // nothing non-finite reached a server
      CHECK(json_int(s0, "skip_pushes") + json_int(s1, "skip_pushes") > 0);
      CHECK(json_int(s0, "empty_updates") + json_int(s1, "empty_updates") > 0);
    }
  }
}

TEST_CASE("skip: max_skipped_steps in a row ends the job with the one line and exit code 4") {
  for (const std::string mode : {"sync", "async", "ssp", "allreduce"}) {
    CAPTURE(mode);
    it::TempDir dir;
    const auto run = dir.path() / "run";
    const it::Result r = it::run_launch(diverging_args(mode, run, 20, 3), dir.path());
    INFO(r.output);
    CHECK_FALSE(r.exit.signaled);
    CHECK(r.exit.code == 4);
    const auto headline = r.output.find(" launch] worker ");
    REQUIRE(headline != std::string::npos);
    const std::string line = r.output.substr(headline, r.output.find('\n', headline) - headline);
    CHECK(std::regex_search(line, std::regex(": training diverged at step [0-9]+ \\(.*; 3 steps skipped in a row, "
                                             "workload.max_skipped_steps = 3, lr 1e\\+20\\): lower optimizer.lr")));
    CHECK(it::contains(r.output, "exited with code 4 (training diverged)"));
    CHECK_FALSE(it::fs::exists(run / "weights.bin"));
    CHECK(it::contains(it::read_file(run / "summary.json"), "\"partial\": true"));  // a failed run's summary is partial
  }
}
