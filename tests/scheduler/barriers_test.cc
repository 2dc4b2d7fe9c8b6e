// scheduler/barriers.h without sockets: who a barrier waits for (dropped and
// done workers), its release, and a rejoined worker's numbering.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/base/errors.h"
#include "scheduler/barriers.h"

using namespace pstrain;

using Seqs = std::vector<std::int64_t>;

TEST_CASE("barriers: a barrier is released when every worker in the job has arrived, not before") {
  Barriers b;
  const std::vector<int> all{0, 1, 2};
  CHECK(b.arrive(0, 0, "ckpt-a") == Barriers::Arrival::kEntered);
  CHECK(b.arrive(2, 0, "") == Barriers::Arrival::kEntered);
  CHECK(b.release(all, 3).empty());
  CHECK(b.arrived(0) == std::vector<int>{0, 2});
  CHECK(b.next_seq() == 0);
  b.arrive(1, 0, "ckpt-b");
  CHECK(b.release(all, 3) == Seqs{0});
  CHECK(b.next_seq() == 1);
  CHECK(b.last_released() == "ckpt-a");  // the first arrival names it
  CHECK(b.arrived(0).empty());
  CHECK(b.release(all, 3).empty());  // released once
}

TEST_CASE("barriers: a dropped member is not waited for, and its arrival does not count") {
  Barriers b;
  b.arrive(0, 0, "x");
  b.arrive(2, 0, "x");
  // Worker 2 is dropped: the barrier waits for 0 and 1; 2's arrival is not 1's.
  CHECK(b.release(std::vector<int>{0, 1}, 2).empty());
  // Worker 1 is dropped instead: 0 and 2 are all the barrier waits for.
  CHECK(b.release(std::vector<int>{0, 2}, 2) == Seqs{0});
}

TEST_CASE("barriers: a done worker is not waited for; barriers complete in order") {
  Barriers b;
  b.arrive(0, 0, "first");
  b.arrive(0, 1, "second");
  CHECK(b.release(std::vector<int>{0, 1}, 2).empty());
  // Worker 1 is done: it has passed every barrier.
  CHECK(b.release(std::vector<int>{0, 1}, 1) == Seqs{0, 1});
  CHECK(b.next_seq() == 2);
  CHECK(b.last_released() == "second");
}

TEST_CASE("barriers: entering the same barrier twice is refused") {
  Barriers b;
  b.arrive(1, 4, "");
  CHECK_THROWS_AS(b.arrive(1, 4, ""), ProtocolError);
  CHECK(b.arrived(4) == std::vector<int>{1});
}

TEST_CASE("barriers: a rejoin forgets the failed process's arrivals at open barriers") {
  Barriers b;
  b.arrive(0, 0, "ckpt-1");
  b.arrive(1, 0, "ckpt-1");
  b.arrive(1, 1, "");
  CHECK(b.rejoin(1) == std::vector<std::string>{"ckpt-1", ""});
  CHECK(b.arrived(0) == std::vector<int>{0});
  CHECK(b.arrived(1).empty());
  CHECK(b.release(std::vector<int>{0, 1}, 2).empty());  // waits for the new process
  CHECK(b.rejoin(2).empty());
}

TEST_CASE("barriers: a rejoiner passes the checkpoint the others finished, then runs one ahead") {
  Barriers b;
  b.arrive(0, 0, "ckpt-a");
  b.arrive(1, 0, "ckpt-a");
  REQUIRE(b.release(std::vector<int>{0, 1}, 2) == Seqs{0});
  b.rejoin(1);  // its numbers start at next_seq() = 1
  CHECK(b.arrive(1, 1, "ckpt-a") == Barriers::Arrival::kPassed);
  CHECK(b.arrived(1).empty());
  // Its next barrier, numbered 2, is the others' 1.
  b.arrive(1, 2, "ckpt-b");
  CHECK(b.arrived(1) == std::vector<int>{1});
  b.arrive(0, 1, "ckpt-b");
  CHECK(b.release(std::vector<int>{0, 1}, 2) == Seqs{1});
  CHECK(b.key_for(0, 1) == 1);
  CHECK(b.key_for(1, 1) == 2);  // in its own numbering
}

TEST_CASE("barriers: a rejoiner's first barrier of another name, or one still open, is an ordinary arrival") {
  Barriers b;
  b.arrive(0, 0, "ckpt-a");
  b.arrive(1, 0, "ckpt-a");
  b.release(std::vector<int>{0, 1}, 2);
  b.rejoin(1);
  CHECK(b.arrive(1, 1, "ckpt-b") == Barriers::Arrival::kEntered);
  CHECK(b.key_for(1, 1) == 1);
  // Realigned once only: a later arrival named like the last released one counts.
  b.arrive(0, 1, "ckpt-b");
  b.release(std::vector<int>{0, 1}, 2);
  CHECK(b.arrive(1, 2, "ckpt-b") == Barriers::Arrival::kEntered);

  Barriers open;
  open.arrive(0, 0, "ckpt-a");
  open.arrive(1, 0, "ckpt-a");
  open.release(std::vector<int>{0, 1}, 2);
  open.arrive(0, 1, "ckpt-a");  // the others are at barrier 1 already
  open.rejoin(1);
  CHECK(open.arrive(1, 1, "ckpt-a") == Barriers::Arrival::kEntered);
  CHECK(open.release(std::vector<int>{0, 1}, 2) == Seqs{1});
}

TEST_CASE("barriers: 1,024 workers, a dropped one's arrival among them: released at the last live arrival only") {
  Barriers b;
  std::vector<int> in_job;  // ascending, worker 7 dropped
  for (int r = 0; r < 1024; ++r) {
    if (r != 7) in_job.push_back(r);
  }
  b.arrive(7, 0, "step");  // arrived before it was dropped: does not count
  for (int r = 1023; r >= 1; --r) {
    if (r == 7) continue;
    b.arrive(r, 0, "step");
    CHECK(b.release(in_job, 1023).empty());  // 1,022 live arrivals at most so far
  }
  b.arrive(0, 0, "step");  // 1,024 arrivals, 1,023 of them live
  CHECK(b.release(in_job, 1023) == Seqs{0});
  CHECK(b.release(in_job, 1023).empty());
}
