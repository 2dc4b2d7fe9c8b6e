// The values an allreduce joiner reads from the scheduler's store
// (worker/train/allreduce_worker.h, AllreduceJoin): "generation step ranks"
// under allreduce_grow_key(change) for a --join (elastic membership), and
// under allreduce_join_key(rank, take) for a --rejoin, or "end".
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/base/errors.h"
#include "tests/support/throw_text.h"
#include "worker/train/allreduce_worker.h"

using namespace pstrain;

TEST_CASE("an allreduce join value round-trips: generation, first step and the collective's workers") {
  const AllreduceJoin grown{{0, 1, 3, 7}, 4, 123456789012};
  CHECK(format_join(grown) == "4 123456789012 0,1,3,7");
  const AllreduceJoin back = parse_join(format_join(grown));
  CHECK(back.live == grown.live);
  CHECK(back.generation == 4);
  CHECK(back.first_step == 123456789012);
  CHECK_FALSE(back.start.has_value());  // the joiner fills in its own start
  CHECK(parse_join("end").live.empty());  // the job ended before it could be taken in
  CHECK(format_join(AllreduceJoin{}) == "end");
}

TEST_CASE("a rejoin value in an elastic job carries the changes decided so far (a fourth field)") {
  AllreduceJoin rejoin{{0, 1, 2}, 5, 77};
  rejoin.changes = 2;
  CHECK(format_join(rejoin) == "5 77 0,1,2 2");
  const AllreduceJoin back = parse_join(format_join(rejoin));
  CHECK(back.live == rejoin.live);
  CHECK(back.generation == 5);
  CHECK(back.first_step == 77);
  CHECK(back.changes == 2);
  CHECK(parse_join("5 77 0,1,2").changes == 0);  // no change decided: three fields, as before
  CHECK_THROWS_AS(parse_join("5 77 0,1,2 0"), ProtocolError);
  CHECK_THROWS_AS(parse_join("5 77 0,1,2 x"), ProtocolError);
  CHECK_THROWS_AS(parse_join("5 77 0,1,2 2 3"), ProtocolError);
}

// A member lost while a generation forms is left out under the same number:
// the namespaces must differ by the members, or survivors that learnt of the
// drop at different moments would read each other's keys at other ranks.
TEST_CASE("a generation's rendezvous namespace: its number and its members") {
  const std::string full = generation_label(2, {0, 1, 2});
  CHECK(full.rfind("2-", 0) == 0);
  CHECK(full.size() == 2 + 16);
  CHECK(generation_label(2, {0, 1, 2}) == full);  // every member computes the same
  CHECK(generation_label(2, {0, 2}) != full);
  CHECK(generation_label(2, {0, 1}) != generation_label(2, {0, 2}));
  CHECK(generation_label(3, {0, 1, 2}) != full);
  CHECK(generation_label(2, {2, 0}) != generation_label(2, {0, 2}));  // in the workers' order, as `live` is
}

TEST_CASE("the grow key names the change; the rejoin key the rank and its take") {
  CHECK(allreduce_grow_key(3) == "allreduce/grow/3");
  CHECK(allreduce_join_key(2, 1) == "allreduce/join/2/1");
  CHECK(allreduce_grow_key(3) != allreduce_grow_key(4));
}

TEST_CASE("a malformed join value is refused naming it") {
  for (const std::string bad : {"", "4", "4 12", "x 12 0,1", "4 y 0,1", "4 12 0,,1"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_join(bad), ProtocolError);
  }
  CHECK(test::thrown_text([] { parse_join("0 12 0,1"); }) == "allreduce join: bad value '0 12 0,1'");
  CHECK(test::thrown_text([] { parse_join("4 -1 0,1"); }) == "allreduce join: bad value '4 -1 0,1'");
  CHECK(test::thrown_text([] { parse_join("4"); }).find("expected 'generation step ranks' or 'end'") != std::string::npos);
}
