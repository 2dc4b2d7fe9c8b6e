// Distributed sampler and batching.
#include "worker/data/shard_sampler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <utility>

#include "common/base/errors.h"
#include "tests/data/data_test_util.h"
#include "worker/data/batches.h"
#include "worker/data/portable_random.h"

namespace pstrain::data {
namespace {

using testing::thrown_text;

// Every rank's indices for one epoch.
std::vector<std::vector<std::int64_t>> all_shards(std::int64_t n, int replicas, int epoch,
                                                  bool shuffle, bool drop_last) {
  std::vector<std::vector<std::int64_t>> shards;
  for (int rank = 0; rank < replicas; ++rank) {
    shards.push_back(ShardSampler(n, replicas, rank, 42, shuffle, drop_last).indices(epoch));
  }
  return shards;
}

TEST_CASE("sampler: shards are equal-sized, cover every sample, overlap only by the padding") {
  const std::vector<std::pair<std::int64_t, int>> cases{{10, 1}, {10, 2}, {10, 3}, {7, 4},
                                                        {3, 5},  {1, 3},  {1000, 7}, {60000, 4}};
  for (const auto& [n, replicas] : cases) {
    CAPTURE(n);
    CAPTURE(replicas);
    for (const bool shuffle : {true, false}) {
      const auto shards = all_shards(n, replicas, 0, shuffle, false);
      const std::int64_t per_replica = (n + replicas - 1) / replicas;
      std::map<std::int64_t, int> seen;
      for (const auto& shard : shards) {
        REQUIRE(static_cast<std::int64_t>(shard.size()) == per_replica);
        for (const std::int64_t index : shard) {
          REQUIRE(index >= 0);
          REQUIRE(index < n);
          ++seen[index];
        }
      }
      CHECK(static_cast<std::int64_t>(seen.size()) == n);  // every sample covered
      std::int64_t repeats = 0;
      for (const auto& [index, count] : seen) repeats += count - 1;
      CHECK(repeats == per_replica * replicas - n);  // duplicates are exactly the padding
    }
  }
}

TEST_CASE("sampler: drop_last truncates to disjoint shards") {
  for (const auto& [n, replicas] : std::vector<std::pair<std::int64_t, int>>{{10, 3}, {7, 4}, {8, 4}}) {
    const auto shards = all_shards(n, replicas, 1, true, true);
    std::vector<std::int64_t> all;
    for (const auto& shard : shards) {
      CHECK(static_cast<std::int64_t>(shard.size()) == n / replicas);
      all.insert(all.end(), shard.begin(), shard.end());
    }
    std::sort(all.begin(), all.end());
    CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
    CHECK(static_cast<std::int64_t>(all.size()) == n - n % replicas);
  }
}

TEST_CASE("sampler: same across calls and samplers, differs between epochs and seeds") {
  const ShardSampler sampler(500, 3, 1, 9);
  CHECK(sampler.indices(2) == sampler.indices(2));
  CHECK(sampler.indices(2) == ShardSampler(500, 3, 1, 9).indices(2));
  CHECK(sampler.indices(2) != sampler.indices(3));
  CHECK(sampler.indices(2) != ShardSampler(500, 3, 1, 10).indices(2));
  CHECK(sampler.num_samples_per_replica() == 167);
  CHECK(sampler.total_size() == 501);
  // The shuffle is our own Fisher-Yates: a fixed seed gives a fixed order on
  // every platform (this pins it, so a change of algorithm is noticed).
  CHECK(epoch_permutation(8, 1, 0) == std::vector<std::int64_t>{5, 0, 3, 6, 7, 1, 2, 4});
  CHECK(epoch_permutation(8, 1, 1) == std::vector<std::int64_t>{2, 0, 1, 7, 4, 5, 6, 3});
  CHECK(ShardSampler(8, 3, 1, 1).indices(0) == std::vector<std::int64_t>{0, 7, 4});
  CHECK(ShardSampler(8, 3, 2, 1).indices(0) == std::vector<std::int64_t>{3, 1, 5});  // 5: padding
  std::vector<std::int64_t> sorted = epoch_permutation(1000, 5, 3);
  CHECK(sorted != epoch_permutation(1000, 5, 4));
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), std::int64_t{0});
  CHECK(sorted == identity);
}

