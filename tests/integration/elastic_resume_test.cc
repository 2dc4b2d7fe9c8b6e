// Resuming an elastic job at the membership its checkpoint was taken with
// (issue 29; docs/architecture.md, "Checkpoints and resume"), with real
// processes through `launch`:
//  - sync and ssp: 2 -> 4 workers (pstrain-ctl), a checkpoint every 5 steps,
//    the launcher interrupted (SIGINT) once a checkpoint holds the 4 members;
//    `launch --resume` runs the 4 to the end: the summary's change, every
//    worker's steps to the end, the images of every epoch (each sample once,
//    plus the split's padding), each epoch's coverage (the interrupted one
//    from the resumed step on) and the accuracy within the band of the run
//    with 2 workers throughout;
//  - 4 -> 3 (worker 3 retires), then a resume: ranks 0-2 only;
//  - 3 -> 2, then a worker joined by hand into rank 3: the resume starts
//    ranks 0, 1 and 3, and pstrain-ctl still grows the resumed job to 4;
//  - allreduce 2 -> 3 and 3 -> 2 the same way: the leader's manifest records
//    the members, the resumed collective is formed over them; and the plan
//    of it without processes (the leader's manifest, the launcher's ranks);
//  - the refusals: members past cluster.max_workers, an incomplete record.
// In the grows, workers 0 and 1 are held (SIGSTOP) from the request until the
// joiners have registered: the job cannot end before its grow.
// The grow in ssp as well: a membership change met a checkpoint's barrier
// there (a worker, or a joiner at its first step, waiting in it answers the
// change now: docs/architecture.md, "Elastic membership"; before, 1 in 8 to
// 14 ssp runs deadlocked). Not in async: the resume's plan in every mode is
// the same code, tested without processes in tests/nn/elastic_resume_plan_test.cc.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/checkpoint/checkpoint.h"
#include "common/checkpoint/checkpoint_members.h"
#include "tests/integration/launch_test_util.h"
#include "tests/support/throw_text.h"
#include "tools/launcher/launch_plan.h"
#include "tools/report/json_value.h"
#include "tools/report/metrics.h"
#include "worker/train/epoch_split.h"
#include "worker/train/worker_checkpoint.h"

namespace {

namespace fs = std::filesystem;
namespace report = pstrain::report;
using pstrain::EpochCoverage;
using pstrain::EpochSegment;
using pstrain::EpochSplit;

constexpr std::int64_t kSamples = 1024;  // configs/tiny_sync.toml: synthetic_train, seed 1, batch 32
constexpr int kBatch = 32;
constexpr std::uint64_t kSeed = 1;
constexpr int kEpochs = 24;  // about 300 steps at 2 workers
constexpr int kRanks = 4;    // cluster.max_workers

std::vector<std::string> job_args(const fs::path& run, const std::string& mode, int workers,
                                  const std::vector<std::string>& extra = {}) {
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "mode=\"" + mode + "\"", "--set", "cluster.workers=" + std::to_string(workers),
                           "--set", "cluster.min_workers=2", "--set", "cluster.max_workers=4", "--set",
                           "workload.epochs=" + std::to_string(kEpochs), "--set", "output.trace=off", "--quiet"});
  const std::vector<std::string> rate = it::tiny_async_rate(mode);
  args.insert(args.end(), rate.begin(), rate.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::string> resume_args(const fs::path& run, const std::vector<std::string>& sets = {}) {
  std::vector<std::string> args{"--resume", run.string(), "--bin-dir", it::kBinDir.string(), "--timeout-s", "300",
                                "--quiet"};
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  return args;
}

int run_ctl(const fs::path& run, int count, const fs::path& out) {
  const pid_t pid =
      it::spawn({(it::kBinDir / "pstrain-ctl").string(), run.string(), "workers", std::to_string(count)}, {}, out);
  const std::optional<int> code = it::wait_exit(pid, std::chrono::seconds(30));
  REQUIRE(code.has_value());
  return *code;
}

report::JsonValue summary_of(const fs::path& run) {
  return report::parse_json(it::read_file(run / "summary.json"), "summary.json");
}

double final_accuracy(const fs::path& run) { return summary_of(run).find("final_test_accuracy")->as_number("number"); }

struct Change {
  std::int64_t step = 0;     // the job's step it took effect at
  std::vector<int> members;  // from there
};

// Each epoch's segments and first step, for a run starting with `initial` whose changes are `changes`.
struct Plan {
  std::vector<std::vector<EpochSegment>> epochs;
  std::vector<std::int64_t> starts;  // each epoch's first step (the job's numbering)
  std::int64_t total = 0;
};

Plan plan_of(const std::vector<int>& initial, const std::vector<Change>& changes) {
  Plan plan;
  std::int64_t start = 0;
  std::vector<int> members = initial;
  std::size_t next = 0;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    std::vector<EpochSegment> segments{{0, members}};
    for (;;) {
      const std::int64_t end = start + EpochSplit(kSamples, kBatch, kSeed, epoch, segments, 0).steps();
      if (next >= changes.size() || changes[next].step >= end) break;
      REQUIRE(changes[next].step > start);  // within the epoch, after its first step
      members = changes[next].members;
      segments.push_back(EpochSegment{changes[next].step - start, members});
      ++next;
    }
    plan.starts.push_back(start);
    start += EpochSplit(kSamples, kBatch, kSeed, epoch, segments, 0).steps();
    plan.epochs.push_back(segments);
  }
  plan.total = start;
  CHECK(next == changes.size());
  return plan;
}

