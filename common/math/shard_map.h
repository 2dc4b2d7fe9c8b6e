// The shard map: which server holds which part of the flat parameter buffer.
// Each tensor is split into chunks of at most `partition_bytes` (sizes as
// equal as possible, never crossing a tensor boundary, so a layer's chunks are
// ready as soon as its gradients are). Chunks go to servers by longest-
// processing-time greedy: largest first, each to the server with the fewest
// bytes so far (ties: lowest rank). The construction is a pure function of
// (layout, num_servers, partition_bytes), so every node derives the same map.
// A chunk's id is its position in the flat buffer order; it is the "key" of
// push and pull messages. Immutable after construction; thread-safe to read.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/math/param_layout.h"

namespace pstrain {

struct Chunk {
  std::int64_t id = 0;
  std::int64_t offset = 0;     // elements, into the flat buffer
  std::int64_t num_elems = 0;
  std::int32_t tensor = 0;     // index into the layout's tensors
  std::int32_t server = 0;
};

class ShardMap {
 public:
  ShardMap() = default;
  // Throws ConfigError if num_servers < 1 or partition_bytes < 4.
  ShardMap(const ParamLayout& layout, int num_servers, std::int64_t partition_bytes);

  int num_servers() const { return num_servers_; }
  std::int64_t total_elems() const { return total_elems_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  const Chunk& chunk(std::int64_t id) const { return chunks_.at(static_cast<std::size_t>(id)); }
  // Chunk ids held by `server`, in increasing order.
  const std::vector<std::int64_t>& chunks_of(int server) const { return by_server_.at(static_cast<std::size_t>(server)); }
  std::int64_t bytes_of(int server) const { return bytes_.at(static_cast<std::size_t>(server)); }
  // Max over mean of bytes per server (1.0 is perfect; 1.0 for an empty model).
  double balance() const;
  // Ids of the chunks that lie entirely inside elements [begin, end).
  std::vector<std::int64_t> chunks_within(std::int64_t begin, std::int64_t end) const;
  // A one-paragraph human summary: chunks, bytes per server, balance.
  std::string summary() const;

 private:
  int num_servers_ = 0;
  std::int64_t total_elems_ = 0;
  std::vector<Chunk> chunks_;
  std::vector<std::vector<std::int64_t>> by_server_;
  std::vector<std::int64_t> bytes_;
};

}  // namespace pstrain