TEST_CASE("sampler: without shuffle rank r takes r, r+R, ... wrapping around") {
  CHECK(ShardSampler(7, 3, 0, 1, false).indices(0) == std::vector<std::int64_t>{0, 3, 6});
  CHECK(ShardSampler(7, 3, 1, 1, false).indices(5) == std::vector<std::int64_t>{1, 4, 0});
  CHECK(ShardSampler(7, 3, 2, 1, false).indices(0) == std::vector<std::int64_t>{2, 5, 1});
  CHECK(ShardSampler(2, 5, 4, 1, false).indices(0) == std::vector<std::int64_t>{0});
}

TEST_CASE("sampler: validation") {
  CHECK_HAS(thrown_text<ConfigError>([] { ShardSampler(10, 2, 2, 1); }),
                 "shard sampler (num_samples 10, num_replicas 2, rank 2): rank 2 outside [0, 2)");
  CHECK_HAS(thrown_text<ConfigError>([] { ShardSampler(10, 2, -1, 1); }),
                 "rank -1 outside [0, 2)");
  CHECK_HAS(thrown_text<ConfigError>([] { ShardSampler(10, 0, 0, 1); }),
                 "num_replicas must be >= 1");
  CHECK_HAS(thrown_text<ConfigError>([] { ShardSampler(0, 2, 0, 1); }),
                 "num_samples must be >= 1");
  CHECK_HAS(thrown_text<ConfigError>([] { ShardSampler(3, 4, 0, 1, true, true); }),
                 "drop_last with fewer samples than replicas leaves every shard empty");
  CHECK_HAS(thrown_text<ConfigError>([] { ShardSampler(10, 2, 0, 1).indices(-1); }),
                 "shard sampler: epoch -1 < 0");
  CHECK_HAS(thrown_text<ConfigError>([] { epoch_permutation(0, 1, 0); }),
                 "epoch permutation: num_samples 0 < 1");
}

TEST_CASE("portable random: bounded integers and normals") {
  std::mt19937_64 engine(mix_seed(3, 4));
  std::vector<int> counts(6, 0);
  double sum = 0, sum_sq = 0;
  constexpr int kDraws = 60000;
  for (int i = 0; i < kDraws; ++i) {
    const std::uint64_t value = uniform_below(engine, 6);
    REQUIRE(value < 6);
    ++counts[value];
    const double u = uniform01(engine);
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    const double z = standard_normal(engine);
    sum += z;
    sum_sq += z * z;
  }
  for (const int count : counts) CHECK(std::abs(count - kDraws / 6) < 500);
  CHECK(std::abs(sum / kDraws) < 0.02);
  CHECK(sum_sq / kDraws == doctest::Approx(1.0).epsilon(0.03));
  CHECK(uniform_below(engine, 1) == 0);
  CHECK(mix_seed(1, 0) == 0x7adda25fcf93ee03ULL);
  CHECK(mix_seed(1, 0) != mix_seed(0, 1));
  CHECK(mix_seed(1, 0) != mix_seed(1, 1));
}

TEST_CASE("batches: split keeps or drops the last partial batch") {
  const std::vector<std::int64_t> indices{5, 3, 8, 1, 9, 0, 2};
  const auto kept = split_batches(indices, 3, false);
  CHECK(kept == std::vector<std::vector<std::int64_t>>{{5, 3, 8}, {1, 9, 0}, {2}});
  CHECK(split_batches(indices, 3, true) == std::vector<std::vector<std::int64_t>>{{5, 3, 8}, {1, 9, 0}});
  CHECK(split_batches(indices, 7, true).size() == 1);
  CHECK(split_batches(indices, 8, true).empty());
  CHECK(split_batches(indices, 8, false).size() == 1);
  CHECK(num_batches(7, 3, false) == 3);
  CHECK(num_batches(7, 3, true) == 2);
  CHECK(num_batches(0, 3, false) == 0);
  CHECK_HAS(thrown_text<ConfigError>([&] { split_batches(indices, 0, false); }),
                 "batching: batch_size 0 < 1");
  CHECK_HAS(thrown_text<ConfigError>([] { num_batches(-1, 4, false); }),
                 "batching: num_indices -1 < 0");
}

}  // namespace
}  // namespace pstrain::data