// Every sample of every epoch once (plus the split's padding): the images
// all workers trained (their end records, counters restored from the
// checkpoint) are the split's; the coverage records of each epoch are what
// the split gives, from step `resumed_at` on in the epoch the resume began
// in (the interrupted processes' record of its earlier part is gone with them).
// `images`: false where a rank ran two processes (retired, then joined again:
// its end record counts the second one's images only).
// A rank the resume did not start (retired before the checkpoint) keeps its records of the interrupted epoch.
void check_epochs(const fs::path& run, const Plan& plan, std::int64_t resumed_at, const std::vector<int>& resumed,
                  bool images_too = true) {
  std::map<std::int64_t, EpochCoverage> trained;
  std::int64_t images = 0;
  for (int rank = 0; rank < kRanks; ++rank) {
    if (!fs::exists(report::worker_metrics_path(run, rank))) continue;
    const report::WorkerMetrics m = report::read_worker_metrics(report::worker_metrics_path(run, rank), rank);
    for (const report::CoverageRecord& c : m.coverage) {
      trained[c.epoch].add(EpochCoverage{c.samples, std::stoull(c.checksum, nullptr, 16)});
    }
    REQUIRE(m.end.has_value());
    images += m.end->images;
  }
  std::int64_t expected_images = 0;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    CAPTURE(epoch);
    const auto e = static_cast<std::size_t>(epoch);
    const std::int64_t start = plan.starts[e];
    EpochCoverage expected;
    std::set<std::int64_t> seen;
    for (int rank = 0; rank < kRanks; ++rank) {
      const EpochSplit split(kSamples, kBatch, kSeed, epoch, plan.epochs[e], rank);
      for (std::int64_t b = 0; b < split.steps(); ++b) {
        if (!split.shard_at(b).member) continue;
        seen.insert(split.batch(b).begin(), split.batch(b).end());
        expected_images += static_cast<std::int64_t>(split.batch(b).size());
        const bool kept = std::find(resumed.begin(), resumed.end(), rank) == resumed.end();
        if (kept || start + b >= resumed_at || start + split.steps() <= resumed_at) expected.add(split.batch(b));
      }
    }
    CHECK(static_cast<std::int64_t>(seen.size()) == kSamples);
    std::string records;  // what each rank wrote of this epoch, for a failure's message
    for (int rank = 0; rank < kRanks; ++rank) {
      if (!fs::exists(report::worker_metrics_path(run, rank))) continue;
      for (const auto& c : report::read_worker_metrics(report::worker_metrics_path(run, rank), rank).coverage) {
        if (c.epoch != epoch) continue;
        records += " w" + std::to_string(rank) + ": first_step " + std::to_string(c.first_step) + ", steps " +
                   std::to_string(c.steps) + ", samples " + std::to_string(c.samples) + ";";
      }
    }
    INFO("epoch starts at " << start << ", resumed at " << resumed_at << "; records:" << records);
    CHECK(trained[epoch] == expected);
  }
  if (!images_too) return;
  CHECK(images == expected_images);
  CHECK(images >= kEpochs * kSamples);
}

