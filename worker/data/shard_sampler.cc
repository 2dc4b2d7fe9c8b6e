#include "worker/data/shard_sampler.h"

#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "common/base/errors.h"
#include "worker/data/portable_random.h"

namespace pstrain::data {

namespace {

void check_epoch(int epoch) {
  if (epoch < 0) throw ConfigError("shard sampler: epoch " + std::to_string(epoch) + " < 0");
}

std::int64_t samples_per_replica(std::int64_t num_samples, int num_replicas, bool drop_last) {
  return drop_last ? num_samples / num_replicas : (num_samples + num_replicas - 1) / num_replicas;
}

}  // namespace

std::vector<std::int64_t> epoch_permutation(std::int64_t num_samples, std::uint64_t seed,
                                            int epoch) {
  if (num_samples < 1) {
    throw ConfigError("epoch permutation: num_samples " + std::to_string(num_samples) + " < 1");
  }
  check_epoch(epoch);
  std::vector<std::int64_t> order(static_cast<std::size_t>(num_samples));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::mt19937_64 engine(mix_seed(seed, static_cast<std::uint64_t>(epoch)));
  for (std::int64_t i = num_samples - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(uniform_below(engine, static_cast<std::uint64_t>(i + 1)));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

ShardSampler::ShardSampler(std::int64_t num_samples, int num_replicas, int rank,
                           std::uint64_t seed, bool shuffle, bool drop_last)
    : num_samples_(num_samples),
      num_replicas_(num_replicas),
      rank_(rank),
      seed_(seed),
      shuffle_(shuffle),
      per_replica_(0) {
  const std::string what = "shard sampler (num_samples " + std::to_string(num_samples) +
                           ", num_replicas " + std::to_string(num_replicas) + ", rank " +
                           std::to_string(rank) + ")";
  if (num_samples < 1) throw ConfigError(what + ": num_samples must be >= 1");
  if (num_replicas < 1) throw ConfigError(what + ": num_replicas must be >= 1");
  if (rank < 0 || rank >= num_replicas) {
    throw ConfigError(what + ": rank " + std::to_string(rank) + " outside [0, " +
                      std::to_string(num_replicas) + ")");
  }
  if (drop_last && num_samples < num_replicas) {
    throw ConfigError(what + ": drop_last with fewer samples than replicas leaves every shard empty");
  }
  per_replica_ = samples_per_replica(num_samples, num_replicas, drop_last);
}

std::vector<std::int64_t> ShardSampler::indices(int epoch) const {
  check_epoch(epoch);
  std::vector<std::int64_t> order;
  if (shuffle_) {
    order = epoch_permutation(num_samples_, seed_, epoch);
  } else {
    order.resize(static_cast<std::size_t>(num_samples_));
    std::iota(order.begin(), order.end(), std::int64_t{0});
  }
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(per_replica_));
  for (std::int64_t k = 0; k < per_replica_; ++k) {
    const std::int64_t position = rank_ + k * num_replicas_;  // < total_size()
    mine.push_back(order[static_cast<std::size_t>(position % num_samples_)]);
  }
  return mine;
}

}  // namespace pstrain::data
