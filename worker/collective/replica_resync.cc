#include "worker/collective/replica_resync.h"

#include <cmath>
#include <string>

#include "common/base/errors.h"

namespace pstrain {
namespace {

// Each rank's slot in the exchange: four non-negative integers below 2^40,
// each as two floats of at most 20 bits. A 20-bit value is exact in float;
// the sum of one value and zeros is exact, and the mean's division and the
// multiplication back round by a relative 2^-24 each: at most
// 2^20 x 2^-23 = 1/8 off, so llround recovers the value exactly (24-bit
// halves would not be safe: that bound would be 2).
constexpr std::size_t kFields = 4;
constexpr std::int64_t kLowBits = 20;
constexpr std::int64_t kLowMask = (std::int64_t{1} << kLowBits) - 1;

void put(std::vector<float>& slots, std::size_t at, std::int64_t value) {
  if (value < 0 || value >= (std::int64_t{1} << (2 * kLowBits))) {
    throw ComputeError("replica resync: value " + std::to_string(value) + " out of range for the progress exchange");
  }
  slots[2 * at] = static_cast<float>(value >> kLowBits);
  slots[2 * at + 1] = static_cast<float>(value & kLowMask);
}

std::int64_t get(const std::vector<float>& sums, std::size_t at) {
  return (std::llround(sums[2 * at]) << kLowBits) + std::llround(sums[2 * at + 1]);
}

void run_on(const OnCollectiveMemory& on_memory, std::span<float> host, const std::function<void(float*)>& op) {
  if (on_memory) {
    on_memory(host, op);
  } else {
    op(host.data());
  }
}

}  // namespace

ResyncOutcome resync_from_leader(Collective& collective, ReplicaState& state, const OnCollectiveMemory& on_memory,
                                 const std::function<void()>& wait) {
  const int size = collective.size();
  const auto ranks = static_cast<std::size_t>(size);
  const auto me = static_cast<std::size_t>(collective.rank());

  // 1. Everyone's progress and sizes, each rank in its own slot (zeros elsewhere: the mean times size is the value).
  std::vector<float> slots(ranks * kFields * 2, 0.0f);
  put(slots, me * kFields + 0, state.done + 1);
  put(slots, me * kFields + 1, state.optimizer_steps);
  put(slots, me * kFields + 2, static_cast<std::int64_t>(state.params.size()));
  put(slots, me * kFields + 3, static_cast<std::int64_t>(state.optimizer_state.size()));
  run_on(on_memory, slots, [&](float* data) {
    if (!wait) return collective.allreduce_mean(data, slots.size());
    collective.start_allreduce_mean(data, slots.size());
    wait();
  });
  for (float& v : slots) v *= static_cast<float>(size);

  // 2. The leader: the most advanced replica, the lowest rank among equals. Every rank computes the same.
  ResyncOutcome out;
  out.own_done = state.done;
  std::int64_t best = -1;
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::int64_t done = get(slots, r * kFields);
    if (done > best) best = done, out.leader = static_cast<int>(r);
  }
  const auto leader = static_cast<std::size_t>(out.leader);
  const std::int64_t params = get(slots, leader * kFields + 2);
  const std::int64_t optimizer_values = get(slots, leader * kFields + 3);
  for (std::size_t r = 0; r < ranks; ++r) {
    if (get(slots, r * kFields + 2) != params || get(slots, r * kFields + 3) != optimizer_values) {
      throw ComputeError("replica resync: rank " + std::to_string(r) + " holds " +
                         std::to_string(get(slots, r * kFields + 2)) + " parameters and " +
                         std::to_string(get(slots, r * kFields + 3)) + " optimizer values, the leader (rank " +
                         std::to_string(out.leader) + ") " + std::to_string(params) + " and " +
                         std::to_string(optimizer_values) + ": the replicas cannot be made one");
    }
  }

  // 3. The leader's replica to all (sizes agreed above, so every rank issues the same operations).
  if (params > 0) {
    run_on(on_memory, state.params,
           [&](float* data) { collective.broadcast(data, state.params.size(), out.leader); });
  }
  if (optimizer_values > 0) {
    run_on(on_memory, state.optimizer_state,
           [&](float* data) { collective.broadcast(data, state.optimizer_state.size(), out.leader); });
  }
  state.done = best - 1;
  state.optimizer_steps = get(slots, leader * kFields + 1);
  return out;
}

}  // namespace pstrain
