// Failures inside elastic changes, with real processes (issue 29; docs/
// architecture.md, "Elastic membership" and the failure policy): a job of 2
// workers grows to 3 (pstrain-ctl: the launcher starts worker 2 with
// --join), and at the moment the joiner enters the job (the scheduler's
// "worker 2 entered the job" line: its boundary is decided, the others
// re-form or admit it) a worker is killed with kill -9: the joiner itself,
// or an existing member. Each case checks what a user reads: the exit code,
// summary.json (restarts, dropped workers, membership changes), the images
// each epoch trained (its step records), the launcher's lines, and that no
// process is left.
//  - "restart": the killed rank is started again with --rejoin (the joiner
//    too: it is a member after its boundary) and the job ends at its full
//    size, 3 workers in its last epoch;
//  - "continue": the job ends with the 2 left;
//  - allreduce: a member lost while the collective re-forms for the change
//    is noticed at its drop, not after cluster.timeout_ms (set to 180 s
//    there: the job ends well inside it).
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <map>
#include <sstream>

#include "tests/integration/elastic_util.h"
#include "tests/integration/launch_test_util.h"
#include "tools/launcher/restart_policy.h"
#include "tools/report/json_value.h"
#include "tools/report/metrics.h"

namespace {

namespace fs = std::filesystem;
namespace report = pstrain::report;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kSamples = 1024;  // configs/tiny_*.toml: synthetic_train, batch 32
constexpr int kEpochs = 40;  // seconds of training: a restarted rank is back long before the last epoch

// Images an epoch trains with `workers` members (the split pads the epoch to a multiple of them).
std::int64_t epoch_images(int workers) { return (kSamples + workers - 1) / workers * workers; }

struct Case {
  std::string mode;    // "sync" or "allreduce"
  std::string policy;  // cluster.on_worker_failure
  std::string victim;  // "worker-1" (a member from the start) or "worker-2" (the joiner)
  int timeout_ms = 60000;
};

std::vector<std::string> case_args(const fs::path& run, const Case& c) {
  const char* config = c.mode == "allreduce" ? "configs/tiny_allreduce.toml" : "configs/tiny_sync.toml";
  auto args = it::launch_args(it::kSourceDir / config, run);
  args.insert(args.end(), {"--set", "mode=\"" + c.mode + "\"", "--set", "cluster.workers=2", "--set",
                           "cluster.min_workers=2", "--set", "cluster.max_workers=3", "--set",
                           "workload.epochs=" + std::to_string(kEpochs), "--set", "output.trace=off", "--set",
                           "cluster.on_worker_failure=\"" + c.policy + "\"", "--set", "cluster.max_restarts=2",
                           "--set", "cluster.timeout_ms=" + std::to_string(c.timeout_ms), "--status-interval-s",
                           "1", "--quiet"});
  return args;
}

report::JsonValue summary_of(const fs::path& run) {
  return report::parse_json(it::read_file(run / "summary.json"), "summary.json");
}

// Per epoch, the images of every step record of workers 0..2 (a restarted
// rank's file holds its predecessor's records too).
std::map<std::int64_t, std::int64_t> images_per_epoch(const fs::path& run) {
  std::map<std::int64_t, std::int64_t> images;
  for (int w = 0; w < 3; ++w) {
    std::istringstream in(it::read_file(report::worker_metrics_path(run, w)));
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line.back() != '}' || !it::contains(line, "\"type\":\"step\"")) continue;  // a cut last line
      const report::JsonValue v = report::parse_json(line, "step record");
      images[static_cast<std::int64_t>(v.find("epoch")->as_number("epoch"))] +=
          static_cast<std::int64_t>(v.find("batch")->as_number("batch"));
    }
  }
  return images;
}

std::vector<int> ranks_in(const report::JsonValue& summary, const char* key, const char* field = nullptr) {
  std::vector<int> out;
  for (const report::JsonValue& v : summary.find(key)->items()) {
    out.push_back(static_cast<int>(field ? v.find(field)->as_number(field) : v.as_number(key)));
  }
  return out;
}

