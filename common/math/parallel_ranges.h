// Splitting an element loop over contiguous ranges, for the servers'
// parallel apply (server/parallel_apply.h owns the threads; ps.apply_threads).
// A loop written as body(begin, end) over [0, n) gives the same bits however
// it is split when each element's arithmetic depends on that element alone,
// which holds for every loop of common/math/update_rules.h: the optimizers'
// updates, the sync sum's copy and add. The bodies return a count (the
// gradient's non-finite values), summed over the ranges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "common/math/update_rules.h"

namespace pstrain {

// A non-owning reference to a callable std::int64_t(std::size_t begin,
// std::size_t end): no allocation per call (the apply path runs one per
// update). The callable must outlive the reference.
class RangeBody {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeBody>>>
  RangeBody(F&& f)  // NOLINT: implicit, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, std::size_t begin, std::size_t end) -> std::int64_t {
          return (*static_cast<std::remove_reference_t<F>*>(object))(begin, end);
        }) {}
  std::int64_t operator()(std::size_t begin, std::size_t end) const { return call_(object_, begin, end); }

 private:
  void* object_;
  std::int64_t (*call_)(void*, std::size_t, std::size_t);
};

// Runs body over [0, n) as one or more ranges that cover it exactly once and
// returns the sum of what the calls returned; an exception from a call is
// rethrown once every range has ended.
class RangeRunner {
 public:
  virtual ~RangeRunner() = default;
  virtual std::int64_t run(std::size_t n, RangeBody body) = 0;
};

// runner->run(n, body), or body(0, n) on this thread when runner is null.
inline std::int64_t run_ranges(RangeRunner* runner, std::size_t n, RangeBody body) {
  if (runner == nullptr) return body(0, n);
  return runner->run(n, body);
}

// Part `index` of [0, n) split into `parts` ranges whose boundaries are
// multiples of `align` elements (a cache line of floats: the vectorized loops
// start aligned as the whole one did); the last takes the rest. Parts past
// the end are empty. parts >= 1, align >= 1.
struct Range {
  std::size_t begin = 0, end = 0;
};
Range split_range(std::size_t n, std::size_t parts, std::size_t index, std::size_t align = 16);

namespace update {
// g from element `at` on: each of its pointers (f32 or bf16, partial)
// advanced by `at`; mean_of unchanged.
GradSource offset(GradSource g, std::size_t at);
}  // namespace update

}  // namespace pstrain
