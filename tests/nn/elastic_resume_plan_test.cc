// A resume at a checkpoint's membership (issue 29; docs/architecture.md,
// "Checkpoints and resume"), without processes: a job whose workers changed
// near a checkpoint writes its parts (each worker's membership history cut
// at the checkpoint's step, EpochMembers::history_before) and the manifest
// (complete_checkpoint: its members); the resume reads them back
// (resume_members, read_worker_part) and the members run on from the
// checkpoint's step (EpochDriver). Whether or not a worker had already heard
// a change from the checkpoint's step on when it wrote its part, every
// sample of every epoch is trained once (plus the split's padding): the
// steps before the checkpoint as the job ran them, the rest as the resume.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/base/log.h"
#include "common/checkpoint/checkpoint.h"
#include "common/checkpoint/checkpoint_members.h"
#include "common/config/config.h"
#include "tests/support/temp_dir.h"
#include "worker/data/synthetic.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/epoch_members.h"
#include "worker/train/epoch_split.h"
#include "worker/train/metrics.h"
#include "worker/train/worker_checkpoint.h"

using namespace pstrain;

namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kSamples = 60;
constexpr int kBatch = 5;
constexpr int kEpochs = 3;
constexpr int kSlots = 4;
constexpr std::int64_t kParams = 10;

struct Change {
  int epoch = 0;
  std::int64_t from_step = 0;  // within the epoch
  std::vector<int> members;
};

struct Case {
  std::string name;
  std::vector<int> initial;
  std::vector<Change> changes;
  std::int64_t checkpoint = 0;     // the job's step
  std::vector<int> members;        // the manifest's
  // A worker restarted under "restart" that rejoined exactly at the checkpoint's step (-1: none): its
  // failed process wrote no part; the new one writes its own at the start of its first step.
  int rejoiner = -1;
};

RunConfig config_of(const Case& c, const std::string& run_dir) {
  RunConfig config;
  config.output.run_dir = run_dir;
  config.workload.batch_size = kBatch;
  config.workload.epochs = kEpochs;
  config.workload.seed = 1;
  config.checkpoint.interval_steps = c.checkpoint;
  config.cluster.num_workers = static_cast<int>(c.initial.size());
  config.cluster.min_workers = 1;
  config.cluster.max_workers = kSlots;
  config.cluster.timeout_ms = 10000;
  return config;
}

// The scheduler's answer for an epoch's start: the members after the last change before it.
std::vector<int> start_members(const Case& c, int epoch) {
  std::vector<int> members = c.initial;
  for (const Change& ch : c.changes) {
    if (ch.epoch < epoch) members = ch.members;
  }
  return members;
}

// The history a worker holds: every change (`heard_all`), or only those before the checkpoint's step.
EpochMembers history_of(const Case& c, bool heard_all, const std::vector<std::int64_t>& epoch_starts) {
  EpochMembers m([&c](int epoch) { return start_members(c, epoch); });
  for (int e = 0; e < kEpochs; ++e) m.segments(e);
  for (const Change& ch : c.changes) {
    if (heard_all || epoch_starts[static_cast<std::size_t>(ch.epoch)] + ch.from_step < c.checkpoint) {
      m.add_segment(ch.epoch, ch.from_step, ch.members, "ctl");
    }
  }
  return m;
}

using Samples = std::map<int, std::vector<std::int64_t>>;  // epoch -> the samples trained, sorted at the end

// Every member's samples of every step of `segments_of`'s plan from step `from` to `to` (the job's numbering).
void plan_samples(const std::function<std::vector<EpochSegment>(int)>& segments_of, std::int64_t from, std::int64_t to,
                  Samples& out, std::vector<std::int64_t>* starts = nullptr) {
  std::int64_t start = 0;
  for (int e = 0; e < kEpochs; ++e) {
    if (starts != nullptr) starts->push_back(start);
    std::int64_t steps = 0;
    for (int rank = 0; rank < kSlots; ++rank) {
      const EpochSplit split(kSamples, kBatch, 1, e, segments_of(e), rank);
      steps = split.steps();
      for (std::int64_t b = 0; b < split.steps(); ++b) {
        if (!split.shard_at(b).member || start + b < from || start + b >= to) continue;
        out[e].insert(out[e].end(), split.batch(b).begin(), split.batch(b).end());
      }
    }
    start += steps;
  }
}

