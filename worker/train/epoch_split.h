// One worker's samples of one epoch whose members change within it (elastic
// membership, docs/architecture.md "Elastic membership").
//
// The epoch's order is the permutation of its N samples (ShardSampler,
// worker/data/shard_sampler.h). Its segments (EpochMembers::segments) say
// "from the epoch's step S, members M". The first segment is ShardSampler's
// split among its R members, bit for bit: position p of R takes the
// permutation's positions p, p+R, p+2R, ..., padded by wrapping around. After
// S steps of batch B every member has taken S*B of those, so the samples
// trained are exactly the prefix [0, S*B*R) of the permutation. A segment
// from step S with R' members takes the rest the same strided way from that
// offset O: position q takes O+q, O+q+R', ... (past N wrapping to the
// start, ShardSampler's padding), ceil((N-O)/R') samples each, so every
// sample of the epoch is trained once (plus the padding). The epoch's step
// count is S plus the new segment's steps. A change announced at or beyond
// the end of the epoch under the segments before it takes no step of it.
//
// A worker that is not a member of a segment (one that retires at the
// segment's start, one that joins later, or one back from --resume while
// an epoch begun without it ends) is given the shard of position rank % R
// there, as epoch_shard() does; member() tells the caller which.
// Immutable after construction.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "worker/train/epoch_members.h"

namespace pstrain {

// Coverage: what one worker trained of one epoch, as a count and an
// additive checksum of its samples (the sum, mod 2^64, of sample_hash of
// each), so the workers' records of an epoch add up to the epoch's: every
// sample once is sum over i < N of sample_hash(i), plus the padding's.
std::uint64_t sample_hash(std::int64_t index);
struct EpochCoverage {
  std::int64_t samples = 0;
  std::uint64_t checksum = 0;
  void add(std::span<const std::int64_t> batch);
  void add(const EpochCoverage& other) { samples += other.samples, checksum += other.checksum; }
  bool operator==(const EpochCoverage&) const = default;
};
// The checksum written in the "coverage" record: 16 hex digits.
std::string checksum_text(std::uint64_t checksum);

class EpochSplit {
 public:
  // ConfigError for num_samples < 1, batch_size < 1, no segments, or a
  // first segment that does not start at step 0.
  EpochSplit(std::int64_t num_samples, int batch_size, std::uint64_t seed, int epoch,
             const std::vector<EpochSegment>& segments, int rank);

  // The epoch's steps (the same on every worker).
  std::int64_t steps() const { return steps_; }
  // The segments that take steps of this epoch (those that start before its end).
  std::size_t active_segments() const { return parts_.size(); }
  // The segment step b (< steps()) lies in, and this worker's shard there.
  std::size_t segment_at(std::int64_t b) const;
  const EpochShard& shard_at(std::int64_t b) const { return parts_[segment_at(b)].shard; }
  // The first permutation position of segment k (k < active_segments()).
  std::int64_t offset(std::size_t k) const { return parts_[k].offset; }
  // This worker's samples of step b (b < steps()): at most batch_size.
  std::span<const std::int64_t> batch(std::int64_t b) const;

 private:
  struct Part {
    std::int64_t from_step = 0;
    std::int64_t end_step = 0;  // exclusive
    std::int64_t offset = 0;
    EpochShard shard;
    std::vector<std::int64_t> indices;  // this worker's samples of the segment, in order
  };
  int batch_size_;
  std::int64_t steps_ = 0;
  std::vector<Part> parts_;
};

}  // namespace pstrain
