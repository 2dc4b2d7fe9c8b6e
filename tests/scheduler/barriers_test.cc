// scheduler/barriers.h without sockets: who a barrier waits for (dropped and
// done workers), its release, and a rejoined worker's numbering.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/wire/barrier_names.h"
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

TEST_CASE("barriers: after a rejoin the new process enters the open barrier its predecessor had entered") {
  // The repeat check is a flag per rank and barrier: the rejoin clears it with the arrival.
  Barriers b;
  b.arrive(0, 0, "ckpt-1");
  b.arrive(1, 0, "ckpt-1");
  REQUIRE(b.rejoin(1) == std::vector<std::string>{"ckpt-1"});
  CHECK(b.arrive(1, 0, "ckpt-1") == Barriers::Arrival::kEntered);  // open: entered, not passed
  CHECK(b.arrived(0) == std::vector<int>{0, 1});
  CHECK_THROWS_AS(b.arrive(1, 0, "ckpt-1"), ProtocolError);  // and once only
  CHECK(b.release(std::vector<int>{0, 1}, 2) == Seqs{0});
  CHECK_THROWS_AS(b.arrive(-1, 1, ""), ProtocolError);  // no such worker
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

// --- An early done (a done before the job's last barrier), against each barrier kind ---

namespace {
// The barriers a parameter-server job takes, in order (worker/train/ps_worker.cc).
const std::vector<std::string> kKinds{"initial weights", "checkpoint 8", std::string(kFinalBarrier)};
const std::vector<int> kAll{0, 1, 2};
}  // namespace

TEST_CASE("barriers: a done before the job's last barrier strands each kind of barrier the worker never entered") {
  for (std::size_t k = 0; k < kKinds.size(); ++k) {
    CAPTURE(kKinds[k]);
    Barriers b;
    // Every worker passed the barriers before this one.
    for (std::size_t before = 0; before < k; ++before) {
      for (int r : kAll) b.arrive(r, static_cast<std::int64_t>(before), kKinds[before]);
      REQUIRE(b.release(kAll, 3).size() == 1);
    }
    const auto seq = static_cast<std::int64_t>(k);
    b.arrive(0, seq, kKinds[k]);
    b.arrive(2, seq, kKinds[k]);
    CHECK_FALSE(b.stranded(kAll).has_value());  // worker 1 may still come
    b.done(1);
    CHECK(b.done_early(1));
    CHECK_FALSE(b.finished(1));
    const auto s = b.stranded(kAll);
    REQUIRE(s.has_value());
    CHECK(s->rank == 1);
    CHECK(s->barrier == kKinds[k]);
    CHECK(s->waiting == std::vector<int>{0, 2});
    // Dropped (failure policy "continue"): it strands nothing, and the barrier
    // completes with the workers left (done: not waited for either).
    const std::vector<int> left{0, 2};
    CHECK_FALSE(b.stranded(left).has_value());
    CHECK(b.release(left, 2) == Seqs{seq});
  }
}

TEST_CASE("barriers: an early done before anyone waits strands nothing until a worker arrives") {
  Barriers b;
  b.done(1);  // at once after the rendezvous, before worker 0 reached the initial barrier
  CHECK_FALSE(b.stranded(kAll).has_value());
  b.arrive(0, 0, "initial weights");
  const auto s = b.stranded(kAll);
  REQUIRE(s.has_value());
  CHECK(s->rank == 1);
  CHECK(s->barrier == "initial weights");
  CHECK(s->waiting == std::vector<int>{0});
}

TEST_CASE("barriers: an early done does not strand a barrier its worker entered, only the next one") {
  Barriers b;
  b.arrive(1, 0, "initial weights");
  b.done(1);  // entered, then said done
  b.arrive(0, 0, "initial weights");
  CHECK_FALSE(b.stranded(kAll).has_value());
  // Done: not waited for, and its arrival no longer counts (else the
  // barrier would open before worker 2 came).
  CHECK(b.release(kAll, 2).empty());
  b.arrive(2, 0, "initial weights");
  CHECK(b.release(kAll, 2) == Seqs{0});
  b.arrive(0, 1, "checkpoint 8");
  const auto s = b.stranded(kAll);
  REQUIRE(s.has_value());
  CHECK(s->barrier == "checkpoint 8");
  CHECK(s->rank == 1);
}

TEST_CASE("barriers: a done after the final barrier is the end of the worker's job, not an early one") {
  Barriers b;
  for (int r : kAll) b.arrive(r, 0, std::string(kFinalBarrier));
  REQUIRE(b.release(kAll, 3) == Seqs{0});
  for (int r : kAll) CHECK(b.finished(r));
  b.done(0);
  CHECK_FALSE(b.done_early(0));
  // A rejoined worker 1 opens a barrier the others will never take (a
  // checkpoint at its join step): worker 0, done, strands nothing; the
  // barrier waits for the workers not done only (release's waited_for).
  b.rejoin(1);
  CHECK_FALSE(b.finished(1));
  b.arrive(1, 1, "checkpoint 8");
  CHECK_FALSE(b.stranded(kAll).has_value());
  CHECK(b.release(kAll, 2).empty());  // worker 2 not done yet
  CHECK(b.release(kAll, 1) == Seqs{1});  // worker 2 said done (after the final barrier)
}

TEST_CASE("barriers: a rejoiner that passes the final barrier the others finished has finished too") {
  Barriers b;
  b.arrive(0, 0, std::string(kFinalBarrier));
  b.arrive(1, 0, std::string(kFinalBarrier));
  REQUIRE(b.release(std::vector<int>{0, 1}, 2) == Seqs{0});
  b.rejoin(1);
  CHECK(b.arrive(1, 1, std::string(kFinalBarrier)) == Barriers::Arrival::kPassed);
  CHECK(b.finished(1));
  b.done(1);
  CHECK_FALSE(b.done_early(1));
}

TEST_CASE("barriers: a rejoin forgets an early done, and a drop or rejoin of others changes nothing of it") {
  Barriers b;
  b.done(1);
  b.arrive(0, 0, "initial weights");
  REQUIRE(b.stranded(kAll).has_value());
  // Worker 2 dropped (its failure under "continue"): worker 1 still strands the barrier.
  const std::vector<int> without2{0, 1};
  REQUIRE(b.stranded(without2).has_value());
  CHECK(b.stranded(without2)->waiting == std::vector<int>{0});
  // Worker 2 rejoins (a new process): still stranded by worker 1.
  b.rejoin(2);
  CHECK(b.stranded(kAll).has_value());
  // Worker 1 dropped, then taken back by a new process: it is no longer done.
  b.rejoin(1);
  CHECK_FALSE(b.done_early(1));
  CHECK_FALSE(b.stranded(kAll).has_value());
  b.arrive(1, 0, "initial weights");
  b.arrive(2, 0, "initial weights");
  CHECK(b.release(kAll, 3) == Seqs{0});
}

TEST_CASE("barriers: the lowest barrier and the lowest early done are named first; the early done's own arrival is not a wait") {
  Barriers b;
  b.arrive(2, 1, "checkpoint 8");
  b.done(2);  // early, but entered barrier 1: it waits for nobody
  b.done(1);
  CHECK_FALSE(b.stranded(kAll).has_value());  // at barrier 1 only worker 2 arrived, and it is done
  b.arrive(0, 0, "initial weights");
  const auto s = b.stranded(kAll);
  REQUIRE(s.has_value());
  CHECK(s->barrier == "initial weights");
  CHECK(s->rank == 1);
}

TEST_CASE("barriers: at 1,024 workers with dropped ranks, an early done strands the barrier its waiters are at") {
  // The live list is sorted with holes (dropped ranks): stranded() looks ranks up in it by
  // binary search, and answers nothing at once while no worker said done early.
  std::vector<int> in_job;
  for (int r = 0; r < 1024; ++r) {
    if (r % 100 != 99) in_job.push_back(r);  // 99, 199, ... dropped
  }
  Barriers b;
  for (int r : in_job) {
    if (r != 500) b.arrive(r, 0, "checkpoint 3");
  }
  b.arrive(199, 0, "checkpoint 3");  // a dropped worker's arrival: not a waiter
  CHECK_FALSE(b.stranded(in_job).has_value());  // nobody said done early
  b.done(999);                                  // dropped: its early done strands nothing
  CHECK_FALSE(b.stranded(in_job).has_value());
  b.done(500);
  const auto s = b.stranded(in_job);
  REQUIRE(s.has_value());
  CHECK(s->rank == 500);
  CHECK(s->barrier == "checkpoint 3");
  CHECK(s->waiting.size() == in_job.size() - 1);
  CHECK(std::find(s->waiting.begin(), s->waiting.end(), 199) == s->waiting.end());
  CHECK(std::is_sorted(s->waiting.begin(), s->waiting.end()));
}

TEST_CASE("barriers: the highest checkpoint released, every one once the final barrier is (a rejoiner's part)") {
  Barriers b;
  const std::vector<int> all{0, 1};
  CHECK(b.checkpoint_released() == 0);
  CHECK(checkpoint_step_of("checkpoint 12") == 12);
  CHECK(checkpoint_step_of("checkpoint 12x") == -1);
  CHECK(checkpoint_step_of("initial weights") == -1);
  for (const int r : all) b.arrive(r, 0, "initial weights");
  b.release(all, 2);
  CHECK(b.checkpoint_released() == 0);
  for (const int r : all) b.arrive(r, 1, "checkpoint 4");
  b.release(all, 2);
  CHECK(b.checkpoint_released() == 4);
  for (const int r : all) b.arrive(r, 2, std::string(kFinalBarrier));
  b.release(all, 2);
  CHECK(b.last_released() == kFinalBarrier);
  CHECK(b.checkpoint_released() == std::numeric_limits<std::int64_t>::max());
}
