// Elastic membership in the consistency policies (server/consistency.h):
// vacant slots are not waited for and not counted missing; a worker joins
// from an announced step (sync: steps before it are collected without it,
// every step from it on waits for it; ssp: its clock starts there); a
// retired worker's slot is vacant again.
#include <doctest/doctest.h>

#include <vector>

#include "common/base/errors.h"
#include "server/consistency.h"
#include "tests/support/throw_text.h"

using namespace pstrain;
using pstrain::test::thrown_text;

namespace {

std::vector<float> g(4, 0.5f);

PushRequest push(int worker, std::int64_t step) {
  PushRequest p;
  p.worker = worker;
  p.step = step;
  p.grad = update::GradSource{g.data(), nullptr, 1, nullptr};
  p.num_elems = g.size();
  p.lr = 0.1;
  return p;
}

}  // namespace

TEST_CASE("sync: a vacant slot is not waited for, a joiner is waited for from its step on, a retiree no more") {
  auto p = make_consistency_policy(ConsistencyOptions{Mode::kSync, 0}, {4}, 3);
  p->vacate(2);
  CHECK(p->num_live() == 2);
  CHECK(p->vacant(2));
  std::int64_t version = 0;
  // Step 0: the two workers of the job complete it; the update is not partial.
  CHECK_FALSE(p->on_push(0, version, push(0, 0)).has_value());
  std::optional<Update> u = p->on_push(0, version, push(1, 0));
  REQUIRE(u.has_value());
  CHECK(u->contributors == 2);
  CHECK_FALSE(u->partial);
  ++version;
  CHECK(thrown_text([&] { p->on_push(0, version, push(2, 1)); }).find("slot is vacant") != std::string::npos);
  // Worker 2 joins from step 3 (the chunk is at step 1).
  const std::vector<std::int64_t> versions{version};
  CHECK(thrown_text([&] { p->join_worker(2, 0, versions); }).find("is at step 1 already") != std::string::npos);
  p->join_worker(2, 3, versions);
  CHECK(thrown_text([&] { p->join_worker(2, 3, versions); }).find("not a vacant slot") != std::string::npos);
  CHECK(p->num_live() == 3);
  for (; version < 3; ++version) {  // steps 1 and 2: without it, and not partial
    CHECK_FALSE(p->on_push(0, version, push(0, version)).has_value());
    u = p->on_push(0, version, push(1, version));
    REQUIRE(u.has_value());
    CHECK(u->contributors == 2);
    CHECK_FALSE(u->partial);
  }
  CHECK_FALSE(p->pull_ready(0, version, 2, 4));
  // Step 3 waits for it.
  CHECK_FALSE(p->on_push(0, version, push(0, 3)).has_value());
  CHECK_FALSE(p->on_push(0, version, push(1, 3)).has_value());
  u = p->on_push(0, version, push(2, 3));
  REQUIRE(u.has_value());
  CHECK(u->contributors == 3);
  CHECK_FALSE(u->partial);
  ++version;
  // Worker 2 retires: its slot is vacant again, the step completes without it and is not partial.
  p->vacate(2);
  CHECK_FALSE(p->on_push(0, version, push(0, 4)).has_value());
  u = p->on_push(0, version, push(1, 4));
  REQUIRE(u.has_value());
  CHECK_FALSE(u->partial);
  // A drop is still a drop: partial, and told so.
  ++version;
  p->drop_worker(1);
  u = p->on_push(0, version, push(0, 5));
  REQUIRE(u.has_value());
  CHECK(u->partial);
  CHECK(thrown_text([&] { p->on_push(0, version, push(1, 5)); }).find("dropped from the job") != std::string::npos);
}

TEST_CASE("sync: a joiner's gradient goes into the rank-ordered sum in its turn") {
  auto p = make_consistency_policy(ConsistencyOptions{Mode::kSync, 0}, {4}, 3);
  p->vacate(1);
  p->join_worker(1, 0, std::vector<std::int64_t>{0});
  // Arrivals 2, 1, 0: the sum is (g0 + g1) + g2 whatever the order.
  CHECK_FALSE(p->on_push(0, 0, push(2, 0)).has_value());
  CHECK_FALSE(p->on_push(0, 0, push(1, 0)).has_value());
  const std::optional<Update> u = p->on_push(0, 0, push(0, 0));
  REQUIRE(u.has_value());
  CHECK(u->contributors == 3);
  CHECK_FALSE(u->partial);
}

TEST_CASE("ssp: a vacant slot holds nobody back; a joiner's clock starts at its step") {
  auto p = make_consistency_policy(ConsistencyOptions{Mode::kSsp, 0}, {4}, 3);
  p->vacate(2);
  for (std::int64_t s = 0; s < 3; ++s) {
    CHECK(p->pull_ready(0, 0, 0, s));
    p->on_push(0, 0, push(0, s));
    p->on_push(0, 0, push(1, s));
  }
  CHECK(p->slowest_clock(0) == 3);
  CHECK(thrown_text([&] { p->join_worker(2, 2, std::vector<std::int64_t>{0}); }).find("is at step 3 already") !=
        std::string::npos);
  p->join_worker(2, 5, std::vector<std::int64_t>{0});
  CHECK(p->worker_clock(0, 2) == 5);
  CHECK(p->slowest_clock(0) == 3);     // the others are the slowest
  CHECK(p->pull_ready(0, 0, 0, 3));    // within the bound of the slowest
  CHECK_FALSE(p->pull_ready(0, 0, 2, 5));  // the joiner waits for the others to reach its step
  CHECK(thrown_text([&] { p->on_push(0, 0, push(2, 3)); }).find("stale") != std::string::npos);
  p->on_push(0, 0, push(2, 5));
  CHECK(p->worker_clock(0, 2) == 6);
}
