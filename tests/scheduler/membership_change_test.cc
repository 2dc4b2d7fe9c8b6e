// Elastic membership's step boundary, the scheduler's pure part
// (scheduler/membership_change.h): the workers' answers, the boundary chosen
// ahead of every one of them, and the refusals of what is not an answer.
#include <doctest/doctest.h>

#include "common/base/errors.h"
#include "scheduler/membership_change.h"
#include "tests/support/throw_text.h"

using namespace pstrain;
using pstrain::test::thrown_text;

TEST_CASE("a worker's answer is '<epoch> <step> [<global step>]' or 'end'; anything else is refused naming the form") {
  const StepPosition p = parse_step_position("2 7");
  CHECK(p.epoch == 2);
  CHECK(p.step == 7);
  CHECK(p.global == -1);
  CHECK_FALSE(p.end);
  const StepPosition g = parse_step_position("2 7 31");
  CHECK(g.epoch == 2);
  CHECK(g.step == 7);
  CHECK(g.global == 31);
  CHECK(parse_step_position("end").end);
  for (const char* bad : {"", "2", "2 x", "-1 3", "2 -3", "2 3 -4", "2 3 4 5", "2 3 x", "ending"}) {
    CAPTURE(bad);
    CHECK(thrown_text<ProtocolError>([&] { parse_step_position(bad); }).find("expected '<epoch> <step> [<global step>]'") !=
          std::string::npos);
  }
}

TEST_CASE("the boundary is the most advanced answer, at least the epoch's step 1; none when any worker ended") {
  auto b = choose_boundary({{0, 5, false}, {0, 9, false}, {0, 7, false}});
  REQUIRE(b);
  CHECK(b->epoch == 0);
  CHECK(b->from_step == 9);
  b = choose_boundary({{0, 15, false}, {1, 2, false}, {0, 3, false}});  // async: one worker an epoch ahead
  REQUIRE(b);
  CHECK(b->epoch == 1);
  CHECK(b->from_step == 2);
  b = choose_boundary({{3, 0, false}, {2, 15, false}});  // the leader has not begun epoch 3: its step 1
  REQUIRE(b);
  CHECK(b->epoch == 3);
  CHECK(b->from_step == 1);
  // A worker with no step left trained every epoch's shard under the old split: no step is ahead of it.
  CHECK_FALSE(choose_boundary({{1, 4, false}, {0, 0, true}}));
  CHECK_FALSE(choose_boundary({{0, 0, true}, {17, 2, false}}));
  CHECK_FALSE(choose_boundary({{0, 0, true}, {0, 0, true}}));
  // The job's step follows the boundary: one later when it moved to the epoch's step 1.
  b = choose_boundary({{3, 0, false, 30}, {2, 9, false, 29}});
  REQUIRE(b);
  CHECK(b->from_step == 1);
  CHECK(b->global_step == 31);
  b = choose_boundary({{1, 4, false, 14}, {1, 2, false, 12}});
  REQUIRE(b);
  CHECK(b->global_step == 14);
  CHECK(format_decision(MembershipBoundary{1, 4}, {0, 2}) == "1 4 0,2");
  CHECK(format_decision(std::nullopt, {0}) == "none");
  CHECK(format_decision(MembershipBoundary{1, 4}, {0, 1, 2}, "ctl") == "1 4 0,1,2 ctl");
}

TEST_CASE("a change is decided once every live worker answered or has no step left") {
  MembershipChange change(3, {0, 1}, "ctl");
  CHECK(change.report_key(2) == "pstrain/membership/3/2");
  CHECK(change.decision_key() == "pstrain/membership/3");
  change.answer(0, change.report_key(0), "0 6");
  CHECK_FALSE(change.answered_by({0, 1, 2}, {}));
  change.answer(1, change.report_key(1), "0 6");
  CHECK_FALSE(change.answered_by({0, 1, 2}, {}));
  CHECK(change.answered_by({0, 1, 2}, {2}));  // worker 2 waits at the last barrier
  change.answer(2, change.report_key(2), "0 6");
  CHECK(change.answered_by({0, 1, 2}, {}));
  CHECK(change.answered_by({0, 1}, {}));  // worker 2 dropped meanwhile
  const auto b = change.boundary({0, 1, 2});
  REQUIRE(b);
  CHECK(b->from_step == 6);
}

TEST_CASE("a change decided after a live worker finished has no step to change at (async: the others ran ahead)") {
  // As in elastic_grow_test.cc's async 2 -> 4 -> 3 at load 8: workers 1, 2 and 3 ran every epoch
  // while worker 0 lagged in epoch 17; the retire was decided from worker 0's answer alone.
  MembershipChange change(2, {0, 1, 2}, "retire");
  change.answer(0, change.report_key(0), "17 2 259");
  REQUIRE(change.answered_by({0, 1, 2, 3}, {1, 2, 3}));
  CHECK_FALSE(change.boundary({0, 1, 2, 3}));
  CHECK(change.boundary({0}));  // the same answer with no other worker live: its step
}

TEST_CASE("a worker sets only its own answer to the pending change: the decision or another's is refused") {
  MembershipChange change(1, {0}, "ctl");
  CHECK(thrown_text<ProtocolError>([&] { change.answer(0, change.decision_key(), "0 1 0"); })
            .find("a worker sets only its answer") != std::string::npos);
  CHECK_THROWS_AS(change.answer(0, change.report_key(1), "0 1"), ProtocolError);
  CHECK_THROWS_AS(change.answer(0, "pstrain/membership/2/0", "0 1"), ProtocolError);
  CHECK_THROWS_AS(change.answer(0, change.report_key(0), "soon"), ProtocolError);
  CHECK_FALSE(change.answered_by({0}, {}));
}

TEST_CASE("a joiner registered while the answers come is added to the pending change, and removed when it leaves") {
  MembershipChange change(1, {0, 1}, "join");
  change.add_member(3);
  change.add_member(2);
  change.add_member(3);
  CHECK(change.members() == std::vector<int>{0, 1, 2, 3});
  change.remove_member(2);
  CHECK(change.members() == std::vector<int>{0, 1, 3});
}
