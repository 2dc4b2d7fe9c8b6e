// A worker that a shrink leaves out while it is down under
// cluster.on_worker_failure = "restart" (issue 29; docs/architecture.md,
// "Elastic membership"): its new process must not undo the shrink. Over real
// tcp sockets in one process, a scheduler and a server as threads, workers
// registered by hand act out each order: the retiree stopped before it
// answered the change, dropped, then its rejoin; a request for fewer workers
// after the drop; a retiree killed between the decision and its boundary;
// and a worker the shrink keeps, down while the change is decided, which is
// taken back. What a user would see is checked where the workers read it:
// the rejoin's reply (retired, or taken back) and the next epoch's members.
// Before, every rejoin was taken back and the next epoch had 3 workers.
#include <doctest/doctest.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/node/scheduler_client.h"
#include "common/wire/barrier_names.h"
#include "common/wire/protocol.h"
#include "tests/cluster/elastic_peers.h"
#include "tests/support/stderr_capture.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"
#include "tools/cluster/local_cluster.h"

using namespace pstrain;
using pstrain::test::decision_key;
using pstrain::test::elastic_options;
using pstrain::test::Entry;
using pstrain::test::kDecisionTimeoutMs;
using pstrain::test::register_peer;
using pstrain::test::rejoin_peer;
using pstrain::test::wait_for_change;
using std::chrono::milliseconds;

namespace {

constexpr int kWorkers = 3;

// A job of 3 workers that may shrink to 1, under "restart" (twice per rank); the test's exits file
// says which process died (the launcher's report), as soon as it writes it.
struct ShrinkJob {
  pstrain::test::TempDir dir{"downretire"};
  std::string ctl = dir.file("ctl.txt");
  std::string exits = dir.file("exits.txt");
  std::unique_ptr<pstrain::test::StderrCapture> log;
  std::unique_ptr<LocalCluster> cluster;

  ShrinkJob() {
    std::ofstream(ctl).flush();
    std::ofstream(exits).flush();
    log = std::make_unique<pstrain::test::StderrCapture>();
    LocalClusterOptions options = elastic_options(ctl, kWorkers, kWorkers);
    options.cluster.on_worker_failure = WorkerFailurePolicy::kRestart;
    options.cluster.max_restarts = 2;
    options.exits_file = exits;
    cluster = std::make_unique<LocalCluster>(options);
  }

