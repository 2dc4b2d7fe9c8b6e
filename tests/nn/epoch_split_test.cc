// Elastic membership's data split (worker/train/epoch_split.h): an epoch's
// members change at a step, the rest of its permutation is split among the
// new members, and every sample of the epoch is trained once (plus the
// last segment's wrap-around padding).
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/base/log.h"
#include "common/config/config.h"
#include "worker/data/shard_sampler.h"
#include "worker/data/synthetic.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/epoch_members.h"
#include "worker/train/epoch_split.h"
#include "worker/train/metrics.h"
#include "tests/support/temp_dir.h"

using namespace pstrain;

namespace {

// Every rank that ever is a member: its batches of the steps it is a member at.
std::map<std::int64_t, int> visits(const EpochSplit& any, std::int64_t n, int batch, std::uint64_t seed, int epoch,
                                   const std::vector<EpochSegment>& segments, int max_rank) {
  std::map<std::int64_t, int> count;
  for (int rank = 0; rank <= max_rank; ++rank) {
    const EpochSplit split(n, batch, seed, epoch, segments, rank);
    CHECK(split.steps() == any.steps());  // the same on every worker
    for (std::int64_t b = 0; b < split.steps(); ++b) {
      if (!split.shard_at(b).member) continue;
      for (const auto i : split.batch(b)) ++count[i];
    }
  }
  return count;
}

// How many samples are seen twice: the last segment's padding.
std::int64_t padding_of(std::int64_t n, std::int64_t offset, std::int64_t replicas) {
  return (replicas - (n - offset) % replicas) % replicas;
}

}  // namespace

TEST_CASE("one segment: ShardSampler's split, bit for bit") {
  for (const int rank : {0, 1, 2}) {
    const EpochSplit split(50, 4, 7, 3, {EpochSegment{0, {0, 1, 2}}}, rank);
    const auto shard = data::ShardSampler(50, 3, rank, 7).indices(3);
    CHECK(split.steps() == 5);  // ceil(17 / 4)
    CHECK(split.active_segments() == 1);
    std::vector<std::int64_t> walked;
    for (std::int64_t b = 0; b < split.steps(); ++b) {
      const auto batch = split.batch(b);
      walked.insert(walked.end(), batch.begin(), batch.end());
    }
    CHECK(walked == shard);
  }
}

TEST_CASE("2 -> 4 -> 3 workers within an epoch: every sample once, plus the last segment's padding") {
  for (const std::int64_t n : {67, 80, 101}) {
    for (const int epoch : {0, 2}) {
      const std::vector<EpochSegment> segments{{0, {0, 1}}, {2, {0, 1, 2, 3}}, {4, {0, 1, 2}}};
      const EpochSplit split(n, 5, 42, epoch, segments, 0);
      REQUIRE(split.active_segments() == 3);
      CHECK(split.offset(1) == 2 * 5 * 2);
      CHECK(split.offset(2) == 20 + 2 * 5 * 4);
      const std::int64_t left = n - 60;
      CHECK(split.steps() == 4 + ((left + 2) / 3 + 4) / 5);
      const auto count = visits(split, n, 5, 42, epoch, segments, 3);
      CAPTURE(n);
      CHECK(static_cast<std::int64_t>(count.size()) == n);  // nothing missed
      std::int64_t twice = 0;
      for (const auto& [sample, times] : count) {
        CHECK(times >= 1);
        CHECK(times <= 2);
        twice += times - 1;
      }
      CHECK(twice == padding_of(n, 60, 3));
      // The prefix: the first segment is ShardSampler's, cut at its step 2.
      const auto shard = data::ShardSampler(n, 2, 1, 42).indices(epoch);
      const EpochSplit rank1(n, 5, 42, epoch, segments, 1);
      CHECK(std::vector<std::int64_t>(rank1.batch(1).begin(), rank1.batch(1).end()) ==
            std::vector<std::int64_t>(shard.begin() + 5, shard.begin() + 10));
      // The strided split of the rest: rank 3 from offset 20 takes 23, 27, ... of the permutation.
      const auto order = data::epoch_permutation(n, 42, epoch);
      const EpochSplit rank3(n, 5, 42, epoch, segments, 3);
      CHECK(rank3.shard_at(2).member);
      CHECK_FALSE(rank3.shard_at(0).member);
      CHECK_FALSE(rank3.shard_at(4).member);
      CHECK(rank3.batch(2)[0] == order[23]);
      CHECK(rank3.batch(2)[1] == order[27]);
    }
  }
}

