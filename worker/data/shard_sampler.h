// Splits a dataset's sample indices among data-parallel replicas, epoch by
// epoch, like PyTorch's DistributedSampler.
//
// For an epoch, every rank computes the same order of all N samples: a
// Fisher-Yates shuffle of 0..N-1 driven by std::mt19937_64 seeded with
// mix_seed(seed, epoch) and unbiased bounded integers (portable_random.h),
// so the order depends only on (N, seed, epoch), identical on every machine
// and standard library; or 0..N-1 when shuffle is off. The order is then
// padded by wrapping around to total_size() = R * ceil(N / R) entries, or
// truncated to R * floor(N / R) when drop_last. Rank r takes positions
// r, r + R, r + 2R, ...: shards are equal-sized and disjoint apart from the
// padding, and together cover every sample (all but the dropped ones).
//
// Immutable after construction: indices() may be called from any thread.
#pragma once

#include <cstdint>
#include <vector>

namespace pstrain::data {

// The order of 0..num_samples-1 for `epoch` (the shuffle described above).
// Throws ConfigError for num_samples < 1 or epoch < 0.
std::vector<std::int64_t> epoch_permutation(std::int64_t num_samples, std::uint64_t seed,
                                            int epoch);

class ShardSampler {
 public:
  // Throws ConfigError naming the values for num_samples < 1,
  // num_replicas < 1, rank outside [0, num_replicas), or drop_last with
  // fewer samples than replicas (every shard would be empty).
  ShardSampler(std::int64_t num_samples, int num_replicas, int rank, std::uint64_t seed,
               bool shuffle = true, bool drop_last = false);

  // This rank's sample indices for `epoch` (>= 0, else ConfigError), in the
  // order to visit them; num_samples_per_replica() entries.
  std::vector<std::int64_t> indices(int epoch) const;

  std::int64_t num_samples_per_replica() const { return per_replica_; }
  std::int64_t total_size() const { return per_replica_ * num_replicas_; }
  std::int64_t num_samples() const { return num_samples_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

 private:
  std::int64_t num_samples_;
  int num_replicas_;
  int rank_;
  std::uint64_t seed_;
  bool shuffle_;
  std::int64_t per_replica_;
};

}  // namespace pstrain::data
