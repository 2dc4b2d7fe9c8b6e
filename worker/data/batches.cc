#include "worker/data/batches.h"

#include <algorithm>
#include <string>

#include "common/base/errors.h"

namespace pstrain::data {

std::int64_t num_batches(std::int64_t num_indices, std::int64_t batch_size, bool drop_last) {
  if (batch_size < 1) {
    throw ConfigError("batching: batch_size " + std::to_string(batch_size) + " < 1");
  }
  if (num_indices < 0) {
    throw ConfigError("batching: num_indices " + std::to_string(num_indices) + " < 0");
  }
  return drop_last ? num_indices / batch_size : (num_indices + batch_size - 1) / batch_size;
}

std::vector<std::vector<std::int64_t>> split_batches(std::span<const std::int64_t> indices,
                                                     std::int64_t batch_size, bool drop_last) {
  const auto num_indices = static_cast<std::int64_t>(indices.size());
  const std::int64_t count = num_batches(num_indices, batch_size, drop_last);
  std::vector<std::vector<std::int64_t>> batches;
  batches.reserve(static_cast<std::size_t>(count));
  for (std::int64_t b = 0; b < count; ++b) {
    const std::int64_t begin = b * batch_size;
    const std::int64_t end = std::min(begin + batch_size, num_indices);
    batches.emplace_back(indices.begin() + begin, indices.begin() + end);
  }
  return batches;
}

}  // namespace pstrain::data
