// Splitting an epoch's sample indices (e.g. ShardSampler::indices) into
// consecutive mini-batches of batch_size indices, in order. The last batch
// holds the remainder: kept as a smaller batch, or dropped when drop_last.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pstrain::data {

// How many batches split_batches returns. Throws ConfigError for
// batch_size < 1 or num_indices < 0.
std::int64_t num_batches(std::int64_t num_indices, std::int64_t batch_size, bool drop_last);

// The batches themselves, copied. Throws ConfigError for batch_size < 1.
std::vector<std::vector<std::int64_t>> split_batches(std::span<const std::int64_t> indices,
                                                     std::int64_t batch_size, bool drop_last);

}  // namespace pstrain::data
