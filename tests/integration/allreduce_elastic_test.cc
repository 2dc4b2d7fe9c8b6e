// Elastic membership in allreduce mode with real processes
// (docs/architecture.md, "Elastic membership"): a launched allreduce run of
// 3 workers asked by pstrain-ctl for 2 while it trains. Every worker answers
// the change with its next step (also while it waits in an allreduce for a
// peer that already answered), the change takes effect at the most advanced
// answer: workers 0 and 1 re-form the collective under the next generation
// there and take worker 0's weights and optimizer state, worker 2 retires
// (exit 0, its end record says retired) after the step before. Checked: the
// boundary in every worker's records, every sample of every epoch trained
// once (coverage records against the split), the replica check at each later
// epoch's end (the job ends 0 only when it passed), the summary's
// membership change, the learning rate following the global batch
// (schedule.linear_scaling), the final accuracy within the band of the same
// run without the change; with worker 2 straggling; and a SIGKILL of a
// remaining worker under on_worker_failure "continue" after the change.
// Growing: 2 -> 4 -> 3, two workers started with --join enter the collective
// at their change's boundary, taking worker 0's weights and optimizer state
// (SGD with momentum: a replica without the velocity would fail the replica
// check at the epoch's end), then a shrink to 3.
#include <doctest/doctest.h>

#include <cmath>
#include <regex>
#include <sstream>

#include "tests/integration/elastic_util.h"

