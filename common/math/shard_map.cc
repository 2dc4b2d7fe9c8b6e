#include "common/math/shard_map.h"

#include <algorithm>
#include <numeric>

#include "common/base/errors.h"

namespace pstrain {

ShardMap::ShardMap(const ParamLayout& layout, int num_servers, std::int64_t partition_bytes)
    : num_servers_(num_servers), total_elems_(layout.total_elems()) {
  if (num_servers < 1) throw ConfigError("shard map: need at least 1 server, got " + std::to_string(num_servers));
  if (partition_bytes < static_cast<std::int64_t>(sizeof(float))) {
    throw ConfigError("shard map: partition_bytes must be >= 4, got " + std::to_string(partition_bytes));
  }
  const std::int64_t max_chunk_elems = partition_bytes / static_cast<std::int64_t>(sizeof(float));
  const auto& tensors = layout.tensors();
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const std::int64_t n = tensors[t].num_elems;
    if (n == 0) continue;
    const std::int64_t pieces = (n + max_chunk_elems - 1) / max_chunk_elems;
    const std::int64_t base = n / pieces, extra = n % pieces;  // first `extra` pieces get one more
    std::int64_t offset = tensors[t].offset;
    for (std::int64_t p = 0; p < pieces; ++p) {
      const std::int64_t size = base + (p < extra ? 1 : 0);
      chunks_.push_back(Chunk{static_cast<std::int64_t>(chunks_.size()), offset, size, static_cast<std::int32_t>(t), 0});
      offset += size;
    }
  }
  // Longest-processing-time greedy assignment, deterministic.
  std::vector<std::size_t> order(chunks_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return chunks_[a].num_elems > chunks_[b].num_elems; });
  bytes_.assign(static_cast<std::size_t>(num_servers), 0);
  for (std::size_t i : order) {
    const auto lightest = static_cast<std::size_t>(std::min_element(bytes_.begin(), bytes_.end()) - bytes_.begin());
    chunks_[i].server = static_cast<std::int32_t>(lightest);
    bytes_[lightest] += chunks_[i].num_elems * static_cast<std::int64_t>(sizeof(float));
  }
  by_server_.assign(static_cast<std::size_t>(num_servers), {});
  for (const Chunk& c : chunks_) by_server_[static_cast<std::size_t>(c.server)].push_back(c.id);
}

double ShardMap::balance() const {
  if (bytes_.empty()) return 1.0;
  const std::int64_t total = std::accumulate(bytes_.begin(), bytes_.end(), std::int64_t{0});
  if (total == 0) return 1.0;
  const double mean = static_cast<double>(total) / static_cast<double>(bytes_.size());
  return static_cast<double>(*std::max_element(bytes_.begin(), bytes_.end())) / mean;
}

std::vector<std::int64_t> ShardMap::chunks_within(std::int64_t begin, std::int64_t end) const {
  // Chunks are sorted by offset: binary search for the first one starting at or after `begin`.
  auto it = std::lower_bound(chunks_.begin(), chunks_.end(), begin,
                             [](const Chunk& c, std::int64_t value) { return c.offset < value; });
  std::vector<std::int64_t> ids;
  for (; it != chunks_.end() && it->offset + it->num_elems <= end; ++it) ids.push_back(it->id);
  return ids;
}

std::string ShardMap::summary() const {
  std::string s = std::to_string(chunks_.size()) + " chunks over " + std::to_string(num_servers_) + " servers; MB per server:";
  for (std::size_t i = 0; i < bytes_.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), " %.3f", static_cast<double>(bytes_[i]) / 1e6);
    s += buf;
  }
  char buf[48];
  std::snprintf(buf, sizeof(buf), "; balance (max/mean) %.3f", balance());
  return s + buf;
}

}  // namespace pstrain