struct Run {
  fs::path dir;
  std::string output;
  int code = -1;
  double kill_to_exit_s = 0;
  pid_t victim = -1;
};

// The job of `c`: 2 workers, a grow to 3, the victim killed when worker 2 enters the job.
Run grow_and_kill(const fs::path& dir, const std::string& name, const Case& c) {
  Run r;
  r.dir = dir / name;
  it::LaunchProcess p(case_args(r.dir, c), dir / (name + "-out.txt"));
  REQUIRE(it::wait_until([&] { return it::count_lines(r.dir / "metrics/worker-0.jsonl") >= 3; },
                         std::chrono::seconds(120), "worker 0's first step"));
  const pid_t ctl = it::spawn({(it::kBinDir / "pstrain-ctl").string(), r.dir.string(), "workers", "3"}, {},
                              dir / (name + "-ctl.txt"));
  REQUIRE(it::wait_exit(ctl, std::chrono::seconds(30)) == std::optional<int>(0));
  const bool entered = it::wait_until(
      [&] { return it::contains(it::read_file(r.dir / "logs/scheduler.log"), "worker 2 entered the job at step"); },
      std::chrono::seconds(120), "worker 2's entry");
  INFO(p.output());
  REQUIRE(entered);
  std::map<std::string, pid_t> pids;
  REQUIRE(it::wait_until([&] { return (pids = it::read_pids(r.dir)).count(c.victim) != 0; }, std::chrono::seconds(30),
                         c.victim + " in pids.txt"));
  r.victim = pids.at(c.victim);
  REQUIRE(kill(r.victim, SIGKILL) == 0);
  const auto killed = Clock::now();
  const auto exit = p.wait(std::chrono::seconds(280));
  r.kill_to_exit_s = std::chrono::duration<double>(Clock::now() - killed).count();
  r.output = p.output();
  REQUIRE(exit.has_value());
  r.code = exit->signaled ? 128 + exit->code : exit->code;
  return r;
}

// No process of the job is left: each pid the launcher recorded, and the victim.
void check_nothing_left(const Run& r) {
  std::vector<pid_t> pids{r.victim};
  for (const auto& [name, pid] : it::read_pids(r.dir)) pids.push_back(pid);
  for (const pid_t pid : pids) {
    CAPTURE(pid);
    CHECK(it::wait_until([&] { return it::process_gone(pid); }, std::chrono::seconds(30), "the process to be gone"));
  }
}

// "restart": the victim's rank came back (--rejoin), the job ended at 3 workers.
void check_restarted(const Run& r, int rank, bool joiner) {
  INFO(r.output);
  CHECK(r.code == 0);
  const std::string name = "worker " + std::to_string(rank);
  if (joiner) CHECK(it::contains(r.output, name + " (a joiner) was killed by signal 9"));
  CHECK(it::contains(r.output, "restarting it (1 of 2, cluster.on_worker_failure = \"restart\")"));
  // The status line shows the rank (a joiner's slot too) to the end; "wR restarting" shows while it
  // is away, which may be shorter than the status line's interval (not checked).
  CHECK(it::contains(r.output, "| w" + std::to_string(rank) + " done"));
  const report::JsonValue summary = summary_of(r.dir);
  CHECK(ranks_in(summary, "restarts", "rank") == std::vector<int>{rank});
  CHECK(ranks_in(summary, "dropped_workers").empty());
  const report::WorkerMetrics m = report::read_worker_metrics(report::worker_metrics_path(r.dir, rank), rank);
  CHECK(m.rejoins.size() == 1);
  REQUIRE(m.end.has_value());
  CHECK_FALSE(m.end->retired);
  const report::JsonValue* changes = summary.find("membership_changes");
  REQUIRE(changes != nullptr);
  REQUIRE_FALSE(changes->items().empty());
  CHECK(changes->items().front().find("reason")->as_string("reason") == "ctl");
  const report::JsonValue& last = changes->items().back();
  // Back by a "rejoin" change, or before the grow's boundary (no change shows the drop then).
  const std::string reason = last.find("reason")->as_string("reason");
  CHECK((reason == "rejoin" || reason == "ctl"));
  CHECK(last.find("new_workers")->as_number("new_workers") == 3);
  REQUIRE(last.find("epoch")->as_number("epoch") < kEpochs - 1);  // back before the last epoch
  const auto images = images_per_epoch(r.dir);
  REQUIRE(images.size() == kEpochs);
  for (const auto& [epoch, n] : images) CHECK(n > 0);
  CHECK(images.rbegin()->second == epoch_images(3));  // the last epoch at the job's full size
  CHECK(summary.find("final_test_accuracy")->as_number("accuracy") >= 0.8);
  check_nothing_left(r);
}

