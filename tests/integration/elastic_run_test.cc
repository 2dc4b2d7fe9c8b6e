// Elastic membership with real processes (docs/architecture.md, "Elastic
// membership"): a launched run of 3 workers asked by pstrain-ctl for 2 while
// it trains. The scheduler announces the change, every worker answers with
// its next step, the change takes effect at the most advanced one: worker 2
// retires there (exit 0, its end record says retired), workers 0 and 1
// split the rest of the epoch's permutation and the later epochs. In sync,
// async and ssp: every sample of every epoch trained once (the coverage
// records against the split the plan records name), the summary's
// membership change, the final accuracy within the band of the same run
// without the change. And pstrain-ctl's refusals (below min, above max).
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"
#include "tools/report/metrics.h"
#include "worker/train/epoch_split.h"

namespace {

namespace fs = std::filesystem;
namespace report = pstrain::report;
using pstrain::EpochCoverage;
using pstrain::EpochSegment;
using pstrain::EpochSplit;

constexpr std::int64_t kSamples = 1024;  // configs/tiny_sync.toml: synthetic_train, seed 1, batch 32
constexpr int kBatch = 32;
constexpr std::uint64_t kSeed = 1;
// Long enough (about 440 steps, seconds) that the request, made at its first step, comes well before its end.
constexpr int kEpochs = 40;
constexpr std::int64_t kStepsWith3 = 11;  // ceil(ceil(1024 / 3) / 32)

std::vector<std::string> elastic_args(const fs::path& run, const std::string& mode) {
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "mode=\"" + mode + "\"", "--set", "cluster.workers=3", "--set",
                           "cluster.min_workers=2", "--set", "cluster.max_workers=3", "--set",
                           "workload.epochs=" + std::to_string(kEpochs), "--set", "output.trace=off", "--quiet"});
  return args;
}

int run_ctl(const fs::path& run, const std::string& count, const fs::path& out) {
  const pid_t pid = it::spawn({(it::kBinDir / "pstrain-ctl").string(), run.string(), "workers", count}, {}, out);
  const std::optional<int> code = it::wait_exit(pid, std::chrono::seconds(30));
  REQUIRE(code.has_value());
  return *code;
}

// The segments of `epoch` when the change took effect at step `from` of epoch `changed`.
std::vector<EpochSegment> segments_of(int epoch, int changed, std::int64_t from) {
  if (epoch < changed) return {{0, {0, 1, 2}}};
  if (epoch > changed) return {{0, {0, 1}}};
  return {{0, {0, 1, 2}}, {from, {0, 1}}};
}

double final_accuracy(const fs::path& run) {
  const report::JsonValue summary = report::parse_json(it::read_file(run / "summary.json"), "summary.json");
  return summary.find("final_test_accuracy")->as_number("number");
}

// Every sample of every epoch once (plus the padding of the split): the
// records of each epoch of `run` are what the split gives when the change
// took effect at step `from` of epoch `changed`.
void check_coverage(const fs::path& run, int changed, std::int64_t from) {
  std::map<std::int64_t, EpochCoverage> trained;
  for (const int rank : {0, 1, 2}) {
    const report::WorkerMetrics m = report::read_worker_metrics(report::worker_metrics_path(run, rank), rank);
    for (const report::CoverageRecord& c : m.coverage) {
      trained[c.epoch].add(EpochCoverage{c.samples, std::stoull(c.checksum, nullptr, 16)});
    }
  }
  CHECK(trained.size() == kEpochs);
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    CAPTURE(epoch);
    EpochCoverage expected;
    std::set<std::int64_t> seen;
    for (const int rank : {0, 1, 2}) {
      const EpochSplit split(kSamples, kBatch, kSeed, epoch, segments_of(epoch, changed, from), rank);
      for (std::int64_t b = 0; b < split.steps(); ++b) {
        if (!split.shard_at(b).member) continue;
        expected.add(split.batch(b));
        seen.insert(split.batch(b).begin(), split.batch(b).end());
      }
    }
    CHECK(static_cast<std::int64_t>(seen.size()) == kSamples);
    CHECK(trained[epoch] == expected);
  }
}

