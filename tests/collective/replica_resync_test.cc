// resync_from_leader (worker/collective/replica_resync.h): after a re-form the
// replicas take the most advanced one's weights, optimizer state and progress,
// whatever rank it has, every rank issuing the same operations; replicas of
// different sizes are refused on every rank.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <vector>

#include "collective_test_util.h"
#include "common/base/errors.h"
#include "worker/collective/replica_resync.h"

namespace pstrain {
namespace {

using testing::thrown_text;
using testing::run_ranks;

ReplicaState replica_of(int rank, std::int64_t done, std::size_t params, std::size_t state) {
  ReplicaState s;
  s.done = done;
  s.optimizer_steps = 100 + rank;
  for (std::size_t i = 0; i < params; ++i) s.params.push_back(static_cast<float>(rank) * 1000.0f + static_cast<float>(i));
  for (std::size_t i = 0; i < state; ++i) s.optimizer_state.push_back(-static_cast<float>(rank) - 0.5f * static_cast<float>(i));
  return s;
}

}  // namespace

TEST_CASE("resync: every replica takes the most advanced one's (not rank 0's), the lowest rank among equals") {
  // Rank 0 failed in a step the others completed (its progress is behind); ranks 1 and 2 are equal.
  const std::int64_t done[] = {41, 43, 43};
  std::atomic<int> wrong{0};
  std::mutex m;
  run_ranks(3, [&](int rank, Collective& c) {
    ReplicaState s = replica_of(rank, done[rank], 9098, 9098);
    const ResyncOutcome out = resync_from_leader(c, s);
    const ReplicaState leader = replica_of(1, 43, 9098, 9098);
    // The next operation is in step on every rank: an exact mean.
    std::vector<float> x{static_cast<float>(3 * rank), 6.0f};
    c.allreduce_mean(x.data(), x.size());
    std::lock_guard<std::mutex> lock(m);
    CHECK(out.leader == 1);
    CHECK(out.own_done == done[rank]);
    CHECK(s.done == 43);
    CHECK(s.optimizer_steps == 101);
    wrong += s.params != leader.params ? 1 : 0;
    wrong += s.optimizer_state != leader.optimizer_state ? 1 : 0;
    CHECK(x[0] == 3.0f);
    CHECK(x[1] == 6.0f);
  });
  CHECK(wrong == 0);
}

TEST_CASE("resync: large progress and step counts are exchanged exactly; a lone leader at rank 2 of 3") {
  const std::int64_t big = (std::int64_t{1} << 33) + 12345;  // past float's 24 bits
  std::mutex m;
  run_ranks(3, [&](int rank, Collective& c) {
    ReplicaState s = replica_of(rank, rank == 2 ? big + 1 : big, 5, 0);
    s.optimizer_steps = rank == 2 ? big - 7 : 1;
    const ResyncOutcome out = resync_from_leader(c, s);
    std::lock_guard<std::mutex> lock(m);
    CHECK(out.leader == 2);
    CHECK(s.done == big + 1);
    CHECK(s.optimizer_steps == big - 7);
    CHECK(s.params == replica_of(2, 0, 5, 0).params);
    CHECK(s.optimizer_state.empty());  // none on any rank (momentum 0): nothing broadcast
  });
}

TEST_CASE("resync: the start of a job (progress -1 everywhere) keeps rank 0's replica") {
  std::mutex m;
  run_ranks(2, [&](int rank, Collective& c) {
    ReplicaState s = replica_of(rank, -1, 4, 4);
    const ResyncOutcome out = resync_from_leader(c, s);
    std::lock_guard<std::mutex> lock(m);
    CHECK(out.leader == 0);
    CHECK(s.done == -1);
    CHECK(s.params == replica_of(0, -1, 4, 4).params);
    CHECK(s.optimizer_state == replica_of(0, -1, 4, 4).optimizer_state);
  });
}

TEST_CASE("resync: an optimizer state of another size is an error on every rank, not a stream out of step") {
  std::atomic<int> errors{0};
  run_ranks(3, [&](int rank, Collective& c) {
    ReplicaState s = replica_of(rank, 7, 10, rank == 2 ? 0 : 10);
    const std::string e = thrown_text([&] { resync_from_leader(c, s); });
    if (e.find("rank 2 holds 10 parameters and 0 optimizer values") != std::string::npos) ++errors;
    // All ranks refused before any broadcast: the collective is still in step.
    std::vector<float> x{static_cast<float>(rank)};
    c.allreduce_mean(x.data(), 1);
    CHECK(x[0] == 1.0f);
  });
  CHECK(errors == 3);
}

TEST_CASE("phases: step, checkpoint after it, epoch check, next step, in that order, never equal") {
  // The job's sequence around steps 6 and 7 with an epoch ending after step 6 (7 steps done).
  const std::vector<std::int64_t> order{step_phase(6), checkpoint_phase(6), epoch_check_phase(7), step_phase(7),
                                        checkpoint_phase(7)};
  for (std::size_t i = 1; i < order.size(); ++i) {
    CAPTURE(i);
    CHECK(order[i - 1] < order[i]);
  }
  // The first step comes after "nothing done"; an epoch check of 0 steps is none.
  CHECK(step_phase(0) > -1);
  CHECK(epoch_check_phase(0) < step_phase(0));
  // Resumed at step 8 (the checkpoint after step 7): that checkpoint and the steps before are done,
  // the epoch check after 8 steps and step 8 are not.
  CHECK(resumed_phase(8) == checkpoint_phase(7));
  CHECK(resumed_phase(8) >= step_phase(7));
  CHECK(resumed_phase(8) < epoch_check_phase(8));
  CHECK(resumed_phase(8) < step_phase(8));
  // Distinct everywhere over a range of steps.
  std::set<std::int64_t> seen;
  for (std::int64_t s = 0; s < 100; ++s) {
    CHECK(seen.insert(step_phase(s)).second);
    CHECK(seen.insert(checkpoint_phase(s)).second);
    CHECK(seen.insert(epoch_check_phase(s + 1)).second);
  }
}

}  // namespace pstrain