// "continue": the job ended with the 2 workers left, `rank` dropped.
void check_went_on(const Run& r, int rank) {
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK_FALSE(it::contains(r.output, "restarting it"));
  const report::JsonValue summary = summary_of(r.dir);
  CHECK(ranks_in(summary, "restarts", "rank").empty());
  // A joiner killed before it wrote a step record is not in the summary's workers (its metrics
  // file holds none): the membership changes show its drop.
  const std::vector<int> dropped = ranks_in(summary, "dropped_workers");
  CHECK((dropped == std::vector<int>{rank} || (rank == 2 && dropped.empty())));
  const report::JsonValue* changes = summary.find("membership_changes");
  REQUIRE(changes != nullptr);
  REQUIRE(changes->items().size() >= 2);
  CHECK(changes->items().front().find("reason")->as_string("reason") == "ctl");
  CHECK(changes->items().back().find("reason")->as_string("reason") == "drop");
  CHECK(changes->items().back().find("new_workers")->as_number("new_workers") == 2);
  const auto images = images_per_epoch(r.dir);
  REQUIRE(images.size() == kEpochs);
  for (const auto& [epoch, n] : images) CHECK(n > 0);
  CHECK(images.rbegin()->second == epoch_images(2));
  CHECK(summary.find("final_test_accuracy")->as_number("accuracy") >= 0.8);
  check_nothing_left(r);
}

}  // namespace

TEST_CASE("JoinerRestarts: a joiner's failed exit is due only once the scheduler declared that process failed") {
  using pstrain::launcher::JoinerRestarts;
  JoinerRestarts j;
  j.exited({"worker 2", 100, false, "was killed by signal 9"});
  CHECK(j.take_due().empty());  // before its boundary nothing is declared: an abandoned join
  CHECK_FALSE(j.member("worker 2"));
  j.declared("worker 2", 99);   // an earlier process of the slot: not this one
  j.declared("worker 3", 100);  // another slot
  CHECK(j.take_due().empty());
  j.declared("worker 2", 100);
  const std::vector<JoinerRestarts::Exit> due = j.take_due();
  REQUIRE(due.size() == 1);
  CHECK(due[0].name == "worker 2");
  CHECK(due[0].text == "was killed by signal 9");
  CHECK(j.member("worker 2"));
  CHECK(j.take_due().empty());  // once
  j.declared("worker 4", 7);    // the declaration first, then the exit; over ssh matched by name
  j.exited({"worker 4", 12345, true, "exited with code 1"});
  REQUIRE(j.take_due().size() == 1);
  CHECK(j.member("worker 4"));
}

TEST_CASE("a PS grow under \"restart\": a joiner killed after its boundary is restarted (--rejoin), the job ends with 3") {
  it::TempDir dir;
  check_restarted(grow_and_kill(dir.path(), "joiner", Case{"sync", "restart", "worker-2"}), 2, true);
}

TEST_CASE("a PS grow under \"restart\": a member killed as the joiner enters is restarted, the job ends with 3") {
  it::TempDir dir;
  check_restarted(grow_and_kill(dir.path(), "member", Case{"sync", "restart", "worker-1"}), 1, false);
}

TEST_CASE("a PS grow under \"continue\": a joiner killed after its boundary is dropped, the job ends with 2") {
  it::TempDir dir;
  check_went_on(grow_and_kill(dir.path(), "joiner", Case{"sync", "continue", "worker-2"}), 2);
}

TEST_CASE("an allreduce grow under \"restart\": a joiner killed after its boundary is restarted and taken back") {
  it::TempDir dir;
  check_restarted(grow_and_kill(dir.path(), "joiner", Case{"allreduce", "restart", "worker-2"}), 2, true);
}