// A run of `mode` (with `extra` settings) asked for 2 workers at its first
// step, checked against the same run without the change (`name`: its folder).
void shrink_run(const fs::path& dir, const std::string& name, const std::string& mode,
                const std::vector<std::string>& extra = {}) {
  CAPTURE(name);
  auto args = elastic_args(dir / (name + "-fixed"), mode);
  args.insert(args.end(), extra.begin(), extra.end());
  {
    const it::Result fixed = it::run_launch(args, dir);
    INFO(fixed.output);
    REQUIRE(fixed.exit.code == 0);
  }
  const auto reference = dir / (name + "-fixed");
  {
    const auto run = dir / name;
    args = elastic_args(run, mode);
    args.insert(args.end(), extra.begin(), extra.end());
    it::LaunchProcess p(args, dir / (name + "-out.txt"));
    const bool training = it::wait_until([&] { return it::count_lines(run / "metrics/worker-0.jsonl") >= 3; },
                                         std::chrono::seconds(120), "worker 0's first step");
    INFO(p.output());
    REQUIRE(training);
    // What the scheduler refuses itself (pstrain-ctl would not write these): below
    // cluster.min_workers, a line that is no request, a grow (not built yet).
    if (name == "sync") it::write_file(run / "ctl.txt", "workers 1\nresize please\nworkers 3\n");
    CHECK(run_ctl(run, "2", dir / (name + "-ctl.txt")) == 0);
    const auto exit = p.wait(std::chrono::seconds(240));
    REQUIRE(exit.has_value());
    REQUIRE_FALSE(exit->signaled);
    REQUIRE(exit->code == 0);

    // Where the change took effect: worker 0's plan record for it.
    const report::WorkerMetrics w0 = report::read_worker_metrics(report::worker_metrics_path(run, 0), 0);
    // (A worker behind the boundary's epoch may first record the epoch's start, still with 3.)
    std::vector<report::PlanChange> within;
    for (const report::PlanChange& c : w0.plan_changes) {
      if (c.step >= 0) within.push_back(c);
    }
    REQUIRE(within.size() == 1);
    const report::PlanChange change = within.front();
    CHECK(change.workers == 2);
    const int changed = static_cast<int>(change.epoch);
    const std::int64_t from = change.step - changed * kStepsWith3;
    REQUIRE(from >= 1);
    REQUIRE(from < kStepsWith3);

    // Worker 2 left there, retired, and the job went on with two.
    const report::WorkerMetrics w2 = report::read_worker_metrics(report::worker_metrics_path(run, 2), 2);
    REQUIRE(w2.end.has_value());
    CHECK(w2.end->steps == change.step);
    CHECK(it::contains(it::read_file(run / "metrics/worker-2.jsonl"), "\"retired\":true"));
    CHECK(it::contains(it::read_file(run / "logs/scheduler.log"),
                       "worker 2 retired (a membership change left it out); 2 workers go on"));

    if (name == "sync") {
      const std::string log = it::read_file(run / "logs/scheduler.log");
      CHECK(it::contains(log, "request for 1 workers refused: "));
      CHECK(it::contains(log, "ignored a request 'resize please': expected 'workers N'"));
      CHECK(it::contains(log, "request for 3 workers: the job has 3 already"));
    }
    check_coverage(run, changed, from);

    const report::JsonValue summary = report::parse_json(it::read_file(run / "summary.json"), "summary.json");
    const auto& changes = summary.find("membership_changes")->items();
    REQUIRE(changes.size() == 1);
    CHECK(changes[0].find("old_workers")->as_number("number") == 3);
    CHECK(changes[0].find("new_workers")->as_number("number") == 2);
    CHECK(changes[0].find("reason")->as_string("reason") == "retire");
    const auto& per_worker = summary.find("per_worker")->items();
    REQUIRE(per_worker.size() == 3);
    CHECK(per_worker[2].find("status")->as_string("status") == "retired");
    CHECK(per_worker[0].find("status")->as_string("status") == "done");
    // A retiree's slot is vacant again at the servers: no update after it left lacks anyone.
    if (mode == "sync") CHECK(summary.find("partial_updates")->as_number("number") == 0);
    CHECK(it::contains(it::read_file(dir / (name + "-out.txt")), "w2 retired"));  // the launcher's last status line
    CHECK(changes[0].find("step")->as_number("number") == static_cast<double>(change.step));
    // The same run without the change: the accuracy within a wide band of it.
    CHECK(final_accuracy(run) >= final_accuracy(reference) - 0.15);
  }
}

}  // namespace

