// DDP-style gradient buckets for one training step. Backward reports the
// gradient ranges it has finished (Model::train_step's on_grads_ready, last
// layer first); adjacent ranges are gathered into a bucket, and a bucket is
// handed to Collective::start_allreduce_mean as soon as it holds at least
// bucket_bytes, so its allreduce runs while backward goes on. finish()
// starts the last, partly filled bucket and every part of [0, num_elems)
// that was never reported, so each element is averaged exactly once.
// A layer's range is never split. Every rank reports the same ranges in the
// same order, so all ranks form the same buckets (a collective's contract).
// One object per step; not thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "worker/collective/collective.h"

namespace pstrain {

class GradientBuckets {
 public:
  // `base` points to num_elems gradients in the collective's memory space.
  // Throws ConfigError for bucket_bytes < 1 or num_elems < 0.
  GradientBuckets(Collective& collective, float* base, std::int64_t num_elems, std::int64_t bucket_bytes);

  // [offset, offset + count) of `base` is final. Throws ComputeError for a
  // range outside [0, num_elems), empty, or overlapping an earlier one.
  void ready(std::int64_t offset, std::int64_t count);
  // The parts of [0, num_elems) not reported so far (what finish() will
  // start besides the pending bucket), in increasing order.
  std::vector<std::pair<std::int64_t, std::int64_t>> unreported() const;
  // Starts whatever is not started yet. Call once, after backward.
  void finish();

  int buckets_started() const { return static_cast<int>(started_.size()); }
  // [begin, end) element ranges of the buckets, in the order they were started.
  const std::vector<std::pair<std::int64_t, std::int64_t>>& buckets() const { return started_; }

 private:
  void start(std::int64_t begin, std::int64_t end);
  bool overlaps(std::int64_t begin, std::int64_t end) const;

  Collective& collective_;
  float* base_;
  std::int64_t num_elems_;
  std::int64_t bucket_elems_;
  std::int64_t pending_begin_ = 0, pending_end_ = 0;  // empty when equal
  std::vector<std::pair<std::int64_t, std::int64_t>> started_;
};

}  // namespace pstrain