TEST_CASE("an allreduce grow under \"restart\": a member killed while the collective re-forms is restarted") {
  it::TempDir dir;
  check_restarted(grow_and_kill(dir.path(), "member", Case{"allreduce", "restart", "worker-1"}), 1, false);
}

// cluster.timeout_ms = 180 s: before the fix the survivors' rendezvous of the
// grown collective waited for the dead member that long (and the joiner's
// too), then the job failed.
TEST_CASE("an allreduce grow under \"continue\": a member lost while the collective re-forms is noticed at its drop") {
  it::TempDir dir;
  const Run r = grow_and_kill(dir.path(), "member", Case{"allreduce", "continue", "worker-1", 180000});
  CHECK(r.kill_to_exit_s < 90.0);
  check_went_on(r, 1);
  CHECK(it::contains(it::read_file(r.dir / "logs/worker-0.log"), "re-formed the collective without the dropped worker(s): 2 workers (0, 2)"));
}

// A joiner killed before its boundary, under "continue": its join is
// abandoned (docs/architecture.md: the slot is vacant again, not a failure
// of the job), and the job goes on with its 2 workers, every epoch's samples
// trained once. Workers 0 and 1 are stopped (SIGSTOP; heartbeat timeout
// 120 s) from before the grow until the joiner is gone: no boundary can be
// decided without their answers, so the joiner dies before it whatever the
// machine's load.
TEST_CASE("a PS grow under \"continue\": a joiner killed before its boundary is abandoned, the job ends with 2") {
  it::TempDir dir;
  const fs::path run = dir.path() / "abandoned";
  std::vector<std::string> args = case_args(run, Case{"sync", "continue", "worker-2"});
  args.insert(args.end(), {"--set", "cluster.heartbeat_timeout_ms=120000"});
  it::LaunchProcess p(args, dir.path() / "abandoned-out.txt");
  REQUIRE(it::wait_until([&] { return it::count_lines(run / "metrics/worker-0.jsonl") >= 3; },
                         std::chrono::seconds(120), "worker 0's first step"));
  std::map<std::string, pid_t> pids = it::read_pids(run);
  const std::vector<pid_t> members{pids.at("worker-0"), pids.at("worker-1")};
  for (const pid_t pid : members) REQUIRE(kill(pid, SIGSTOP) == 0);
  const pid_t ctl = it::spawn({(it::kBinDir / "pstrain-ctl").string(), run.string(), "workers", "3"}, {},
                              dir.path() / "abandoned-ctl.txt");
  const bool asked = it::wait_exit(ctl, std::chrono::seconds(30)) == std::optional<int>(0);
  const bool registered = asked && it::wait_until(
      [&] { return it::contains(it::read_file(run / "logs/scheduler.log"), "worker 2 joins from"); },
      std::chrono::seconds(120), "worker 2's registration");
  const bool started = registered && it::wait_until([&] { return (pids = it::read_pids(run)).count("worker-2") != 0; },
                                                    std::chrono::seconds(30), "worker-2 in pids.txt");
  const pid_t joiner = started ? pids.at("worker-2") : -1;
  const bool killed = started && kill(joiner, SIGKILL) == 0;
  const bool abandoned = killed && it::wait_until(
      [&] { return it::contains(it::read_file(run / "logs/scheduler.log"), "the join of worker 2 was abandoned"); },
      std::chrono::seconds(60), "the abandoned join");
  for (const pid_t pid : members) kill(pid, SIGCONT);  // before any REQUIRE: the job must not stay stopped
  INFO(p.output());
  REQUIRE(abandoned);
  const auto exit = p.wait(std::chrono::seconds(280));
  REQUIRE(exit.has_value());
  const std::string output = p.output();
  INFO(output);
  CHECK(exit->code == 0);
  CHECK_FALSE(exit->signaled);
  CHECK(it::contains(output, "worker 2 (a joiner) was killed by signal 9 (Killed): told the scheduler"));
  CHECK_FALSE(it::contains(output, "restarting it"));
  const std::string scheduler_log = it::read_file(run / "logs/scheduler.log");
  CHECK_FALSE(it::contains(scheduler_log, "worker 2 entered the job"));
  CHECK(it::contains(scheduler_log, "its slot is vacant again; the job goes on with 2 workers"));
  const report::JsonValue summary = summary_of(run);
  CHECK(ranks_in(summary, "restarts", "rank").empty());
  CHECK(ranks_in(summary, "dropped_workers").empty());  // abandoned, not dropped: it never was a member
  CHECK(summary.find("workers")->as_number("workers") == 2);
  // The change went on without it (2 -> 2, the scheduler's log): the summary shows no growth, and
  // names the abandoned join (the scheduler's record): its rank and why, in summary.json, the
  // closing summary's Membership section and the status line.
  for (const report::JsonValue& change : summary.find("membership_changes")->items()) {
    CHECK(change.find("new_workers")->as_number("new_workers") == 2);
  }
  const report::JsonValue* abandoned_joins = summary.find("abandoned_joins");
  REQUIRE(abandoned_joins != nullptr);
  REQUIRE(abandoned_joins->items().size() == 1);
  const report::JsonValue& join = abandoned_joins->items().front();
  CHECK(join.find("rank")->as_number("rank") == 2);
  const std::string why = join.find("reason")->as_string("reason");
  CHECK(it::contains(why, "worker 2 ("));
  CHECK(it::contains(why, "was killed by signal 9"));
  CHECK(it::contains(output, "- worker 2 (join abandoned), "));
  CHECK(it::contains(output, "| w2 join abandoned"));
  const auto images = images_per_epoch(run);
  REQUIRE(images.size() == kEpochs);
  for (const auto& [epoch, n] : images) {
    CAPTURE(epoch);
    CHECK(n == epoch_images(2));
  }
  elastic::check_coverage(elastic::read_coverage(run, 3, true), kEpochs, 3,
                          [](int) { return std::vector<pstrain::EpochSegment>{{0, {0, 1}}}; });
  CHECK(summary.find("final_test_accuracy")->as_number("accuracy") >= 0.8);
  Run r;
  r.dir = run;
  r.victim = joiner;
  check_nothing_left(r);
}