// The newest complete checkpoint's recorded members (empty: none yet).
std::vector<int> newest_members(const fs::path& run) {
  const auto newest = pstrain::find_newest_checkpoint(run / "checkpoints");
  return newest ? newest->manifest.members : std::vector<int>{};
}

// Stops the job of `p` (SIGINT to its launcher) once its newest complete
// checkpoint records `members`; returns the step `launch --resume` starts at.
std::int64_t interrupt_at(const fs::path& run, it::LaunchProcess& p, const std::vector<int>& members) {
  const bool reached = it::wait_until([&] { return newest_members(run) == members; }, std::chrono::seconds(180),
                                      "a checkpoint with the new members");
  kill(p.pid(), SIGINT);
  const auto exit = p.wait(std::chrono::seconds(60));
  INFO(p.output());
  REQUIRE(reached);
  REQUIRE(exit.has_value());
  REQUIRE(exit->code != 0);  // interrupted before its end
  const auto newest = pstrain::find_newest_checkpoint(run / "checkpoints");
  REQUIRE(newest.has_value());
  REQUIRE(newest->manifest.members == members);
  return newest->manifest.step;
}

std::vector<int> first(int n) {
  std::vector<int> r;
  for (int i = 0; i < n; ++i) r.push_back(i);
  return r;
}

// The summary's changes: each one's step, its members (ranks 0..new_workers-1:
// a grow fills the lowest slots, a shrink retires the highest) and reason.
std::vector<Change> changes_of(const fs::path& run, std::vector<std::string>& reasons) {
  const std::string text = it::read_file(run / "summary.json");
  const auto at = text.find("\"membership_changes\"");
  INFO("summary.json: " << (at == std::string::npos ? text : text.substr(at, 600)));
  std::vector<Change> out;
  const report::JsonValue summary = summary_of(run);
  const report::JsonValue* list = summary.find("membership_changes");
  REQUIRE(list != nullptr);
  for (const report::JsonValue& c : list->items()) {
    out.push_back(Change{static_cast<std::int64_t>(c.find("step")->as_number("step")),
                         first(static_cast<int>(c.find("new_workers")->as_number("new_workers")))});
    reasons.push_back(c.find("reason")->as_string("reason"));
  }
  return out;
}

// Every rank in `members` ran to the end (its end record at the plan's last step, not retired).
void check_ran_to_end(const fs::path& run, const std::vector<int>& members, std::int64_t total) {
  for (const int rank : members) {
    CAPTURE(rank);
    const report::WorkerMetrics m = report::read_worker_metrics(report::worker_metrics_path(run, rank), rank);
    REQUIRE(m.end.has_value());
    CHECK_FALSE(m.end->retired);
    CHECK(m.end->steps == total);
  }
}

