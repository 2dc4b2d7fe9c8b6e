// Survivors take over a dropped worker's data (worker/train/epoch_members.h):
// each epoch is split over the workers the scheduler named for it, so W live
// workers of N cover the whole training set from the epoch after a drop.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/base/errors.h"
#include "common/base/log.h"
#include "worker/data/shard_sampler.h"
#include "worker/data/synthetic.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/epoch_members.h"
#include "worker/train/metrics.h"
#include "tests/support/temp_dir.h"

using namespace pstrain;

namespace {
// How often each sample is visited in `epoch` by the workers `members`.
std::map<std::int64_t, int> visits(std::int64_t n, const std::vector<int>& members, int epoch, std::uint64_t seed) {
  std::map<std::int64_t, int> count;
  for (const int rank : members) {
    const EpochShard shard = epoch_shard(members, rank);
    CHECK(shard.member);
    for (const auto i : data::ShardSampler(n, shard.replicas, shard.position, seed).indices(epoch)) ++count[i];
  }
  return count;
}
}  // namespace

TEST_CASE("W live workers of N: every sample once per epoch (twice only for the padding)") {
  const std::vector<std::vector<int>> live_sets = {{0, 1, 2, 3}, {0, 2, 3}, {1, 3}, {2}, {0, 1, 3}};
  for (const std::int64_t n : {12, 17, 60}) {
    for (const auto& members : live_sets) {
      for (const int epoch : {0, 1, 5}) {
        const auto count = visits(n, members, epoch, 42);
        const auto w = static_cast<std::int64_t>(members.size());
        const std::int64_t padding = (w - n % w) % w;
        CHECK(static_cast<std::int64_t>(count.size()) == n);  // nothing missed
        std::int64_t twice = 0;
        for (const auto& [sample, times] : count) {
          CHECK(sample >= 0);
          CHECK(sample < n);
          CHECK(times >= 1);
          CHECK(times <= 2);
          twice += times - 1;
        }
        CHECK(twice == padding);
      }
    }
  }
}

TEST_CASE("with every worker the split is the fixed (rank, N) one, bit for bit") {
  EpochMembers all(EpochMembers::all_of(3));
  for (int rank = 0; rank < 3; ++rank) {
    const EpochShard shard = epoch_shard(all.of(4), rank);
    CHECK(data::ShardSampler(50, shard.replicas, shard.position, 7).indices(4) ==
          data::ShardSampler(50, 3, rank, 7).indices(4));
  }
}

TEST_CASE("EpochDriver: after a drop the survivors' next epoch covers the training set; steps agree") {
  const data::Dataset train = data::make_synthetic(60, 1);
  RunConfig config;
  config.workload.batch_size = 5;
  config.workload.epochs = 3;
  Logger log("test", LogLevel::kWarn);
  // Worker 1 is dropped during epoch 0: epochs 1 and 2 belong to 0 and 2.
  const auto ask = [](int epoch) { return epoch == 0 ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 2}; };
  std::map<int, std::map<int, std::vector<std::int64_t>>> seen;  // rank -> epoch -> samples
  std::map<int, std::vector<std::int64_t>> steps;                // rank -> step numbers
  std::int64_t done = 0;
  for (const int rank : {0, 2}) {
    EpochDriver driver(config, train, rank, 3);
    CHECK(driver.steps_per_epoch() == 4);  // 60 / 3 / 5
    EpochMembers members(ask);
    MetricsWriter metrics("", "worker.jsonl");
    const std::int64_t images = 0;
    done = driver.run(
        log, metrics, images,
        [&](std::span<const std::int64_t> batch, std::int64_t step, int epoch, double) {
          seen[rank][epoch].insert(seen[rank][epoch].end(), batch.begin(), batch.end());
          steps[rank].push_back(step);
          return 0.0;
        },
        [](std::int64_t, int, bool) {}, 0, &members);
    CHECK(driver.epoch_after(done) == 2);
    CHECK(driver.epoch_after(4) == 0);
    CHECK(driver.epoch_after(5) == 1);
    CHECK(members.history() == std::vector<std::int64_t>{0, 3, 0, 1, 2, 1, 2, 0, 2, 2, 2, 0, 2});
  }
  CHECK(done == 4 + 6 + 6);  // epoch 0: 20 samples each; then 30 each
  CHECK(steps[0] == steps[2]);
  for (const int epoch : {1, 2}) {
    std::map<std::int64_t, int> count;
    for (const int rank : {0, 2}) {
      CHECK(seen[rank][epoch].size() == 30);
      for (const auto i : seen[rank][epoch]) ++count[i];
    }
    CHECK(count.size() == 60);
    for (const auto& [sample, times] : count) CHECK(times == 1);
  }
}