  void request(int workers) { std::ofstream(ctl, std::ios::app) << "workers " << workers << "\n"; }
  void killed(int rank, int pid) {
    std::ofstream(exits, std::ios::app) << "worker " << rank << " pid " << pid << ": killed by signal 9 (Killed)\n";
  }
  bool logged(const std::string& line, const std::string& what) {
    return pstrain::test::wait_until([&] { return log->has(line); }, milliseconds(60000), what);
  }
};

// Worker `rank`'s peer as a thread: registered, then `body`; any error lands in `error`.
std::thread peer(std::string& error, const std::function<void()>& body) {
  return std::thread([&error, body] {
    try {
      body();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
}

// A member's end: the final barrier, then done.
void finish_job(SchedulerClient& client) {
  client.barrier(std::string(kFinalBarrier));
  client.finish();
}

// A member's answer to change 1 (its next step is step 3 of epoch 0) once announced, and the decision.
std::string answer_change(SchedulerClient& client, int rank) {
  wait_for_change(client, 1, "worker " + std::to_string(rank));
  client.store_set(decision_key(1) + "/" + std::to_string(rank), "0 3 3");
  return client.store_get(decision_key(1), kDecisionTimeoutMs);
}

// Waits (a minute at most) for `flag`, set by another peer when `what` happened; throws if it did not.
void wait_for(const std::atomic<bool>& flag, const std::string& what) {
  if (!pstrain::test::wait_until([&] { return flag.load(); }, milliseconds(60000), what)) {
    throw std::runtime_error(what + " did not happen");
  }
}

std::string epoch_members(SchedulerClient& client, int epoch) {
  return client.store_get(std::string(kEpochMembersPrefix) + std::to_string(epoch), kDecisionTimeoutMs);
}

// Worker 2's new process, once the scheduler has retired the rank while it was down `by` ("membership
// change 1", "a request for fewer workers"): its --rejoin's retired_by_change (0: taken back).
std::int64_t rejoin_retired(ShrinkJob& job, const std::string& by) {
  if (!job.logged("worker 2 retired while it was down (" + by, "worker 2's retirement")) {
    throw std::runtime_error("worker 2 was not retired while it was down");
  }
  return rejoin_peer(*job.cluster, 2, kWorkers, 4243)->retired_by_change();
}

// A worker the shrink keeps: registered (counted in `registered`), answers change 1 (`decision`),
// then once `left` (worker 2's new process came and went) reads epoch 1's members into
// `next_epoch` (when given) and ends.
void kept_member(ShrinkJob& job, int rank, std::atomic<int>& registered, std::string& decision,
                 const std::atomic<bool>& left, std::string* next_epoch) {
  const auto client = register_peer(*job.cluster, rank, Entry::kRegister, kWorkers);
  ++registered;
  decision = answer_change(*client, rank);
  wait_for(left, "worker 2's new process");
  if (next_epoch != nullptr) *next_epoch = epoch_members(*client, 1);
  finish_job(*client);
}

}  // namespace

TEST_CASE("a shrink decided while its retiree is down retires it: the new process of its rank is told to leave") {
  ShrinkJob job;
  std::string error0, error1, error2, decision0, decision1, next_epoch;
  std::int64_t retired_by = 0;
  std::atomic<int> registered{0};
  std::atomic<bool> left{false};
  std::thread w0 = peer(error0, [&] { kept_member(job, 0, registered, decision0, left, &next_epoch); });
  std::thread w1 = peer(error1, [&] { kept_member(job, 1, registered, decision1, left, nullptr); });
  std::thread w2 = peer(error2, [&] {
    {
      // Stopped before it answered the change (the repro: kill -STOP, then pstrain-ctl workers 2).
      const auto stopped = register_peer(*job.cluster, 2, Entry::kRegister, kWorkers, 4242);
      ++registered;
      wait_for_change(*stopped, 1, "worker 2");
      if (!job.logged("membership change 1 (retire)", "the change's announcement")) throw std::runtime_error("no change");
    }
    job.killed(2, 4242);  // fenced: the scheduler drops it, and the change is decided without its answer
    retired_by = rejoin_retired(job, "membership change 1");
    left = true;
  });
  const bool all = pstrain::test::wait_until([&] { return registered.load() == kWorkers; }, milliseconds(60000),
                                             "the workers");
  if (all) job.request(2);
  w2.join();
  w1.join();
  w0.join();
  REQUIRE(all);
  CHECK(error0 == "");
  CHECK(error1 == "");
  CHECK(error2 == "");
  CHECK(decision0 == "0 3 0,1 retire");
  CHECK(decision1 == "0 3 0,1 retire");
  CHECK(retired_by == 1);
  CHECK(next_epoch == "0,1");  // before: "0,1,2", the rejoin undoing the shrink
  CHECK(job.log->has("worker 2 retired while it was down (membership change 1 left it out)"));
  CHECK(job.log->has("told to leave without training"));
  CHECK_FALSE(job.log->has("worker 2 rejoined the job"));
  job.cluster->join();  // the job ends without waiting for rank 2
}

TEST_CASE("a request for fewer workers while one is down retires that one at once, with no change") {
  ShrinkJob job;
  std::string error0, error1, next_epoch;
  std::int64_t retired_by = 0;
  std::atomic<int> registered{0};
  std::atomic<bool> left{false};
  std::thread w0 = peer(error0, [&] {
    const auto client = register_peer(*job.cluster, 0, Entry::kRegister, kWorkers);
    ++registered;
    wait_for(left, "worker 2's new process");
    next_epoch = epoch_members(*client, 1);
    finish_job(*client);
  });
  std::thread w1 = peer(error1, [&] {
    const auto client = register_peer(*job.cluster, 1, Entry::kRegister, kWorkers);
    ++registered;
    wait_for(left, "worker 2's new process");
    finish_job(*client);
  });
  { const auto victim = register_peer(*job.cluster, 2, Entry::kRegister, kWorkers, 4242); ++registered; }
  REQUIRE(pstrain::test::wait_until([&] { return registered.load() == kWorkers; }, milliseconds(60000), "the workers"));
  job.killed(2, 4242);
  REQUIRE(job.logged("dropped from the job", "worker 2's drop"));
  job.request(2);  // the job has 3 with worker 2 restarting: 2 are asked for
  retired_by = rejoin_retired(job, "a request for fewer workers");
  left = true;
  w1.join();
  w0.join();
  CHECK(error0 == "");
  CHECK(error1 == "");
  CHECK(retired_by == kRetiredByRequest);
  CHECK(next_epoch == "0,1");
  CHECK(job.log->has("request for 2 workers: the job has 3 (1 of them down, restarting)"));
  CHECK_FALSE(job.log->has("membership change 1"));  // nothing to change: the others share the data already
  job.cluster->join();
}

TEST_CASE("a retiree killed between the decision and its boundary is not taken back by its new process") {
  ShrinkJob job;
  std::string error0, error1, error2, decision0, next_epoch;
  std::int64_t retired_by = 0;
  std::atomic<int> registered{0};
  std::atomic<bool> left{false};
  std::string decision1;
  std::thread w0 = peer(error0, [&] { kept_member(job, 0, registered, decision0, left, &next_epoch); });
  std::thread w1 = peer(error1, [&] { kept_member(job, 1, registered, decision1, left, nullptr); });
  std::thread w2 = peer(error2, [&] {
    {
      const auto retiree = register_peer(*job.cluster, 2, Entry::kRegister, kWorkers, 4242);
      ++registered;
      answer_change(*retiree, 2);  // decided: it retires at step 3
    }
    job.killed(2, 4242);  // before it reached its boundary
    retired_by = rejoin_retired(job, "membership change 1");
    left = true;
  });
  const bool all = pstrain::test::wait_until([&] { return registered.load() == kWorkers; }, milliseconds(60000),
                                             "the workers");
  if (all) job.request(2);
  w2.join();
  w1.join();
  w0.join();
  REQUIRE(all);
  CHECK(error0 == "");
  CHECK(error1 == "");
  CHECK(error2 == "");
  CHECK(decision0 == "0 3 0,1 retire");
  CHECK(retired_by == 1);
  CHECK(next_epoch == "0,1");  // before: "0,1,2" (the failed retiree left retiring_, its rejoin made it a member)
  job.cluster->join();
}

TEST_CASE("a worker a shrink keeps, down while the change is decided, is taken back by its new process") {
  ShrinkJob job;
  std::string error0, error1, error2, decision0, decision2, next_epoch;
  std::int64_t retired_by = -2;
  std::atomic<int> registered{0};
  std::atomic<bool> back_in{false};
  std::thread w0 = peer(error0, [&] {
    const auto client = register_peer(*job.cluster, 0, Entry::kRegister, kWorkers);
    ++registered;
    decision0 = answer_change(*client, 0);
    wait_for(back_in, "worker 1's new process");
    next_epoch = epoch_members(*client, 1);
    finish_job(*client);
  });
  std::thread w2 = peer(error2, [&] {
    const auto client = register_peer(*job.cluster, 2, Entry::kRegister, kWorkers);
    ++registered;
    decision2 = answer_change(*client, 2);
    client->finish(/*retired=*/true);  // the shrink to workers 0 and 1 leaves it out from step 3
  });
  std::thread w1 = peer(error1, [&] {
    {
      const auto kept = register_peer(*job.cluster, 1, Entry::kRegister, kWorkers, 4242);
      ++registered;
      wait_for_change(*kept, 1, "worker 1");
    }
    job.killed(1, 4242);  // before it answered: the change is decided without it
    if (!job.logged("from epoch 0 step 3 workers 0 (", "the decision")) throw std::runtime_error("no decision");
    const auto back = rejoin_peer(*job.cluster, 1, kWorkers, 4243);
    retired_by = back->retired_by_change();
    back_in = true;
    finish_job(*back);
  });
  const bool all = pstrain::test::wait_until([&] { return registered.load() == kWorkers; }, milliseconds(60000),
                                             "the workers");
  if (all) job.request(2);
  w1.join();
  w2.join();
  w0.join();
  REQUIRE(all);
  CHECK(error0 == "");
  CHECK(error1 == "");
  CHECK(error2 == "");
  // Decided among the live: worker 0 from step 3 (worker 1 was down); worker 1 comes back as after any restart.
  CHECK(decision0 == "0 3 0 retire");
  CHECK(decision2 == "0 3 0 retire");
  CHECK(retired_by == 0);
  CHECK(job.log->has("worker 1 rejoined the job"));
  CHECK(next_epoch == "0,1");  // the 2 workers asked for
  job.cluster->join();
}