namespace {

namespace fs = std::filesystem;
namespace report = pstrain::report;
using pstrain::EpochCoverage;
using pstrain::EpochSegment;

// configs/tiny_allreduce.toml: synthetic_train, seed 1, batch 32 (elastic_util.h)
// Long enough (about 440 steps) that the request, made after the first steps, comes well before the end.
constexpr int kEpochs = 40;
constexpr std::int64_t kStepsWith3 = 11;  // ceil(ceil(1024 / 3) / 32)

// The allreduce job of `workers` (min 2, max `max_workers`) for `epochs`, the rate following the global batch.
std::vector<std::string> allreduce_args(const fs::path& run, int workers, int max_workers, int epochs,
                                        const std::vector<std::string>& extra) {
  std::vector<std::string> sets{"--set", "schedule.linear_scaling=true"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return elastic::job_args(it::kSourceDir / "configs/tiny_allreduce.toml", run, workers, 2, max_workers, epochs, sets);
}

std::vector<std::string> elastic_args(const fs::path& run, const std::vector<std::string>& extra) {
  return allreduce_args(run, 3, 3, kEpochs, extra);
}

// Starts `args`, waits for worker 0's first steps, asks pstrain-ctl for 2 workers.
void start_and_shrink(it::LaunchProcess& p, const fs::path& run, const fs::path& ctl_out) {
  const bool training = elastic::wait_training(run);
  INFO(p.output());
  REQUIRE(training);
  REQUIRE(elastic::run_ctl(run, 2, ctl_out) == 0);
}

// The step (counted over the run) the change took effect at: worker 0's plan
// record for it, the same in worker 1's; worker 2 ran every step before it.
std::int64_t boundary_of(const fs::path& run) {
  std::int64_t at = -1;
  for (const int rank : {0, 1}) {
    const report::WorkerMetrics m = report::read_worker_metrics(report::worker_metrics_path(run, rank), rank);
    std::vector<report::PlanChange> within;
    for (const report::PlanChange& c : m.plan_changes) {
      if (c.step >= 0) within.push_back(c);
    }
    REQUIRE(within.size() == 1);
    CHECK(within.front().workers == 2);
    if (rank == 1) CHECK(within.front().step == at);
    at = within.front().step;
  }
  const report::WorkerMetrics w2 = report::read_worker_metrics(report::worker_metrics_path(run, 2), 2);
  REQUIRE(w2.end.has_value());
  CHECK(w2.end->steps == at);
  REQUIRE_FALSE(w2.steps.empty());
  CHECK(w2.steps.back().step == at - 1);
  return at;
}

// schedule.linear_scaling: a step with 2 workers takes 2/3 of the rate of one with 3 (constant schedule).
void check_rates(const fs::path& run, std::int64_t at) {
  const report::WorkerMetrics w0 = report::read_worker_metrics(report::worker_metrics_path(run, 0), 0);
  double before = 0.0, after = 0.0;
  for (const report::StepRecord& s : w0.steps) {
    if (s.step == at - 1) before = s.lr;
    if (s.step == at) after = s.lr;
  }
  REQUIRE(before > 0.0);
  CHECK(std::abs(after - before * 2.0 / 3.0) < 1e-6 * before);
}

// A run asked for 2 workers after its first steps, checked against the same run without the change.
void shrink_run(const fs::path& dir, const std::string& name, const std::vector<std::string>& extra = {}) {
  CAPTURE(name);
  const auto reference = dir / (name + "-fixed");
  elastic::run_reference(elastic_args(reference, extra), dir);
  const auto run = dir / name;
  it::LaunchProcess p(elastic_args(run, extra), dir / (name + "-out.txt"));
  start_and_shrink(p, run, dir / (name + "-ctl.txt"));
  const auto exit = p.wait(std::chrono::seconds(300));
  INFO(p.output());
  REQUIRE(exit.has_value());
  REQUIRE_FALSE(exit->signaled);
  REQUIRE(exit->code == 0);  // includes the replica check at every epoch's end after the change

  const std::int64_t at = boundary_of(run);
  const int changed = static_cast<int>(at / kStepsWith3);
  const std::int64_t from = at - changed * kStepsWith3;
  REQUIRE(from >= 1);
  elastic::check_coverage(elastic::read_coverage(run, 3), kEpochs, 3,
                          [&](int epoch) { return elastic::shrink_segments(epoch, changed, from); });
  check_rates(run, at);
  elastic::check_shrink_summary(run, at);  // one change 3 -> 2 at `at` (reason retire), worker 2 retired
  for (const int rank : {0, 1}) {  // both re-formed the collective there, generation 1, from worker 0's replica
    const std::string log = it::read_file(run / ("logs/worker-" + std::to_string(rank) + ".log"));
    CHECK(it::contains(log, "the collective re-formed from workers 0,1,2 to 0,1, this one rank " +
                                std::to_string(rank) + " of 2, generation 1\n"));
    CHECK(it::contains(log, "replicas took worker 0's weights and optimizer state\n"));
  }
  CHECK(it::contains(it::read_file(dir / (name + "-out.txt")), "w2 retired"));  // the launcher's last status line
  CHECK(elastic::final_accuracy(run) >= elastic::final_accuracy(reference) - 0.15);
}

// ---- Growing ------------------------------------------------------------------

constexpr int kGrowEpochs = 24;

// A change in the scheduler's log: from step `from` of `epoch` the workers `members`.
struct LoggedChange {
  int epoch = 0;
  std::int64_t from = 0;
  std::vector<int> members;
};

std::vector<LoggedChange> logged_changes(const std::string& log) {
  std::vector<LoggedChange> out;
  const std::regex line(R"(membership change \d+ \(\w+\): from epoch (\d+) step (\d+) workers ([0-9,]+) \()");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it) {
    LoggedChange c{std::stoi((*it)[1].str()), std::stoll((*it)[2].str()), {}};
    std::stringstream ranks((*it)[3].str());
    for (std::string r; std::getline(ranks, r, ',');) c.members.push_back(std::stoi(r));
    out.push_back(c);
  }
  return out;
}

// Every sample of every epoch once: the coverage records of workers 0..3
// against the split the logged changes give (an epoch begins with the
// members of the last change before it; a change within it adds a segment).
void check_grow_coverage(const fs::path& run, const std::vector<LoggedChange>& changes) {
  elastic::Coverage trained;
  for (int rank = 0; rank < 4; ++rank) {  // (each line on its own: a joiner's file has records of its own)
    std::stringstream lines(it::read_file(report::worker_metrics_path(run, rank)));
    for (std::string line; std::getline(lines, line);) {
      if (!it::contains(line, "\"type\":\"coverage\"")) continue;
      const report::JsonValue c = report::parse_json(line, "coverage record");
      const auto epoch = static_cast<std::int64_t>(c.find("epoch")->as_number("epoch"));
      trained[epoch].add(EpochCoverage{static_cast<std::int64_t>(c.find("samples")->as_number("samples")),
                                       std::stoull(c.find("checksum")->as_string("checksum"), nullptr, 16)});
    }
  }
  std::vector<std::vector<EpochSegment>> epochs;
  std::vector<int> members{0, 1};
  for (int epoch = 0; epoch < kGrowEpochs; ++epoch) {
    std::vector<EpochSegment> segments{{0, members}};
    for (const LoggedChange& c : changes) {
      if (c.epoch == epoch) segments.push_back({c.from, c.members});
    }
    members = segments.back().members;
    epochs.push_back(segments);
  }
  elastic::check_coverage(trained, kGrowEpochs, 4, [&](int epoch) { return epochs[static_cast<std::size_t>(epoch)]; });
}

std::vector<std::string> grow_args(const fs::path& run, const std::vector<std::string>& extra) {
  return allreduce_args(run, 2, 4, kGrowEpochs, extra);
}

// pstrain-worker --join against the job of `run`.
pid_t join_by_hand(const fs::path& run, const fs::path& out) { return it::spawn(elastic::join_argv(run), {}, out); }

// 2 -> 4 -> 3: two joiners (started by the launcher on pstrain-ctl's
// request, or `by_hand` with --join), then a shrink to 3; checked against
// the fixed 2-worker run of the same config.
void grow_run(const fs::path& dir, bool by_hand, const std::vector<std::string>& extra = {}) {
  CAPTURE(by_hand);
  CAPTURE(extra.size());
  const auto reference = dir / "fixed";
  if (!fs::exists(reference)) elastic::run_reference(grow_args(reference, extra), dir);
  const auto run = dir / (by_hand ? "by-hand" : "ctl");
  it::LaunchProcess p(grow_args(run, extra), dir / "out.txt");
  const bool training = elastic::wait_training(run);
  INFO(p.output());
  REQUIRE(training);
  std::vector<pid_t> joiners;
  if (by_hand) {
    joiners = {join_by_hand(run, dir / "join-a.txt"), join_by_hand(run, dir / "join-b.txt")};
  } else {
    REQUIRE(elastic::run_ctl(run, 4, dir / "ctl-4.txt") == 0);
  }
  const bool four = elastic::wait_for_text(run / "logs/worker-0.log", "to 0,1,2,3, this one rank 0 of 4",
                                           std::chrono::seconds(120), "the collective of 4");
  if (!four) {  // what each process said
    MESSAGE(it::read_file(run / "logs/scheduler.log"));
    for (const std::string f : {"logs/worker-0.log", "logs/worker-1.log", "logs/worker-2.log", "logs/worker-3.log"}) {
      if (fs::exists(run / f)) MESSAGE(it::read_file(run / f));
    }
    const std::string joined = by_hand ? it::read_file(dir / "join-a.txt") + it::read_file(dir / "join-b.txt") : "";
    MESSAGE(joined);
  }
  REQUIRE(four);
  REQUIRE(elastic::run_ctl(run, 3, dir / "ctl-3.txt") == 0);
  const auto exit = p.wait(std::chrono::seconds(300));
  REQUIRE(exit.has_value());
  REQUIRE_FALSE(exit->signaled);
  REQUIRE(exit->code == 0);  // every replica check after the joins passed
  for (const pid_t j : joiners) CHECK(it::wait_exit(j, std::chrono::seconds(60)) == std::optional<int>(0));

  const std::vector<LoggedChange> changes = logged_changes(it::read_file(run / "logs/scheduler.log"));
  REQUIRE(changes.size() >= 2);
  CHECK(changes.back().members == std::vector<int>{0, 1, 2});
  CHECK(changes[changes.size() - 2].members == std::vector<int>{0, 1, 2, 3});
  check_grow_coverage(run, changes);
  // Each joiner took worker 0's replica (weights and optimizer state) in the resync.
  const std::string said = by_hand ? it::read_file(dir / "join-a.txt") + it::read_file(dir / "join-b.txt")
                                   : it::read_file(run / "logs/worker-2.log") + it::read_file(run / "logs/worker-3.log");
  std::size_t took = 0;
  for (auto at = said.find("with worker 0's weights and optimizer state"); at != std::string::npos;
       at = said.find("with worker 0's weights and optimizer state", at + 1)) {
    ++took;
  }
  CHECK(took == 2);
  CHECK(it::contains(it::read_file(run / "metrics/worker-3.jsonl"), "\"retired\":true"));
  const report::JsonValue summary = sweep::read_summary(run);
  const auto& logged = summary.find("membership_changes")->items();
  REQUIRE(logged.size() == changes.size());
  CHECK(logged.front().find("old_workers")->as_number("number") == 2);
  CHECK(logged.front().find("reason")->as_string("reason") == (by_hand ? "join" : "ctl"));
  CHECK(logged.back().find("old_workers")->as_number("number") == 4);
  CHECK(logged.back().find("new_workers")->as_number("number") == 3);
  CHECK(logged.back().find("reason")->as_string("reason") == "retire");
  const double accuracy = summary.find("final_test_accuracy")->as_number("number");
  CHECK(accuracy >= elastic::final_accuracy(reference) - 0.15);
}

}  // namespace

