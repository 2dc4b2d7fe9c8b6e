#include "worker/train/epoch_split.h"

#include <algorithm>
#include <string>

#include "common/base/errors.h"
#include "worker/data/shard_sampler.h"

namespace pstrain {

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
}  // namespace

std::uint64_t sample_hash(std::int64_t index) {  // splitmix64's finalizer
  auto z = static_cast<std::uint64_t>(index) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void EpochCoverage::add(std::span<const std::int64_t> batch) {
  samples += static_cast<std::int64_t>(batch.size());
  for (const std::int64_t i : batch) checksum += sample_hash(i);
}

std::string checksum_text(std::uint64_t checksum) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int d = 15; d >= 0; --d, checksum >>= 4) text[static_cast<std::size_t>(d)] = kDigits[checksum & 15];
  return text;
}

EpochSplit::EpochSplit(std::int64_t num_samples, int batch_size, std::uint64_t seed, int epoch,
                       const std::vector<EpochSegment>& segments, int rank)
    : batch_size_(batch_size) {
  const std::string what = "epoch " + std::to_string(epoch) + " split";
  if (num_samples < 1 || batch_size < 1) throw ConfigError(what + ": needs samples and a batch size >= 1");
  if (segments.empty() || segments.front().from_step != 0) {
    throw ConfigError(what + ": the first segment must start at the epoch's step 0");
  }
  // The first segment: ShardSampler's split, bit for bit.
  Part first;
  first.shard = epoch_shard(segments.front().members, rank);
  first.indices = data::ShardSampler(num_samples, first.shard.replicas, first.shard.position, seed).indices(epoch);
  first.end_step = ceil_div(static_cast<std::int64_t>(first.indices.size()), batch_size);
  parts_.push_back(std::move(first));
  std::vector<std::int64_t> order;  // the epoch's permutation, made for the first later segment
  for (std::size_t k = 1; k < segments.size(); ++k) {
    Part& previous = parts_.back();
    const std::int64_t from = segments[k].from_step;
    if (from <= previous.from_step) throw ConfigError(what + ": segments out of order");
    if (from >= previous.end_step) break;  // announced past the epoch's end: takes none of its steps
    Part part;
    part.from_step = from;
    part.offset = previous.offset + (from - previous.from_step) * batch_size * previous.shard.replicas;
    part.shard = epoch_shard(segments[k].members, rank);
    if (order.empty()) order = data::epoch_permutation(num_samples, seed, epoch);
    const std::int64_t replicas = part.shard.replicas;
    const std::int64_t per_replica = ceil_div(num_samples - part.offset, replicas);
    part.indices.reserve(static_cast<std::size_t>(per_replica));
    for (std::int64_t j = 0; j < per_replica; ++j) {
      const std::int64_t position = part.offset + part.shard.position + j * replicas;
      part.indices.push_back(order[static_cast<std::size_t>(position % num_samples)]);
    }
    part.end_step = from + ceil_div(per_replica, batch_size);
    previous.end_step = from;
    parts_.push_back(std::move(part));
  }
  steps_ = parts_.back().end_step;
}

std::size_t EpochSplit::segment_at(std::int64_t b) const {
  if (b < 0 || b >= steps_) {
    throw ConfigError("epoch split: step " + std::to_string(b) + " outside the epoch's [0, " + std::to_string(steps_) +
                      ")");
  }
  std::size_t k = parts_.size() - 1;
  while (parts_[k].from_step > b) --k;
  return k;
}

std::span<const std::int64_t> EpochSplit::batch(std::int64_t b) const {
  const Part& part = parts_[segment_at(b)];
  const auto begin = static_cast<std::size_t>((b - part.from_step) * batch_size_);
  const auto end = std::min(part.indices.size(), begin + static_cast<std::size_t>(batch_size_));
  return std::span<const std::int64_t>(part.indices).subspan(begin, end - begin);
}

}  // namespace pstrain