TEST_CASE("a change announced at or past the epoch's end takes none of its steps") {
  const EpochSplit split(40, 5, 1, 0, {EpochSegment{0, {0, 1}}, EpochSegment{4, {0, 1, 2}}}, 0);
  CHECK(split.steps() == 4);  // 20 each, 4 steps: the change at step 4 is the next epoch's
  CHECK(split.active_segments() == 1);
  const EpochSplit last(40, 5, 1, 0, {EpochSegment{0, {0, 1}}, EpochSegment{3, {0}}}, 0);
  CHECK(last.steps() == 3 + 2);  // the last 10 samples for worker 0 alone
  CHECK(last.active_segments() == 2);
  CHECK_THROWS_AS(EpochSplit(40, 5, 1, 0, {EpochSegment{1, {0}}}, 0), ConfigError);
  CHECK_THROWS_AS(EpochSplit(40, 5, 1, 0, {}, 0), ConfigError);
  CHECK_THROWS_AS(split.batch(4), ConfigError);
}

TEST_CASE("epoch members: segments, their history, and an old checkpoint's history") {
  EpochMembers members(EpochMembers::all_of(2));
  CHECK(members.of(0) == std::vector<int>{0, 1});
  CHECK(members.add_segment(0, 3, {0, 1, 2, 3}));
  CHECK_FALSE(members.add_segment(0, 3, {0, 1, 2, 3}));  // heard again
  CHECK(members.add_segment(0, 5, {0, 1, 2}));
  CHECK_THROWS_AS(members.add_segment(0, 5, {0, 1}), ProtocolError);  // not after the last change
  CHECK_THROWS_AS(members.add_segment(0, 0, {0}), ProtocolError);
  CHECK_THROWS_AS(members.add_segment(0, 9, {}), ProtocolError);
  CHECK_THROWS_AS(members.add_segment(0, 9, {2, 1}), ProtocolError);
  CHECK(members.add_segment(2, 1, {0}));  // asks for epoch 2's start first
  const std::vector<std::int64_t> history = members.history();
  CHECK(history == std::vector<std::int64_t>{0, 2, 0, 1, 0, -3, 4, 0, 1, 2, 3, 0, -5, 3, 0, 1, 2, 2, 2, 0, 1, 2, -1, 1, 0});
  EpochMembers back(EpochMembers::all_of(9), history);
  CHECK(back.segments(0) == members.segments(0));
  CHECK(back.segments(2) == members.segments(2));
  CHECK(back.of(1).size() == 9);  // not in the history: asked
  // A checkpoint's history from before segments: one segment per epoch.
  EpochMembers old(EpochMembers::all_of(3), {0, 3, 0, 1, 2, 1, 2, 0, 2});
  CHECK(old.segments(1) == std::vector<EpochSegment>{EpochSegment{0, {0, 2}}});
  CHECK(old.history() == std::vector<std::int64_t>{0, 3, 0, 1, 2, 1, 2, 0, 2});
  CHECK_THROWS_AS(EpochMembers(EpochMembers::all_of(2), {0, -3, 1, 0}), Error);         // a later segment first
  CHECK_THROWS_AS(EpochMembers(EpochMembers::all_of(2), {0, 1, 0, 0, -3}), Error);       // truncated
  CHECK_THROWS_AS(EpochMembers(EpochMembers::all_of(2), {0, 1, 0, 0, 1, 1}), Error);     // two starts of epoch 0
  CHECK_THROWS_AS(EpochMembers(EpochMembers::all_of(2), {0, 1, 0, 0, -2, 1, 0, 0, -2, 1, 1}), Error);  // not increasing
}

namespace {

struct Ran {
  std::map<int, std::vector<std::int64_t>> samples;  // epoch -> samples
  std::vector<std::int64_t> steps;
  std::vector<double> lrs;
  std::int64_t done = 0;
  bool retired = false;
};

// Rank `rank` of a job that starts with 2 workers (of max 4): in epoch 0,
// workers 2 and 3 join from step 2 and worker 3 retires from step 4; the
// changes are heard during step 1 and step 3 (as a scheduler's announcement
// would be). A joiner starts at step 2 knowing the first change.
Ran run_rank(const RunConfig& config, const data::Dataset& train, int rank, const std::string& run_dir = "") {
  Logger log("test", LogLevel::kWarn);
  EpochDriver driver(config, train, rank, 2);
  EpochMembers members([](int epoch) { return epoch == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2}; });
  const bool joiner = rank >= 2;
  if (joiner) members.add_segment(0, 2, {0, 1, 2, 3});
  MetricsWriter metrics(run_dir, "worker-" + std::to_string(rank) + ".jsonl");
  const std::int64_t images = 0;
  Ran ran;
  ran.done = driver.run(
      log, metrics, images,
      [&](std::span<const std::int64_t> batch, std::int64_t step, int epoch, double lr) {
        ran.samples[epoch].insert(ran.samples[epoch].end(), batch.begin(), batch.end());
        ran.steps.push_back(step);
        ran.lrs.push_back(lr);
        if (step == 1) members.add_segment(0, 2, {0, 1, 2, 3});
        if (step == 3) members.add_segment(0, 4, {0, 1, 2});
        return 0.0;
      },
      [](std::int64_t, int, bool) {}, joiner ? 2 : 0, &members);
  ran.retired = driver.retired();
  return ran;
}