TEST_CASE("EpochDriver resumed inside an epoch after a drop walks the checkpoint's epochs") {
  const data::Dataset train = data::make_synthetic(60, 1);
  RunConfig config;
  config.workload.batch_size = 5;
  config.workload.epochs = 3;
  Logger log("test", LogLevel::kWarn);
  // History of a checkpoint at step 6: epoch 0 with three workers (4 steps), epoch 1 with 0 and 2.
  const std::vector<std::int64_t> history{0, 3, 0, 1, 2, 1, 2, 0, 2};
  const auto later = [](int) { return std::vector<int>{0, 1, 2}; };  // after the resume all are back
  EpochMembers members(later, history);
  EpochDriver driver(config, train, 2, 3);
  MetricsWriter metrics("", "worker.jsonl");
  const std::int64_t images = 0;
  std::vector<std::int64_t> steps;
  std::map<int, std::vector<std::int64_t>> seen;
  const std::int64_t done = driver.run(
      log, metrics, images,
      [&](std::span<const std::int64_t> batch, std::int64_t step, int epoch, double) {
        steps.push_back(step);
        seen[epoch].insert(seen[epoch].end(), batch.begin(), batch.end());
        return 0.0;
      },
      [](std::int64_t, int, bool) {}, 6, &members);
  CHECK(steps.front() == 6);
  CHECK(seen[1].size() == 4 * 5);  // the rest of epoch 1 (steps 6..9 of 4..9), the shard of position 1 of 2
  const auto shard = data::ShardSampler(60, 2, 1, config.workload.seed).indices(1);
  CHECK(seen[1] == std::vector<std::int64_t>(shard.begin() + 10, shard.end()));
  CHECK(seen[2].size() == 20);  // epoch 2 with all three again
  CHECK(done == 10 + 4);
}

TEST_CASE("epoch members: text and history are checked") {
  CHECK(parse_members("0,2,3") == std::vector<int>{0, 2, 3});
  CHECK(format_members({0, 2, 3}) == "0,2,3");
  CHECK_THROWS_AS(parse_members(""), ProtocolError);
  CHECK_THROWS_AS(parse_members("2,1"), ProtocolError);
  CHECK_THROWS_AS(parse_members("1,1"), ProtocolError);
  CHECK_THROWS_AS(parse_members("0,x"), ProtocolError);
  CHECK_THROWS_AS(parse_members("-1"), ProtocolError);
  CHECK_THROWS_AS(EpochMembers(EpochMembers::all_of(2), {0, 3, 1}), Error);  // truncated
  CHECK_THROWS_AS(epoch_shard({}, 0), ConfigError);
  const EpochShard back = epoch_shard({0, 2}, 1);  // not a member (back after --resume)
  CHECK_FALSE(back.member);
  CHECK(back.position == 1);
  CHECK(back.replicas == 2);
}

// A grow inside epoch 0 (2 -> 3 workers) can leave it as many steps as epoch 1 after a drop
// (3 -> 2): the "plan" record of epoch 1 must still be written, since the summary reads the
// membership changes from these records (it was skipped when the steps matched: a drop missing
// from summary.json and the status line's total left at the 3-worker plan).
TEST_CASE("EpochDriver writes a plan record when an epoch's workers change even if its steps do not") {
  const data::Dataset train = data::make_synthetic(60, 1);
  RunConfig config;
  config.workload.batch_size = 5;
  config.workload.epochs = 2;
  Logger log("test", LogLevel::kWarn);
  test::TempDir dir;
  const auto ask = [](int epoch) { return epoch == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2}; };
  EpochMembers members(ask);
  members.add_segment(0, 4, {0, 1, 2}, "ctl");
  std::map<int, int> steps;  // epoch -> steps run
  {
    EpochDriver driver(config, train, 0, 2);
    MetricsWriter metrics(dir.path().string(), "worker-0.jsonl");
    const std::int64_t images = 0;
    driver.run(
        log, metrics, images,
        [&](std::span<const std::int64_t>, std::int64_t, int epoch, double) {
          ++steps[epoch];
          return 0.0;
        },
        [](std::int64_t, int, bool) {}, 0, &members);
  }
  REQUIRE(steps[0] == steps[1]);  // the case this is about: the same steps, other workers
  std::ifstream in(dir.path() / "metrics/worker-0.jsonl");
  std::vector<std::string> plans;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"type\":\"plan\"") != std::string::npos) plans.push_back(line);
  }
  REQUIRE(plans.size() == 3);  // the job's plan, the grow in epoch 0, epoch 1's two workers
  CHECK(plans[1].find("\"workers\":3") != std::string::npos);
  CHECK(plans[2].find("\"epoch\":1") != std::string::npos);
  CHECK(plans[2].find("\"workers\":2") != std::string::npos);
}