TEST_CASE("3 -> 2 workers while training (pstrain-ctl): worker 2 retires at the announced step, every sample once") {
  it::TempDir dir;
  for (const std::string mode : {"sync", "async", "ssp"}) shrink_run(dir.path(), mode, mode);
}

TEST_CASE("3 -> 2 workers while worker 2 straggles (async, ssp), and across checkpoints (sync): every sample once") {
  it::TempDir dir;
  const std::vector<std::string> straggler = {"--set", "workload.straggler_rank=2", "--set",
                                              "workload.straggler_slowdown=4"};
  shrink_run(dir.path(), "async-straggler", "async", straggler);
  shrink_run(dir.path(), "ssp-straggler", "ssp", straggler);
  shrink_run(dir.path(), "sync-checkpoints", "sync", {"--set", "checkpoint.interval_steps=7"});
}

TEST_CASE("pstrain-ctl refuses a count outside cluster.min_workers..max_workers, and a directory with no job") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  fs::create_directories(run);
  CHECK(run_ctl(run, "2", dir.path() / "none.txt") == 3);
  CHECK(it::contains(it::read_file(dir.path() / "none.txt"), "is not a running job's run directory"));
  it::write_file(run / "config.toml",
                 "mode = \"sync\"\n[cluster]\nworkers = 3\nmin_workers = 2\nmax_workers = 4\n[workload]\n"
                 "dataset = \"synthetic\"\n");
  it::write_file(run / "scheduler.endpoint", "tcp://127.0.0.1:1\n");
  CHECK(run_ctl(run, "1", dir.path() / "low.txt") == 2);
  CHECK(it::contains(it::read_file(dir.path() / "low.txt"), "1 workers refused: the job may have 2 to 4"));
  CHECK(run_ctl(run, "5", dir.path() / "high.txt") == 2);
  CHECK_FALSE(fs::exists(run / "ctl.txt"));
  CHECK(run_ctl(run, "4", dir.path() / "ok.txt") == 0);
  CHECK(it::read_file(run / "ctl.txt") == "workers 4\n");
  it::write_file(run / "config.toml",
                 "mode = \"allreduce\"\n[cluster]\nworkers = 3\nmin_workers = 2\nmax_workers = 4\n[workload]\n"
                 "dataset = \"synthetic\"\n");
  CHECK(run_ctl(run, "2", dir.path() / "allreduce.txt") == 0);  // allreduce jobs resize too (allreduce_elastic_test.cc)
  CHECK(it::read_file(run / "ctl.txt") == "workers 4\nworkers 2\n");
}

TEST_CASE("a shrink, then worker 1 killed with SIGKILL (on_worker_failure continue): retired, then dropped, and the run ends well") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = elastic_args(run, "sync");
  args.insert(args.end(), {"--set", "cluster.on_worker_failure=\"continue\""});
  it::LaunchProcess p(args, dir.path() / "out.txt");
  const bool training = it::wait_until([&] { return it::count_lines(run / "metrics/worker-0.jsonl") >= 3; },
                                       std::chrono::seconds(120), "worker 0's first step");
  INFO(p.output());
  REQUIRE(training);
  REQUIRE(run_ctl(run, "2", dir.path() / "ctl.txt") == 0);
  const bool retired = it::wait_until(
      [&] { return it::contains(it::read_file(run / "logs/scheduler.log"), "worker 2 retired"); },
      std::chrono::seconds(120), "worker 2's retirement");
  REQUIRE(retired);
  const auto pids = it::read_pids(run);
  REQUIRE(pids.count("worker-1") == 1);
  REQUIRE(kill(pids.at("worker-1"), SIGKILL) == 0);
  const auto exit = p.wait(std::chrono::seconds(240));
  REQUIRE(exit.has_value());
  CHECK_FALSE(exit->signaled);
  CHECK(exit->code == 0);
  const report::JsonValue summary = report::parse_json(it::read_file(run / "summary.json"), "summary.json");
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