RunConfig elastic_config() {
  RunConfig config;
  config.mode = Mode::kSync;
  config.cluster.num_workers = 2;
  config.cluster.max_workers = 4;
  config.cluster.min_workers = 1;
  config.workload.batch_size = 5;
  config.workload.epochs = 2;
  config.optimizer.lr = 0.1;
  config.schedule.linear_scaling = true;
  config.schedule.base_batch = 10;
  return config;
}

}  // namespace

TEST_CASE("EpochDriver: 2 -> 4 -> 3 workers in an epoch; joiners start at the change, a retiree stops there") {
  const data::Dataset train = data::make_synthetic(97, 1);
  const RunConfig config = elastic_config();
  std::map<int, Ran> ran;
  for (const int rank : {0, 1, 2, 3}) ran[rank] = run_rank(config, train, rank);
  // Epoch 0: 2 steps of 2 workers (20 samples), 2 of 4 (40), then the 37 left for 3: 13 each, 3 steps.
  CHECK(ran[0].steps == ran[1].steps);
  CHECK(std::vector<std::int64_t>(ran[0].steps.begin() + 2, ran[0].steps.end()) == ran[2].steps);
  CHECK(ran[0].steps.front() == 0);
  CHECK(ran[2].steps.front() == 2);
  CHECK_FALSE(ran[0].retired);
  CHECK(ran[3].retired);
  CHECK(ran[3].steps == std::vector<std::int64_t>{2, 3});
  CHECK(ran[3].done == 4);
  const std::int64_t epoch0 = 4 + 3;
  const std::int64_t epoch1 = 7;  // ceil(ceil(97 / 3) / 5) with workers 0, 1, 2
  CHECK(ran[0].done == epoch0 + epoch1);
  std::map<std::int64_t, int> count;
  for (auto& [rank, r] : ran) {
    for (const auto i : r.samples[0]) ++count[i];
  }
  CHECK(count.size() == 97);
  std::int64_t twice = 0;
  for (const auto& [sample, times] : count) twice += times - 1;
  CHECK(twice == (3 - 37 % 3) % 3);
  // Linear scaling in an elastic sync job: the rate follows the members (2, 4, then 3 of 2).
  CHECK(ran[0].lrs[2] == doctest::Approx(2.0 * ran[0].lrs[1]));
  CHECK(ran[0].lrs[4] == doctest::Approx(1.5 * ran[0].lrs[1]));
  CHECK(ran[2].lrs[0] == ran[0].lrs[2]);
}

TEST_CASE("EpochDriver: the rate of a job that is not elastic is unchanged by a change of members") {
  const data::Dataset train = data::make_synthetic(97, 1);
  RunConfig config = elastic_config();
  config.cluster.max_workers = 0;
  config.cluster.min_workers = 0;
  const Ran fixed = run_rank(config, train, 0);
  RunConfig async = elastic_config();
  async.mode = Mode::kAsync;
  const Ran per_push = run_rank(async, train, 0);
  for (std::size_t i = 0; i < 5; ++i) {
    CHECK(fixed.lrs[i] == per_push.lrs[i] * 2.0);  // sync's base is the global batch's (2 workers); async one push's
    CHECK(fixed.lrs[i] == fixed.lrs[0]);
  }
}

TEST_CASE("EpochDriver: a change heard after the worker passed its step is refused") {
  const data::Dataset train = data::make_synthetic(97, 1);
  Logger log("test", LogLevel::kWarn);
  const RunConfig config = elastic_config();
  EpochDriver driver(config, train, 0, 2);
  EpochMembers members(EpochMembers::all_of(2));
  MetricsWriter metrics("", "worker.jsonl");
  const std::int64_t images = 0;
  const auto late = [&] {
    driver.run(
        log, metrics, images,
        [&](std::span<const std::int64_t>, std::int64_t step, int, double) {
          if (step == 3) members.add_segment(0, 2, {0, 1, 2});
          return 0.0;
        },
        [](std::int64_t, int, bool) {}, 0, &members);
  };
  CHECK_THROWS_WITH_AS(late(), doctest::Contains("heard after this worker ran its step 3"), ProtocolError);
}