// The history a rejoiner at the checkpoint's step writes in its part: it learned every change decided
// (learn_decided_segments; here every change, the latest ones as well), and cuts it at its first step's
// place, which the driver gives in that step's function (EpochDriver::this_step, as ps_worker.cc's
// enter_first_step does).
std::vector<std::int64_t> rejoiner_history(const Case& c, const RunConfig& config,
                                           const std::vector<std::int64_t>& starts) {
  EpochMembers learned = history_of(c, true, starts);
  const data::Dataset train = data::make_synthetic(kSamples, 1);
  EpochDriver driver(config, train, c.rejoiner, config.cluster.num_workers);
  test::TempDir own;  // its metrics file, apart from the resume's
  MetricsWriter metrics(own.path().string(), "worker-" + std::to_string(c.rejoiner) + ".jsonl");
  Logger log("rejoiner", LogLevel::kWarn);
  const std::int64_t images = 0;
  std::vector<std::int64_t> history;
  bool first = true;
  driver.run(
      log, metrics, images,
      [&](std::span<const std::int64_t>, std::int64_t step, int, double) {
        if (std::exchange(first, false)) {
          CHECK(step == c.checkpoint);
          CHECK(driver.this_step().global == step);
          history = learned.history_before(driver.this_step().epoch, driver.this_step().step);
        }
        return 0.0;
      },
      [](std::int64_t, int, bool) {}, c.checkpoint, &learned);
  CHECK_FALSE(first);
  return history;
}

void run_case(const Case& c) {
  CAPTURE(c.name);
  test::TempDir dir;
  const RunConfig config = config_of(c, dir.path().string());
  Logger log("test", LogLevel::kWarn);
  // The job as it ran before the checkpoint: every change known.
  std::vector<std::int64_t> starts;
  Samples before;
  EpochMembers truth = history_of(c, true, std::vector<std::int64_t>(kEpochs, 0));
  plan_samples([&](int e) { return truth.segments(e); }, 0, c.checkpoint, before, &starts);
  truth = history_of(c, true, starts);
  before.clear();
  plan_samples([&](int e) { return truth.segments(e); }, 0, c.checkpoint, before);
  // Where the checkpoint's step lies: its epoch and step in it.
  int epoch = 0;
  while (epoch + 1 < kEpochs && starts[static_cast<std::size_t>(epoch) + 1] <= c.checkpoint) ++epoch;
  const std::int64_t in_epoch = c.checkpoint - starts[static_cast<std::size_t>(epoch)];
  // The parts: the workers that ran the step before it, half of them having heard every change.
  std::vector<std::int64_t> first_history;
  for (int rank = 0; rank < kSlots; ++rank) {
    const EpochSplit split(kSamples, kBatch, 1, epoch, truth.segments(epoch), rank);
    const std::int64_t prev = in_epoch > 0 ? in_epoch - 1 : -1;
    const bool ran = prev >= 0 ? split.shard_at(prev).member
                               : EpochSplit(kSamples, kBatch, 1, epoch - 1, truth.segments(epoch - 1), rank)
                                     .shard_at(starts[static_cast<std::size_t>(epoch)] -
                                               starts[static_cast<std::size_t>(epoch) - 1] - 1)
                                     .member;
    if (!ran || rank == c.rejoiner) continue;
    WorkerCheckpoint part;
    part.step = c.checkpoint;
    part.epoch_members = history_of(c, rank % 2 == 0, starts).history_before(epoch, in_epoch);
    if (first_history.empty()) first_history = part.epoch_members;
    CHECK(part.epoch_members == first_history);  // every part the same history
    write_worker_part(config, rank, part);
  }
  if (c.rejoiner >= 0) {
    const std::vector<std::int64_t> history = rejoiner_history(c, config, starts);
    CHECK(history == first_history);  // the same history as every other part
    WorkerCheckpoint part;
    part.step = c.checkpoint;
    part.epoch_members = history;
    write_worker_part(config, c.rejoiner, part);
  }
  complete_checkpoint(config, c.checkpoint, kParams, 0, {}, nullptr, true);
  const fs::path ckpt = checkpoint_root(config) / checkpoint_dir_name(c.checkpoint);
  const CheckpointManifest manifest = read_checkpoint_manifest(ckpt);
  CHECK(manifest.members == c.members);
  const std::vector<int> resumed = resume_members(manifest, config.cluster);
  REQUIRE(resumed == c.members);
  // The resume: each member from its part, later epochs' members the new scheduler's (the members).
  Samples after;
  std::vector<EpochSegment> plan_segments[kEpochs];
  const data::Dataset train = data::make_synthetic(kSamples, 1);
  for (const int rank : resumed) {
    const WorkerCheckpoint part = read_worker_part(ckpt, rank, config, kParams);
    EpochMembers members([&](int) { return resumed; }, part.epoch_members);
    EpochDriver driver(config, train, rank, config.cluster.num_workers);
    MetricsWriter metrics(dir.path().string(), "worker-" + std::to_string(rank) + ".jsonl");
    const std::int64_t images = 0;
    const std::int64_t end = driver.run(
        log, metrics, images,
        [&](std::span<const std::int64_t> batch, std::int64_t, int e, double) {
          after[e].insert(after[e].end(), batch.begin(), batch.end());
          return 0.0;
        },
        [](std::int64_t, int, bool) {}, c.checkpoint, &members);
    CHECK_FALSE(driver.retired());
    CHECK(end > c.checkpoint);
    for (int e = 0; e < kEpochs; ++e) plan_segments[e] = members.segments(e);
  }
  // The plan the resumed run followed, whole: before the checkpoint as the job ran, the rest as resumed.
  Samples expected;
  plan_samples([&](int e) { return plan_segments[e]; }, 0, 1 << 20, expected);
  for (int e = 0; e < kEpochs; ++e) {
    CAPTURE(e);
    std::vector<std::int64_t> trained = before[e];
    trained.insert(trained.end(), after[e].begin(), after[e].end());
    std::sort(trained.begin(), trained.end());
    std::sort(expected[e].begin(), expected[e].end());
    CHECK(trained == expected[e]);
    std::vector<std::int64_t> distinct = trained;
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    CHECK(static_cast<std::int64_t>(distinct.size()) == kSamples);  // every sample
  }
}

}  // namespace