// 2 -> `grown` (pstrain-ctl), interrupted after a checkpoint of the grown members, resumed to the end.
void grow_then_resume(const fs::path& dir, const std::string& mode, int grown = 4) {
  CAPTURE(mode);
  const fs::path reference = dir / (mode + "-fixed");
  {
    const it::Result fixed = it::run_launch(job_args(reference, mode, 2), dir);
    INFO(fixed.output);
    REQUIRE(fixed.exit.code == 0);
  }
  const fs::path run = dir / mode;
  std::int64_t resumed_at = 0;
  {
    // Workers 0 and 1 are held (SIGSTOP; heartbeat timeout 120 s) from the request until every
    // joiner has registered, so the job cannot end before the grow whatever the machine's load
    // (an allreduce step of the tiny model takes a few ms: 384 steps in about 3 s here).
    it::LaunchProcess p(job_args(run, mode, 2, {"--set", "checkpoint.interval_steps=5", "--set",
                                                "cluster.heartbeat_timeout_ms=120000"}),
                        dir / (mode + "-out.txt"));
    REQUIRE(it::wait_until([&] { return it::count_lines(run / "metrics/worker-0.jsonl") >= 3; },
                           std::chrono::seconds(120), "worker 0's first step"));
    const std::map<std::string, pid_t> pids = it::read_pids(run);
    const std::vector<pid_t> members{pids.at("worker-0"), pids.at("worker-1")};
    for (const pid_t pid : members) REQUIRE(kill(pid, SIGSTOP) == 0);
    const bool asked = run_ctl(run, grown, dir / (mode + "-ctl.txt")) == 0;
    const bool registered = asked && it::wait_until(
        [&] {
          const std::string log = it::read_file(run / "logs/scheduler.log");
          for (int r = 2; r < grown; ++r) {
            if (!it::contains(log, "worker " + std::to_string(r) + " joins from")) return false;
          }
          return true;
        },
        std::chrono::seconds(120), "the joiners' registrations");
    for (const pid_t pid : members) kill(pid, SIGCONT);  // before any REQUIRE: the job must not stay stopped
    INFO(p.output());
    REQUIRE(registered);
    resumed_at = interrupt_at(run, p, first(grown));
  }
  const it::Result resumed = it::run_launch(resume_args(run), dir);
  INFO(resumed.output);
  REQUIRE(resumed.exit.code == 0);
  CHECK(it::contains(resumed.output, "resuming from"));
  const std::string scheduler_log = it::read_file(run / "logs/scheduler.log");
  CHECK(it::contains(scheduler_log, "for " + std::string(mode == "allreduce" ? "0" : "2") + " servers and " +
                                        std::to_string(grown) + " workers"));

  std::vector<std::string> reasons;
  const std::vector<Change> changes = changes_of(run, reasons);
  // The joiners enter at one boundary, or at two when the second registered after the first's was decided.
  REQUIRE((changes.size() == 1 || changes.size() == 2));
  CHECK(changes.back().members == first(grown));
  CHECK(changes.back().step <= resumed_at);
  for (const std::string& reason : reasons) CHECK(reason == "ctl");
  const Plan plan = plan_of(first(2), changes);
  check_ran_to_end(run, first(grown), plan.total);
  check_epochs(run, plan, resumed_at, first(grown));
  CHECK(final_accuracy(run) >= final_accuracy(reference) - 0.15);
}

}  // namespace

TEST_CASE("launch --resume of a job grown 2 -> 4 runs the 4 members to the end (sync)") {
  it::TempDir dir;
  grow_then_resume(dir.path(), "sync");
}

TEST_CASE("launch --resume of a job grown 2 -> 4 runs the 4 members to the end (ssp)") {
  it::TempDir dir;
  grow_then_resume(dir.path(), "ssp");
}

// Allreduce (issue 29): the leader's manifest records the collective's members, the launcher starts
// them, the scheduler's rendezvous waits for them and their start-up forms the collective over them
// (before, such a checkpoint was refused: allreduce manifests recorded no membership).
TEST_CASE("launch --resume of an allreduce job grown 2 -> 3 runs the 3 members to the end") {
  it::TempDir dir;
  grow_then_resume(dir.path(), "allreduce", 3);
}

