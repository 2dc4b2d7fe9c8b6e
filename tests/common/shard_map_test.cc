// Shard map sweeps: every element covered exactly once, chunks within one
// tensor and within the partition size, bytes balanced, deterministic.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "common/base/errors.h"
#include "common/math/shard_map.h"

using namespace pstrain;

namespace {

void check_map(const ParamLayout& layout, int servers, std::int64_t partition_bytes) {
  CAPTURE(servers);
  CAPTURE(partition_bytes);
  ShardMap map(layout, servers, partition_bytes);
  const ShardMap again(layout, servers, partition_bytes);
  std::int64_t next = 0;
  std::vector<std::int64_t> bytes(static_cast<std::size_t>(servers), 0);
  for (const Chunk& c : map.chunks()) {
    CHECK(c.offset == next);  // contiguous, in order, no gaps or overlaps
    CHECK(c.num_elems >= 1);
    CHECK(c.num_elems * 4 <= std::max<std::int64_t>(partition_bytes, 4));
    const TensorSpec& t = layout.tensors()[static_cast<std::size_t>(c.tensor)];
    CHECK(c.offset >= t.offset);
    CHECK(c.offset + c.num_elems <= t.offset + t.num_elems);
    CHECK(c.server >= 0);
    CHECK(c.server < servers);
    CHECK(again.chunk(c.id).server == c.server);  // deterministic
    bytes[static_cast<std::size_t>(c.server)] += c.num_elems * 4;
    next += c.num_elems;
  }
  CHECK(next == layout.total_elems());
  for (int s = 0; s < servers; ++s) {
    CHECK(map.bytes_of(s) == bytes[static_cast<std::size_t>(s)]);
    for (auto id : map.chunks_of(s)) CHECK(map.chunk(id).server == s);
  }
  // LPT greedy bound: max load <= mean + largest chunk.
  if (!map.chunks().empty()) {
    std::int64_t largest = 0;
    for (const Chunk& c : map.chunks()) largest = std::max(largest, c.num_elems * 4);
    const double mean = static_cast<double>(layout.total_bytes()) / servers;
    CHECK(static_cast<double>(*std::max_element(bytes.begin(), bytes.end())) <= mean + static_cast<double>(largest));
  }
  CHECK(map.balance() >= 1.0);
}

}  // namespace

TEST_CASE("shard map sweep over sizes, servers and partitions") {
  for (std::int64_t size : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, std::int64_t{1000}, std::int64_t{1} << 20}) {
    CAPTURE(size);
    ParamLayout layout;
    if (size > 0) layout.add("w", {size});
    for (int servers = 1; servers <= 3; ++servers) {
      for (std::int64_t part : {std::int64_t{4}, std::int64_t{12}, std::int64_t{4000}, std::int64_t{1} << 20}) {
        if (size > 0 && size * 4 / part > 300000) continue;  // keep the sweep fast
        check_map(layout, servers, part);
      }
    }
  }
}

TEST_CASE("multi-tensor layouts with uneven splits") {
  ParamLayout layout;
  layout.add("conv1.weight", {32, 1, 5, 5});
  layout.add("conv1.bias", {32});
  layout.add("conv2.weight", {64, 32, 5, 5});
  layout.add("conv2.bias", {64});
  layout.add("fc1.weight", {1024, 3136});
  layout.add("fc1.bias", {1024});
  layout.add("fc2.weight", {10, 1024});
  layout.add("fc2.bias", {10});
  for (int servers = 1; servers <= 3; ++servers) {
    check_map(layout, servers, std::int64_t{1} << 20);
    check_map(layout, servers, 999);
  }
  // Balance is limited by chunk granularity: finer partitions balance better.
  ShardMap coarse(layout, 2, std::int64_t{1} << 20);
  ShardMap fine(layout, 2, std::int64_t{1} << 18);
  CHECK(coarse.balance() < 1.07);
  CHECK(fine.balance() < 1.03);
  CHECK(fine.balance() <= coarse.balance());
}

TEST_CASE("chunks split as evenly as possible") {
  ParamLayout layout;
  layout.add("w", {10});
  ShardMap map(layout, 1, 16);  // at most 4 elements: 10 = 4 + 3 + 3
  REQUIRE(map.chunks().size() == 3);
  CHECK(map.chunk(0).num_elems == 4);
  CHECK(map.chunk(1).num_elems == 3);
  CHECK(map.chunk(2).num_elems == 3);
  CHECK(map.chunks_within(0, 10).size() == 3);
  CHECK(map.chunks_within(4, 10) == std::vector<std::int64_t>{1, 2});
  CHECK(map.chunks_within(5, 10) == std::vector<std::int64_t>{2});
}

TEST_CASE("shard map rejects bad arguments") {
  ParamLayout layout;
  layout.add("w", {8});
  CHECK_THROWS_WITH_AS(ShardMap(layout, 0, 1024), doctest::Contains("need at least 1 server, got 0"), ConfigError);
  CHECK_THROWS_WITH_AS(ShardMap(layout, 1, 3), doctest::Contains("partition_bytes must be >= 4, got 3"), ConfigError);
  CHECK_THROWS_WITH_AS(layout.add("w", {2}), doctest::Contains("duplicate tensor name 'w'"), ConfigError);
  CHECK_THROWS_WITH_AS(layout.add("v", {2, -1}), doctest::Contains("tensor 'v' has dimension -1"), ConfigError);
}