TEST_CASE("history_before: a checkpoint keeps the segments from before its step only") {
  EpochMembers m(EpochMembers::all_of(2));
  m.segments(0);
  m.add_segment(0, 3, {0, 1, 2, 3}, "ctl");
  m.segments(1);
  m.add_segment(1, 2, {0, 1, 2}, "retire");
  CHECK(m.history_before(0, 3) == std::vector<std::int64_t>{0, 2, 0, 1});  // the change at the step: not yet
  CHECK(m.history_before(0, 4) == std::vector<std::int64_t>{0, 2, 0, 1, 0, -3, 4, 0, 1, 2, 3});
  CHECK(m.history_before(1, 0) == m.history_before(0, 4));  // an epoch's start: not that epoch
  CHECK(m.history_before(1, 2) == std::vector<std::int64_t>{0, 2, 0, 1, 0, -3, 4, 0, 1, 2, 3, 1, 2, 0, 1});
  CHECK(m.history_before(5, 0) == m.history());
  CHECK(last_members(m.history_before(0, 3)) == std::vector<int>{0, 1});
  CHECK(last_members(m.history_before(1, 0)) == std::vector<int>{0, 1, 2, 3});
  CHECK(last_members(m.history()) == std::vector<int>{0, 1, 2});
  CHECK(last_members({}).empty());
  // A history read back gives the same cut.
  const EpochMembers back(EpochMembers::all_of(2), m.history());
  CHECK(back.history_before(1, 2) == m.history_before(1, 2));
}