// `from` -> `from` - 1 (pstrain-ctl: the highest rank retires), interrupted after a checkpoint of
// the members left, resumed: ranks 0..from-2 only.
void shrink_then_resume(const fs::path& dir, const std::string& mode, int from) {
  CAPTURE(mode);
  const fs::path run = dir / "run";
  const int retiree = from - 1;
  const std::string retiree_file = "metrics/worker-" + std::to_string(retiree) + ".jsonl";
  std::int64_t resumed_at = 0;
  {
    it::LaunchProcess p(job_args(run, mode, from, {"--set", "checkpoint.interval_steps=5"}), dir / "out.txt");
    REQUIRE(it::wait_until([&] { return it::count_lines(run / "metrics/worker-0.jsonl") >= 3; },
                           std::chrono::seconds(120), "worker 0's first step"));
    CHECK(run_ctl(run, from - 1, dir / "ctl.txt") == 0);
    // The retiree has written its end record and exited (an interrupt in between would leave its file without one).
    CHECK(it::wait_until([&] { return it::contains(it::read_file(run / retiree_file), "\"type\":\"end\""); },
                         std::chrono::seconds(120), "the retiree's end record"));
    resumed_at = interrupt_at(run, p, first(from - 1));
  }
  const it::Result resumed = it::run_launch(resume_args(run), dir);
  INFO(resumed.output);
  REQUIRE(resumed.exit.code == 0);
  CHECK(it::contains(it::read_file(run / "logs/scheduler.log"),
                     "for " + std::string(mode == "allreduce" ? "0" : "2") + " servers and " +
                         std::to_string(from - 1) + " workers"));
  std::vector<std::string> reasons;
  const std::vector<Change> changes = changes_of(run, reasons);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].members == first(from - 1));
  CHECK(reasons == std::vector<std::string>{"retire"});
  const Plan plan = plan_of(first(from), changes);
  check_ran_to_end(run, first(from - 1), plan.total);
  const report::WorkerMetrics w = report::read_worker_metrics(report::worker_metrics_path(run, retiree), retiree);
  REQUIRE(w.end.has_value());
  CHECK(w.end->retired);  // its record from before the checkpoint: it was not started again
  CHECK(w.end->steps == changes[0].step);
  check_epochs(run, plan, resumed_at, first(from - 1));
}

TEST_CASE("launch --resume of a job shrunk 4 -> 3 starts ranks 0-2 only") {
  it::TempDir dir;
  shrink_then_resume(dir.path(), "sync", 4);
}

TEST_CASE("launch --resume of an allreduce job shrunk 3 -> 2 starts ranks 0 and 1 only") {
  it::TempDir dir;
  shrink_then_resume(dir.path(), "allreduce", 3);
}

TEST_CASE("resume_members: the checkpoint's members, 0..workers-1 without a record, refusals with the reason") {
  pstrain::ClusterConfig cl;
  cl.num_workers = 2;
  cl.min_workers = 2;
  cl.max_workers = 4;
  pstrain::CheckpointManifest m;
  m.step = 40;
  for (const char* part : {"server-0.ckpt", "worker-0.ckpt", "worker-1.ckpt", "worker-3.ckpt"}) {
    m.parts.push_back({part, 10, 0});
  }
  CHECK(pstrain::resume_members(m, cl) == std::vector<int>{0, 1});  // no record: cluster.workers
  m.members = {0, 1, 3};
  m.slots = 4;
  CHECK(pstrain::resume_members(m, cl) == std::vector<int>{0, 1, 3});
  // The manifest keeps the record.
  const pstrain::CheckpointManifest back = pstrain::parse_manifest_json(pstrain::manifest_json(m), "manifest");
  CHECK(back.members == m.members);
  CHECK(back.slots == 4);
  pstrain::ClusterConfig fixed = cl;  // not elastic: the fixed job's workers, whatever the record
  fixed.min_workers = fixed.max_workers = 2;
  CHECK(pstrain::resume_members(m, fixed) == std::vector<int>{0, 1});
  pstrain::ClusterConfig smaller = cl;
  smaller.max_workers = 3;
  CHECK(pstrain::test::thrown_text([&] { pstrain::resume_members(m, smaller); })
            .find("has worker 3, past the job's 3 worker slots (cluster.max_workers = 3); resume with "
                  "cluster.max_workers >= 4") != std::string::npos);
  pstrain::CheckpointManifest missing = m;
  missing.members = {0, 1, 2};
  CHECK(pstrain::test::thrown_text([&] { pstrain::resume_members(missing, cl); })
            .find("is incomplete: member 2 has no worker part") != std::string::npos);
  missing.members = {1, 0};
  CHECK(pstrain::test::thrown_text([&] { pstrain::resume_members(missing, cl); })
            .find("is incomplete: its ranks are not ascending and distinct") != std::string::npos);
  pstrain::ClusterConfig higher_min = cl;
  higher_min.min_workers = 4;
  higher_min.max_workers = 5;
  CHECK(pstrain::test::thrown_text([&] { pstrain::resume_members(m, higher_min); })
            .find("below cluster.min_workers = 4") != std::string::npos);
}

