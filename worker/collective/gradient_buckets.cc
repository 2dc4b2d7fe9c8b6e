#include "worker/collective/gradient_buckets.h"

#include <algorithm>
#include <string>

#include "common/base/errors.h"

namespace pstrain {

GradientBuckets::GradientBuckets(Collective& collective, float* base, std::int64_t num_elems,
                                 std::int64_t bucket_bytes)
    : collective_(collective), base_(base), num_elems_(num_elems) {
  if (bucket_bytes < 1) {
    throw ConfigError("gradient buckets: bucket_bytes " + std::to_string(bucket_bytes) + ", expected >= 1");
  }
  if (num_elems < 0) {
    throw ConfigError("gradient buckets: num_elems " + std::to_string(num_elems) + ", expected >= 0");
  }
  bucket_elems_ = std::max<std::int64_t>(1, bucket_bytes / static_cast<std::int64_t>(sizeof(float)));
}

bool GradientBuckets::overlaps(std::int64_t begin, std::int64_t end) const {
  auto hit = [&](std::int64_t b, std::int64_t e) { return b < end && begin < e; };
  if (pending_begin_ < pending_end_ && hit(pending_begin_, pending_end_)) return true;
  return std::any_of(started_.begin(), started_.end(), [&](const auto& r) { return hit(r.first, r.second); });
}

void GradientBuckets::ready(std::int64_t offset, std::int64_t count) {
  const std::int64_t end = offset + count;
  std::string range = "range [";  // built piecewise: GCC 12 warns (-Wrestrict) on "[" + std::string
  range += std::to_string(offset) + ", " + std::to_string(end) + ")";
  if (offset < 0 || count < 1 || end > num_elems_) {
    throw ComputeError("gradient buckets: " + range + " is empty or outside the " +
                       std::to_string(num_elems_) + " gradients");
  }
  if (overlaps(offset, end)) {
    throw ComputeError("gradient buckets: " + range + " overlaps a range reported before in this step");
  }
  if (pending_begin_ == pending_end_) {
    pending_begin_ = offset;
    pending_end_ = end;
  } else if (end == pending_begin_) {
    pending_begin_ = offset;  // backward order: the next layer lies just below
  } else if (offset == pending_end_) {
    pending_end_ = end;
  } else {
    start(pending_begin_, pending_end_);
    pending_begin_ = offset;
    pending_end_ = end;
  }
  if (pending_end_ - pending_begin_ >= bucket_elems_) {
    start(pending_begin_, pending_end_);
    pending_begin_ = pending_end_ = 0;
  }
}

std::vector<std::pair<std::int64_t, std::int64_t>> GradientBuckets::unreported() const {
  std::vector<std::pair<std::int64_t, std::int64_t>> covered = started_;
  if (pending_begin_ < pending_end_) covered.emplace_back(pending_begin_, pending_end_);
  std::sort(covered.begin(), covered.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> gaps;
  std::int64_t next = 0;
  for (const auto& [begin, end] : covered) {
    if (begin > next) gaps.emplace_back(next, begin);
    next = std::max(next, end);
  }
  if (next < num_elems_) gaps.emplace_back(next, num_elems_);
  return gaps;
}

void GradientBuckets::finish() {
  const auto gaps = unreported();
  if (pending_begin_ < pending_end_) start(pending_begin_, pending_end_);
  pending_begin_ = pending_end_ = 0;
  for (const auto& [begin, end] : gaps) start(begin, end);
}

void GradientBuckets::start(std::int64_t begin, std::int64_t end) {
  started_.emplace_back(begin, end);
  collective_.start_allreduce_mean(base_ + begin, static_cast<std::size_t>(end - begin));
}

}  // namespace pstrain
