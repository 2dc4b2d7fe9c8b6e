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

#include "tests/integration/elastic_util.h"

namespace {

namespace fs = std::filesystem;
namespace report = pstrain::report;

// Long enough (about 440 steps, seconds) that the request, made at its first step, comes well before its end.
constexpr int kEpochs = 40;
constexpr std::int64_t kStepsWith3 = 11;  // ceil(ceil(1024 / 3) / 32)

std::vector<std::string> elastic_args(const fs::path& run, const std::string& mode,
                                      const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets{"--set", "mode=\"" + mode + "\""};
  const std::vector<std::string> rate = it::tiny_async_rate(mode);
  sets.insert(sets.end(), rate.begin(), rate.end());
  sets.insert(sets.end(), extra.begin(), extra.end());
  return elastic::job_args(it::kSourceDir / "configs/tiny_sync.toml", run, 3, 2, 3, kEpochs, sets);
}

// A run of `mode` (with `extra` settings) asked for 2 workers at its first
// step, checked against the same run without the change (`name`: its folder).
void shrink_run(const fs::path& dir, const std::string& name, const std::string& mode,
                const std::vector<std::string>& extra = {}) {
  CAPTURE(name);
  const auto reference = dir / (name + "-fixed");
  elastic::run_reference(elastic_args(reference, mode, extra), dir);
  {
    const auto run = dir / name;
    it::LaunchProcess p(elastic_args(run, mode, extra), dir / (name + "-out.txt"));
    const bool training = elastic::wait_training(run);
    INFO(p.output());
    REQUIRE(training);
    // What the scheduler refuses itself (pstrain-ctl would not write these): below
    // cluster.min_workers, a line that is no request, a grow (not built yet).
    if (name == "sync") it::write_file(run / "ctl.txt", "workers 1\nresize please\nworkers 3\n");
    CHECK(elastic::run_ctl(run, 2, dir / (name + "-ctl.txt")) == 0);
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

    if (name == "sync") {
      const std::string log = it::read_file(run / "logs/scheduler.log");
      CHECK(it::contains(log, "request for 1 workers refused: "));
      CHECK(it::contains(log, "ignored a request 'resize please': expected 'workers N'"));
      CHECK(it::contains(log, "request for 3 workers: the job has 3 already"));
    }
    elastic::check_coverage(elastic::read_coverage(run, 3), kEpochs, 3,
                            [&](int epoch) { return elastic::shrink_segments(epoch, changed, from); });

    // The one change 3 -> 2 at that step (reason retire), worker 2 retired, worker 0 done.
    elastic::check_shrink_summary(run, change.step);
    const report::JsonValue summary = sweep::read_summary(run);
    REQUIRE(summary.find("membership_changes")->items().size() == 1);
    CHECK(summary.find("per_worker")->items()[0].find("status")->as_string("status") == "done");
    // A retiree's slot is vacant again at the servers: no update after it left lacks anyone.
    if (mode == "sync") CHECK(summary.find("partial_updates")->as_number("number") == 0);
    CHECK(it::contains(it::read_file(dir / (name + "-out.txt")), "w2 retired"));  // the launcher's last status line
    // The same run without the change: the accuracy within a wide band of it.
    CHECK(elastic::final_accuracy(run) >= elastic::final_accuracy(reference) - 0.15);
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
  CHECK(elastic::run_ctl(run, 2, dir.path() / "none.txt") == 3);
  CHECK(it::contains(it::read_file(dir.path() / "none.txt"), "is not a running job's run directory"));
  it::write_file(run / "config.toml",
                 "mode = \"sync\"\n[cluster]\nworkers = 3\nmin_workers = 2\nmax_workers = 4\n[workload]\n"
                 "dataset = \"synthetic\"\n");
  it::write_file(run / "scheduler.endpoint", "tcp://127.0.0.1:1\n");
  CHECK(elastic::run_ctl(run, 1, dir.path() / "low.txt") == 2);
  CHECK(it::contains(it::read_file(dir.path() / "low.txt"), "1 workers refused: the job may have 2 to 4"));
  CHECK(elastic::run_ctl(run, 5, dir.path() / "high.txt") == 2);
  CHECK_FALSE(fs::exists(run / "ctl.txt"));
  CHECK(elastic::run_ctl(run, 4, dir.path() / "ok.txt") == 0);
  CHECK(it::read_file(run / "ctl.txt") == "workers 4\n");
  it::write_file(run / "config.toml",
                 "mode = \"allreduce\"\n[cluster]\nworkers = 3\nmin_workers = 2\nmax_workers = 4\n[workload]\n"
                 "dataset = \"synthetic\"\n");
  CHECK(elastic::run_ctl(run, 2, dir.path() / "allreduce.txt") == 0);  // allreduce jobs resize too (allreduce_elastic_test.cc)
  CHECK(it::read_file(run / "ctl.txt") == "workers 4\nworkers 2\n");
}

TEST_CASE("a shrink, then worker 1 killed with SIGKILL (on_worker_failure continue): retired, then dropped, and the run ends well") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  it::LaunchProcess p(elastic_args(run, "sync", {"--set", "cluster.on_worker_failure=\"continue\""}),
                      dir.path() / "out.txt");
  const bool training = elastic::wait_training(run);
  INFO(p.output());
  REQUIRE(training);
  REQUIRE(elastic::run_ctl(run, 2, dir.path() / "ctl.txt") == 0);
  const bool retired = elastic::wait_for_text(run / "logs/scheduler.log", "worker 2 retired", std::chrono::seconds(120),
                                              "worker 2's retirement");
  REQUIRE(retired);
  elastic::kill_worker1_then_end(p, run);
  elastic::check_retired_then_dropped(run);
}