// The plan of an allreduce resume after a grow 2 -> 3, without processes: the
// leader completes the checkpoint recording the members of its parts' history
// (cut at the checkpoint's step), the launcher plans exactly those ranks, and
// the history's one change is what a resumed worker has heard (the scheduler
// seeds it as change 1). A manifest without the record (an older build's)
// is still refused with the reason.
TEST_CASE("an allreduce checkpoint after a grow records its members; launch --resume plans them") {
  it::TempDir dir;
  const fs::path run = dir.path() / "run";
  pstrain::RunConfig config = pstrain::load_config((it::kSourceDir / "configs/tiny_allreduce.toml").string());
  config.cluster.num_workers = 2;
  config.cluster.min_workers = 2;
  config.cluster.max_workers = 3;
  config.checkpoint.interval_steps = 5;
  config.output.run_dir = run.string();
  fs::create_directories(run);
  it::write_file(run / "config.toml", pstrain::to_toml(config));
  // Epoch 0 with workers 0 and 1, epoch 1 likewise until its step 5, then 0-2 (the grow); the checkpoint at step 40.
  const std::vector<std::int64_t> history{0, 2, 0, 1, 1, 2, 0, 1, 1, -5, 3, 0, 1, 2};
  CHECK(pstrain::history_changes(history) == 1);
  CHECK(pstrain::history_changes({0, 2, 0, 1, 1, 2, 0, 1}) == 0);
  CHECK(pstrain::test::thrown_text([] { pstrain::history_changes({0, -5, 4, 0}); })
            .find("is not [epoch, (-from_step,) count, ranks...]") != std::string::npos);
  constexpr std::int64_t kParams = 10;
  for (int w = 0; w < 3; ++w) {
    pstrain::WorkerCheckpoint part;
    part.step = 40;
    part.epoch_members = history;
    if (w == 0) part.params.assign(kParams, 0.5f), part.optimizer_state.assign(kParams, 0.0f);  // the leader's
    pstrain::write_worker_part(config, w, part);
  }
  pstrain::complete_checkpoint(config, 40, kParams, 0, {}, nullptr, /*record_members=*/true);
  const auto newest = pstrain::find_newest_checkpoint(run / "checkpoints");
  REQUIRE(newest.has_value());
  CHECK(newest->manifest.members == std::vector<int>{0, 1, 2});
  CHECK(newest->manifest.slots == 3);
  pstrain::launcher::LaunchRequest request;
  request.resume = run.string();
  request.bin_dir = it::kBinDir;
  const pstrain::launcher::LaunchPlan plan = pstrain::launcher::plan_launch(request);
  CHECK(plan.resume_workers == std::vector<int>{0, 1, 2});
  CHECK(plan.num_workers == 3);
  CHECK(plan.worker_ranks() == std::vector<int>{0, 1, 2});
  // The same checkpoint as an older build wrote it, without the record: refused, saying why.
  const fs::path ckpt = newest->dir;
  std::vector<std::string> parts;
  for (const pstrain::CheckpointPartInfo& p : newest->manifest.parts) parts.push_back(p.name);
  fs::remove(ckpt / "manifest.json");
  pstrain::write_checkpoint_manifest(ckpt, 40, pstrain::checkpoint_fingerprint(config, kParams), parts);
  CHECK(pstrain::test::thrown_text([&] { pstrain::launcher::plan_launch(request); })
            .find("was taken after the job grew past cluster.workers = 2 (worker 2 is a member) and records no "
                  "membership to resume at") != std::string::npos);
}