TEST_CASE("allreduce 3 -> 2 workers while training (pstrain-ctl): worker 2 retires at the boundary, the rest re-form, every sample once") {
  it::TempDir dir;
  shrink_run(dir.path(), "allreduce");
}

TEST_CASE("allreduce 3 -> 2 workers while worker 2 straggles, and across checkpoints: every sample once") {
  it::TempDir dir;
  shrink_run(dir.path(), "straggler", {"--set", "workload.straggler_rank=2", "--set", "workload.straggler_slowdown=4"});
  shrink_run(dir.path(), "checkpoints", {"--set", "checkpoint.interval_steps=7"});
}

TEST_CASE("allreduce: a shrink, then worker 1 killed with SIGKILL (on_worker_failure continue): retired, then dropped, the run ends well") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  it::LaunchProcess p(elastic_args(run, {"--set", "cluster.on_worker_failure=\"continue\"", "--set",
                                         "cluster.heartbeat_timeout_ms=1500"}),
                      dir.path() / "out.txt");
  start_and_shrink(p, run, dir.path() / "ctl.txt");
  // Killed once the collective of 0 and 1 is formed and resynced (a member
  // lost during the re-formation is noticed only at cluster.timeout_ms: the
  // rendezvous waits for its keys).
  const bool retired = it::wait_until(
      [&] {
        return it::contains(it::read_file(run / "logs/scheduler.log"), "worker 2 retired") &&
               it::contains(it::read_file(run / "logs/worker-0.log"), "replicas took worker 0's weights") &&
               it::contains(it::read_file(run / "logs/worker-1.log"), "replicas took worker 0's weights");
      },
      std::chrono::seconds(120), "worker 2's retirement and the collective of 0 and 1");
  INFO(p.output());
  REQUIRE(retired);
  elastic::kill_worker1_then_end(p, run);
  elastic::check_retired_then_dropped(run);
  // Worker 0 re-formed twice: with 0,1 at the change, alone after the drop.
  const std::string log = it::read_file(run / "logs/worker-0.log");
  CHECK(it::contains(log, "to 0,1, this one rank 0 of 2, generation 1"));
  CHECK(it::contains(log, "re-formed the collective without the dropped worker(s): 1 workers (0)"));
}

TEST_CASE("allreduce 2 -> 4 -> 3 workers: joiners take worker 0's weights and optimizer state at the boundary, every sample once") {
  it::TempDir dir;
  grow_run(dir.path(), false);  // pstrain-ctl: the launcher starts the joiners
  grow_run(dir.path(), true);   // pstrain-worker --join by hand
}

TEST_CASE("allreduce 2 -> 4 -> 3 by hand with a checkpoint after every step: joins during checkpoints") {
  // Worker 0 writes each checkpoint's manifest after the step's collective
  // operation, so the others are often in the next step's allreduce when a
  // change comes (they answer there, and the boundary lies a step past the
  // one worker 0 answered); a second joiner's change may then come while
  // the first's boundary is still ahead: each worker takes that boundary
  // before it waits for the next decision (which needs the first joiner's
  // answer, given once it is in the collective).
  it::TempDir dir;
  grow_run(dir.path(), true, {"--set", "checkpoint.interval_steps=1", "--set", "checkpoint.keep=2"});
}
