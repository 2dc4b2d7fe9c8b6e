// Shared by the elastic membership tests (tests/integration/elastic_*_test.cc,
// allreduce_elastic_test.cc; docs/architecture.md, "Elastic membership"):
//  - a job's launch arguments with cluster.workers/min_workers/max_workers set
//    (job_args), its fixed-size reference run (run_reference);
//  - waiting for worker 0's first steps (wait_training), a line in a log
//    (wait_for_text), pstrain-ctl's `workers N` (run_ctl), a worker started
//    by hand with --join (join_argv);
//  - the per-epoch coverage check: every sample of every epoch trained once,
//    the coverage records against the split the membership changes give
//    (read_coverage, check_coverage; shrink_segments for a 3 -> 2 change);
//  - what summary.json says of a 3 -> 2 shrink (check_shrink_summary) and of
//    a shrink followed by a dropped worker (kill_worker1_then_end,
//    check_retired_then_dropped).
// The data set facts (1,024 samples, batch 32) are sweep_util.h's; summary.json
// is read with sweep::read_summary.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>

#include <cctype>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/integration/launch_test_util.h"
#include "tests/integration/sweep_util.h"
#include "tools/report/json_value.h"
#include "tools/report/metrics.h"
#include "worker/train/epoch_split.h"

namespace elastic {

namespace fs = std::filesystem;
namespace report = pstrain::report;

constexpr std::int64_t kSamples = sweep::kTrainSamples;       // configs/tiny_*.toml: synthetic_train
constexpr int kBatch = static_cast<int>(sweep::kBatch);       // configs/tiny_*.toml: batch_size
constexpr std::uint64_t kSeed = 1;                            // configs/tiny_*.toml: seed

// launch_args for `config` into `run`, the job elastic between `min_workers`
// and `max_workers` starting with `workers`, `epochs` epochs, no trace,
// quiet; then `extra` (--set pairs).
inline std::vector<std::string> job_args(const fs::path& config, const fs::path& run, int workers, int min_workers,
                                         int max_workers, int epochs, const std::vector<std::string>& extra) {
  auto args = it::launch_args(config, run);
  args.insert(args.end(), {"--set", "cluster.workers=" + std::to_string(workers), "--set",
                           "cluster.min_workers=" + std::to_string(min_workers), "--set",
                           "cluster.max_workers=" + std::to_string(max_workers), "--set",
                           "workload.epochs=" + std::to_string(epochs), "--set", "output.trace=off", "--quiet"});
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The same job without a change, run to its end (exit 0 required): the reference of the accuracy band.
inline void run_reference(const std::vector<std::string>& args, const fs::path& dir) {
  const it::Result fixed = it::run_launch(args, dir);
  INFO(fixed.output);
  REQUIRE(fixed.exit.code == 0);
}

// Worker 0 of `run` took its first steps (its metrics hold 3 lines) within two minutes.
inline bool wait_training(const fs::path& run) {
  return it::wait_until([&] { return it::count_lines(run / "metrics/worker-0.jsonl") >= 3; },
                        std::chrono::seconds(120), "worker 0's first step");
}

// `file` holds `text` within `limit` (`what`: the event waited for).
inline bool wait_for_text(const fs::path& file, const std::string& text, std::chrono::seconds limit,
                          const std::string& what) {
  return it::wait_until([&] { return it::contains(it::read_file(file), text); }, limit, what);
}

// pstrain-ctl RUN workers COUNT (its output into `out`): its exit code.
inline int run_ctl(const fs::path& run, int count, const fs::path& out) {
  const pid_t pid =
      it::spawn({(it::kBinDir / "pstrain-ctl").string(), run.string(), "workers", std::to_string(count)}, {}, out);
  const std::optional<int> code = it::wait_exit(pid, std::chrono::seconds(30));
  REQUIRE(code.has_value());
  return *code;
}

// pstrain-worker --join against the job of `run` (its config and scheduler endpoint), then `extra`.
inline std::vector<std::string> join_argv(const fs::path& run, const std::vector<std::string>& extra = {}) {
  std::string endpoint = it::read_file(run / "scheduler.endpoint");
  while (!endpoint.empty() && std::isspace(static_cast<unsigned char>(endpoint.back()))) endpoint.pop_back();
  std::vector<std::string> argv{(it::kBinDir / "pstrain-worker").string(), "--config", (run / "config.toml").string(),
                                "--scheduler", endpoint, "--join"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

inline double final_accuracy(const fs::path& run) {
  return sweep::read_summary(run).find("final_test_accuracy")->as_number("number");
}

using Coverage = std::map<std::int64_t, pstrain::EpochCoverage>;  // per epoch, what its records add up to

// The coverage records of workers 0..workers-1 of `run` (read_worker_metrics),
// per epoch; a rank with no metrics file is passed over when `skip_missing`.
inline Coverage read_coverage(const fs::path& run, int workers, bool skip_missing = false) {
  Coverage trained;
  for (int rank = 0; rank < workers; ++rank) {
    if (skip_missing && !fs::exists(report::worker_metrics_path(run, rank))) continue;
    const report::WorkerMetrics m = report::read_worker_metrics(report::worker_metrics_path(run, rank), rank);
    for (const report::CoverageRecord& c : m.coverage) {
      trained[c.epoch].add(pstrain::EpochCoverage{c.samples, std::stoull(c.checksum, nullptr, 16)});
    }
  }
  return trained;
}

// Every sample of every epoch once (plus the split's padding): `trained` has
// `epochs` epochs, each what the split of `segments(epoch)` gives ranks 0..workers-1.
inline void check_coverage(const Coverage& trained, int epochs, int workers,
                           const std::function<std::vector<pstrain::EpochSegment>(int)>& segments) {
  CHECK(trained.size() == static_cast<std::size_t>(epochs));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    CAPTURE(epoch);
    const std::vector<pstrain::EpochSegment> of_epoch = segments(epoch);
    pstrain::EpochCoverage expected;
    std::set<std::int64_t> seen;
    for (int rank = 0; rank < workers; ++rank) {
      const pstrain::EpochSplit split(kSamples, kBatch, kSeed, epoch, of_epoch, rank);
      for (std::int64_t b = 0; b < split.steps(); ++b) {
        if (!split.shard_at(b).member) continue;
        expected.add(split.batch(b));
        seen.insert(split.batch(b).begin(), split.batch(b).end());
      }
    }
    CHECK(static_cast<std::int64_t>(seen.size()) == kSamples);
    const auto found = trained.find(epoch);
    CHECK((found == trained.end() ? pstrain::EpochCoverage{} : found->second) == expected);
  }
}

// The segments of `epoch` of a 3 -> 2 shrink that took effect at step `from` of epoch `changed`.
inline std::vector<pstrain::EpochSegment> shrink_segments(int epoch, int changed, std::int64_t from) {
  if (epoch < changed) return {{0, {0, 1, 2}}};
  if (epoch > changed) return {{0, {0, 1}}};
  return {{0, {0, 1, 2}}, {from, {0, 1}}};
}

// A 3 -> 2 shrink at step `at`: summary.json's first membership change says
// so (reason retire), worker 2 is retired there and in its end record, and
// the scheduler's log says it retired.
inline void check_shrink_summary(const fs::path& run, std::int64_t at) {
  const report::JsonValue summary = sweep::read_summary(run);
  const auto& changes = summary.find("membership_changes")->items();
  REQUIRE(changes.size() >= 1);
  CHECK(changes[0].find("old_workers")->as_number("number") == 3);
  CHECK(changes[0].find("new_workers")->as_number("number") == 2);
  CHECK(changes[0].find("reason")->as_string("reason") == "retire");
  CHECK(changes[0].find("step")->as_number("number") == static_cast<double>(at));
  const auto& per_worker = summary.find("per_worker")->items();
  REQUIRE(per_worker.size() == 3);
  CHECK(per_worker[2].find("status")->as_string("status") == "retired");
  CHECK(it::contains(it::read_file(run / "metrics/worker-2.jsonl"), "\"retired\":true"));
  CHECK(it::contains(it::read_file(run / "logs/scheduler.log"),
                     "worker 2 retired (a membership change left it out); 2 workers go on"));
}

// Worker 1 of the job `p` runs in `run` killed with SIGKILL: the job then ends well (exit 0, no signal).
inline void kill_worker1_then_end(it::LaunchProcess& p, const fs::path& run) {
  const auto pids = it::read_pids(run);
  REQUIRE(pids.count("worker-1") == 1);
  REQUIRE(kill(pids.at("worker-1"), SIGKILL) == 0);
  const auto exit = p.wait(std::chrono::seconds(240));
  REQUIRE(exit.has_value());
  CHECK_FALSE(exit->signaled);
  CHECK(exit->code == 0);
}

// A 3 -> 2 shrink, then worker 1 dropped (on_worker_failure "continue"):
// summary.json's two changes (retire, then drop 2 -> 1) and the workers' statuses.
inline void check_retired_then_dropped(const fs::path& run) {
  const report::JsonValue summary = sweep::read_summary(run);
  const auto& changes = summary.find("membership_changes")->items();
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].find("reason")->as_string("reason") == "retire");
  CHECK(changes[1].find("reason")->as_string("reason") == "drop");
  CHECK(changes[1].find("old_workers")->as_number("number") == 2);
  CHECK(changes[1].find("new_workers")->as_number("number") == 1);
  const auto& per_worker = summary.find("per_worker")->items();
  REQUIRE(per_worker.size() == 3);
  CHECK(per_worker[1].find("status")->as_string("status") == "dropped");
  CHECK(per_worker[2].find("status")->as_string("status") == "retired");
}

}  // namespace elastic