// 3 -> 2 (pstrain-ctl: rank 2 retires) -> a worker joins by hand into rank 3:
// the checkpoint's members are 0, 1 and 3, the resume starts exactly those,
// and a later `pstrain-ctl ... workers 2` still resizes the resumed job
// (rank 3, the highest, retires).
TEST_CASE("launch --resume starts the checkpoint's exact ranks (0, 1, 3) and the resumed job still resizes") {
  it::TempDir dir;
  const fs::path run = dir.path() / "run";
  std::int64_t resumed_at = 0;
  pid_t joiner = -1;
  {
    it::LaunchProcess p(job_args(run, "sync", 3, {"--set", "checkpoint.interval_steps=5"}), dir.path() / "out.txt");
    REQUIRE(it::wait_until([&] { return it::count_lines(run / "metrics/worker-0.jsonl") >= 3; },
                           std::chrono::seconds(120), "worker 0's first step"));
    CHECK(run_ctl(run, 2, dir.path() / "ctl2.txt") == 0);
    REQUIRE(it::wait_until([&] { return it::contains(it::read_file(run / "logs/scheduler.log"), "worker 2 retired"); },
                           std::chrono::seconds(120), "worker 2's retirement"));
    CHECK(it::wait_until([&] { return it::contains(it::read_file(run / "metrics/worker-2.jsonl"), "\"type\":\"end\""); },
                         std::chrono::seconds(120), "worker 2's end record"));
    std::string endpoint = it::read_file(run / "scheduler.endpoint");
    while (!endpoint.empty() && (endpoint.back() == '\n' || endpoint.back() == ' ')) endpoint.pop_back();
    joiner = it::spawn({(it::kBinDir / "pstrain-worker").string(), "--config", (run / "config.toml").string(),
                        "--scheduler", endpoint, "--join", "--rank", "3"},
                       {}, dir.path() / "joiner.txt");
    resumed_at = interrupt_at(run, p, {0, 1, 3});
  }
  kill(joiner, SIGKILL);  // its scheduler is gone: it would only wait for it to come back
  it::wait_exit(joiner, std::chrono::seconds(30));
  it::LaunchProcess resumed(resume_args(run), dir.path() / "resumed.txt");
  INFO(resumed.output());
  REQUIRE(it::wait_until([&] { return it::contains(resumed.output(), "resuming from"); }, std::chrono::seconds(60),
                         "the resume"));
  const auto pids = [&] { return it::read_pids(run); };
  REQUIRE(it::wait_until([&] { return pids().count("worker-3") != 0; }, std::chrono::seconds(60), "worker 3"));
  CHECK(pids().count("worker-2") == 0);  // the retired rank is not started again
  CHECK(it::wait_until([&] { return it::contains(it::read_file(run / "logs/scheduler.log"), "(ranks 0,1,3"); },
                       std::chrono::seconds(60), "the scheduler's start-up line"));
  CHECK(run_ctl(run, 2, dir.path() / "ctl2-resumed.txt") == 0);
  const auto exit = resumed.wait(std::chrono::seconds(300));
  REQUIRE(exit.has_value());
  REQUIRE(exit->code == 0);

  std::vector<std::string> reasons;
  std::vector<Change> changes = changes_of(run, reasons);
  REQUIRE(changes.size() == 3);
  CHECK(reasons == std::vector<std::string>{"retire", "join", "retire"});
  changes[1].members = {0, 1, 3};  // the joiner took rank 3, not the lowest slot
  CHECK(changes[1].step <= resumed_at);
  CHECK(changes[2].step > resumed_at);
  CHECK(changes[2].members == first(2));
  const Plan plan = plan_of(first(3), changes);
  check_ran_to_end(run, first(2), plan.total);
  const report::WorkerMetrics w3 = report::read_worker_metrics(report::worker_metrics_path(run, 3), 3);
  REQUIRE(w3.end.has_value());
  CHECK(w3.end->retired);
  CHECK(w3.end->steps == changes[2].step);
  check_epochs(run, plan, resumed_at, {0, 1, 3});
}