// A shrink decided while its retiree is stopped, under "restart" (the issue's
// repro): worker 2 is stopped (SIGSTOP) and 2 workers are asked for at once.
// The change waits for worker 2's answer until the heartbeat timeout drops
// it, and is decided with workers 0 and 1; the launcher fences worker 2 and
// restarts it. Its new process must not undo the shrink: the scheduler tells
// it to leave (retired while it was down), it exits 0 retired, and the job
// ends with 2 workers. Before, the new process trained the epoch the others
// had begun without it and was a member from the next one: 3 workers again.
namespace {

void shrink_with_stopped_retiree(const std::string& mode) {
  it::TempDir dir;
  const fs::path run = dir.path() / "stopped";
  std::vector<std::string> args = case_args(run, Case{mode, "restart", "worker-2"});
  // Worker 0 computes 8 times slower (seconds of training, not two): worker 2 is stopped mid-run.
  args.insert(args.end(), {"--set", "cluster.workers=3", "--set", "cluster.heartbeat_timeout_ms=2000", "--set",
                           "workload.straggler_rank=0", "--set", "workload.straggler_slowdown=8"});
  it::LaunchProcess p(args, dir.path() / "stopped-out.txt");
  REQUIRE(it::wait_until([&] { return it::count_lines(run / "metrics/worker-0.jsonl") >= 3; },
                         std::chrono::seconds(120), "worker 0's first step"));
  const pid_t stopped = it::read_pids(run).at("worker-2");
  REQUIRE(kill(stopped, SIGSTOP) == 0);
  REQUIRE_FALSE(it::contains(it::read_file(run / "metrics/worker-2.jsonl"), "\"type\":\"end\""));  // mid-run
  const pid_t ctl = it::spawn({(it::kBinDir / "pstrain-ctl").string(), run.string(), "workers", "2"}, {},
                              dir.path() / "stopped-ctl.txt");
  REQUIRE(it::wait_exit(ctl, std::chrono::seconds(30)) == std::optional<int>(0));
  const auto exit = p.wait(std::chrono::seconds(280));
  REQUIRE(exit.has_value());
  const std::string output = p.output();
  INFO(output);
  CHECK(exit->code == 0);
  CHECK_FALSE(exit->signaled);
  CHECK(it::contains(output, it::fenced_line("worker 2", stopped)));
  CHECK(it::contains(output, "worker 2 was killed by signal 9 (Killed): restarting it (1 of 2"));
  CHECK(it::contains(output, "| w2 retired"));
  CHECK_FALSE(it::contains(output, "done: 0 steps"));  // the retired rank does not hold the status line's head
  CHECK(it::contains(output, "- worker 2's new process left at once"));
  CHECK_FALSE(it::contains(output, "restarting it (2 of 2"));  // its new process exited 0: not restarted again
  const std::string scheduler_log = it::read_file(run / "logs/scheduler.log");
  CHECK(it::contains(scheduler_log, "worker 2 retired while it was down (membership change 1 left it out)"));
  CHECK_FALSE(it::contains(scheduler_log, "worker 2 rejoined the job"));
  CHECK(it::contains(it::read_file(run / "logs/worker-2.log"), "this rank was retired while it was down"));
  const report::JsonValue summary = summary_of(run);
  // summary.json: the restart, with the change that retired the rank; worker 2 retired, its first
  // process's images counted.
  const report::JsonValue* restarts = summary.find("restarts");
  REQUIRE(restarts != nullptr);
  REQUIRE(restarts->items().size() == 1);
  CHECK(restarts->items().front().find("rank")->as_number("rank") == 2);
  CHECK(restarts->items().front().find("retired_by_change")->as_number("retired_by_change") == 1);
  // Its images: its first process's step records (none when it was stopped before its first step).
  const report::WorkerMetrics m2 = report::read_worker_metrics(report::worker_metrics_path(run, 2), 2);
  REQUIRE(m2.rejoins.size() == 1);
  CHECK(m2.rejoins.front().steps_before == m2.steps.size());  // the new process trained nothing
  std::int64_t first_images = 0;
  for (const report::StepRecord& r : m2.steps) first_images += r.batch;
  bool seen = false;
  for (const report::JsonValue& w : summary.find("per_worker")->items()) {
    if (w.find("rank")->as_number("rank") != 2) continue;
    seen = true;
    CHECK(w.find("status")->as_string("status") == "retired");
    CHECK(w.find("images")->as_number("images") == static_cast<double>(first_images));
  }
  CHECK(seen);
  for (const report::JsonValue& change : summary.find("membership_changes")->items()) {
    CHECK(change.find("reason")->as_string("reason") != "rejoin");
  }
  const report::JsonValue& last = summary.find("membership_changes")->items().back();
  CHECK(last.find("new_workers")->as_number("new_workers") == 2);
  const auto images = images_per_epoch(run);
  REQUIRE(images.size() == kEpochs);
  for (const auto& [epoch, n] : images) CHECK(n > 0);
  // From the epoch after the change on, 2 workers share every epoch: nobody came back.
  const auto change_epoch = static_cast<std::int64_t>(last.find("epoch")->as_number("epoch"));
  for (const auto& [epoch, n] : images) {
    CAPTURE(epoch);
    if (epoch > change_epoch) CHECK(n == epoch_images(2));
  }
  CHECK(summary.find("final_test_accuracy")->as_number("accuracy") >= 0.8);
  Run r;
  r.dir = run;
  r.victim = stopped;
  check_nothing_left(r);
}

}  // namespace

TEST_CASE("a PS shrink under \"restart\" whose retiree is stopped: its new process leaves retired, the job ends with 2") {
  shrink_with_stopped_retiree("sync");
}

// Allreduce: the survivors re-form the collective without worker 2 at its drop, and its new
// process (a --rejoin, as in the PS modes) is told to leave before it waits to be taken back.
TEST_CASE("an allreduce shrink under \"restart\" whose retiree is stopped: its new process leaves retired") {
  shrink_with_stopped_retiree("allreduce");
}