namespace {
// The "coverage" records of epoch `epoch` in a worker's metrics file, added up.
EpochCoverage coverage_records(const std::string& file, int epoch) {
  EpochCoverage sum;
  std::ifstream in(file);
  std::string line;
  const auto field = [&](const std::string& key) {
    const auto at = line.find("\"" + key + "\":");
    REQUIRE(at != std::string::npos);
    return line.substr(at + key.size() + 3);
  };
  while (std::getline(in, line)) {
    if (line.find("\"type\":\"coverage\"") == std::string::npos) continue;
    if (std::stoll(field("epoch")) != epoch) continue;
    sum.samples += std::stoll(field("samples"));
    sum.checksum += std::stoull(field("checksum").substr(1, 16), nullptr, 16);
  }
  return sum;
}
}  // namespace

TEST_CASE("EpochDriver: each process's coverage records of an epoch add up to the epoch's samples, padding included") {
  const data::Dataset train = data::make_synthetic(97, 1);
  const RunConfig config = elastic_config();
  test::TempDir dir("coverage");
  EpochCoverage trained[2];
  for (const int rank : {0, 1, 2, 3}) {
    const Ran ran = run_rank(config, train, rank, dir.path().string());
    for (const int epoch : {0, 1}) {
      if (ran.samples.count(epoch)) trained[epoch].add(ran.samples.at(epoch));
    }
  }
  for (const int epoch : {0, 1}) {
    EpochCoverage written;
    for (const int rank : {0, 1, 2, 3}) {
      written.add(coverage_records((dir.path() / "metrics" / ("worker-" + std::to_string(rank) + ".jsonl")).string(), epoch));
    }
    CAPTURE(epoch);
    CHECK(written == trained[epoch]);  // the records are what the steps trained
    // Every sample once, and the last segment's padding: the permutation's first entries again.
    EpochCoverage expected;
    for (std::int64_t i = 0; i < 97; ++i) expected.checksum += sample_hash(i);
    const auto order = data::epoch_permutation(97, config.workload.seed, epoch);
    const std::int64_t padding = epoch == 0 ? (3 - 37 % 3) % 3 : (3 - 97 % 3) % 3;
    for (std::int64_t k = 0; k < padding; ++k) expected.checksum += sample_hash(order[static_cast<std::size_t>(k)]);
    expected.samples = 97 + padding;
    CHECK(written == expected);
  }
  CHECK(checksum_text(0xff) == "00000000000000ff");
}

TEST_CASE("EpochDriver resumed inside a segmented epoch (the checkpoint's history) takes the same steps and samples") {
  const data::Dataset train = data::make_synthetic(97, 1);
  const RunConfig config = elastic_config();
  const Ran whole = run_rank(config, train, 1);
  // A checkpoint at step 5 (in the third segment of epoch 0) holds these segments.
  EpochMembers before([](int) { return std::vector<int>{0, 1}; });
  before.add_segment(0, 2, {0, 1, 2, 3});
  before.add_segment(0, 4, {0, 1, 2});
  EpochMembers resumed([](int epoch) { return epoch == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2}; },
                       before.history());
  Logger log("test", LogLevel::kWarn);
  EpochDriver driver(config, train, 1, 2);
  MetricsWriter metrics("", "worker-1.jsonl");
  const std::int64_t images = 0;
  std::vector<std::int64_t> steps, samples;
  const std::int64_t done = driver.run(
      log, metrics, images,
      [&](std::span<const std::int64_t> batch, std::int64_t step, int, double) {
        steps.push_back(step);
        samples.insert(samples.end(), batch.begin(), batch.end());
        return 0.0;
      },
      [](std::int64_t, int, bool) {}, 5, &resumed);
  CHECK(done == whole.done);
  CHECK(steps == std::vector<std::int64_t>(whole.steps.begin() + 5, whole.steps.end()));
  std::vector<std::int64_t> tail;
  for (const auto& [epoch, s] : whole.samples) tail.insert(tail.end(), s.begin(), s.end());
  const std::size_t first = tail.size() - samples.size();
  CHECK(samples == std::vector<std::int64_t>(tail.begin() + static_cast<std::ptrdiff_t>(first), tail.end()));
  CHECK(first == 5 * 5);  // the five steps before the checkpoint, 5 samples each
}