// Epoch 0 at 2 workers: 6 steps; at 4 workers an epoch has 3 steps, at 3 workers 4.
TEST_CASE("a resume at the checkpoint's membership trains every sample of every epoch once") {
  const std::vector<int> two{0, 1}, three{0, 1, 2}, four{0, 1, 2, 3};
  const std::vector<Case> cases = {
      {"grow 2 -> 4 two steps before the checkpoint", two, {{0, 2, four}}, 4, four},
      {"grow 2 -> 4 one step before the checkpoint", two, {{0, 3, four}}, 4, four},
      {"grow 2 -> 4 at the checkpoint's step: not in it", two, {{0, 4, four}}, 4, two},
      {"grow 2 -> 4 in epoch 0's last step, the checkpoint at epoch 1's start", two, {{0, 5, four}}, 6, four},
      {"grow 2 -> 4 in epoch 0's last step, the checkpoint at that step", two, {{0, 5, four}}, 5, two},
      {"grow 2 -> 4 in epoch 1, the checkpoint after it", two, {{1, 1, four}}, 8, four},
      {"retire 4 -> 3 two steps before the checkpoint", four, {{0, 1, three}}, 3, three},
      {"retire 4 -> 3 at the checkpoint's step: the retiree resumes", four, {{0, 2, three}}, 2, four},
      {"retire 4 -> 3 at epoch 0's last step of the 4 (it takes one more), the checkpoint at epoch 1's start", four,
       {{0, 2, three}}, 4, three},
      {"retire 3 -> 2, then a join into rank 3: members 0, 1, 3", three, {{0, 1, two}, {0, 3, {0, 1, 3}}}, 5,
       {0, 1, 3}},
      {"retire 3 -> 2, then a join into rank 3 at the checkpoint's step", three, {{0, 1, two}, {0, 3, {0, 1, 3}}}, 3,
       two},
      // A worker restarted under "restart" that rejoined at the checkpoint's step writes its part there (before, it
      // wrote none, and the resume left it out: its share of the rest of the epoch went untrained).
      {"no change, rank 1 rejoined at the checkpoint's step", two, {}, 4, two, 1},
      {"grow 2 -> 4 one step before the checkpoint, rank 3 rejoined at the checkpoint's step", two, {{0, 3, four}}, 4,
       four, 3},
      {"grow 2 -> 4 at the checkpoint's step, rank 1 rejoined there (knowing the change)", two, {{0, 4, four}}, 4, two,
       1},
      {"grow 2 -> 4 in epoch 0's last step, the checkpoint there, rank 0 rejoined there", two, {{0, 5, four}}, 5, two,
       0},
      {"retire 4 -> 3 two steps before the checkpoint, rank 2 rejoined at the checkpoint's step", four,
       {{0, 1, three}}, 3, three, 2},
  };
  for (const Case& c : cases) run_case(c);
}

// A checkpoint at an epoch's end is taken in the step function of its last step, and a resume
// from it cuts the metrics file back to its size then and starts at the next epoch: the epoch's
// coverage record must already be in that part of the file (it was written after the step, and
// every worker's record of the epoch was lost).
TEST_CASE("EpochDriver writes an epoch's coverage record before its last step, where a checkpoint keeps it") {
  const data::Dataset train = data::make_synthetic(kSamples, 1);
  RunConfig config;
  config.workload.batch_size = kBatch;
  config.workload.epochs = 2;
  Logger log("test", LogLevel::kWarn);
  test::TempDir dir;
  std::int64_t cut = -1;  // the file's size at the "checkpoint" after epoch 0's last step
  {
    EpochDriver driver(config, train, 0, 2);  // 6 steps an epoch
    MetricsWriter metrics(dir.path().string(), "worker-0.jsonl");
    const std::int64_t images = 0;
    driver.run(
        log, metrics, images,
        [&](std::span<const std::int64_t>, std::int64_t step, int, double) {
          if (step + 1 == 6) cut = metrics.size();
          return 0.0;
        },
        [](std::int64_t, int, bool) {});
  }
  REQUIRE(cut > 0);
  std::ifstream in(dir.path() / "metrics/worker-0.jsonl");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string kept = text.substr(0, static_cast<std::size_t>(cut));
  const auto at = kept.find("\"type\":\"coverage\"");
  REQUIRE(at != std::string::npos);
  const std::string record = kept.substr(at, kept.find('\n', at) - at);
  CHECK(record.find("\"epoch\":0") != std::string::npos);
  CHECK(record.find("\"first_step\":0,\"steps\":6,\"samples\":30") != std::string::npos);
  CHECK(text.find("\"epoch\":1,\"first_step\":6,\"steps\":6") != std::string::npos);  // epoch 1's, later
}
