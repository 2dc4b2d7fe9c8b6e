// A membership change announced while a worker waits in a checkpoint's
// barrier (issue 29; docs/architecture.md, "Elastic membership"): over real
// tcp sockets in one process, a scheduler and a server as threads, workers 0
// and 1 peers registered by hand that act out the order seen in an ssp job.
// Worker 0, ahead, enters the barrier of checkpoint 2; only then is a change
// requested (the ctl file), so its announcement reaches worker 0 in the
// barrier. Worker 1, behind, answers it with its next step and waits for the
// decision before it reaches that barrier. Worker 0 answers from within the
// barrier (SchedulerClient::barrier's on_news, MembershipAnswers::answer_heard),
// so the decision comes and both pass the barrier. Before, worker 0 answered
// only at its next boundary, after the barrier: the decision waited for it,
// the barrier for worker 1, and worker 1's wait for the decision timed out.
#include <doctest/doctest.h>

#include <atomic>
#include <optional>
#include <stdexcept>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/base/errors.h"
#include "common/checkpoint/checkpoint.h"
#include "common/config/job_fingerprint.h"
#include "common/node/scheduler_client.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/wire/barrier_names.h"
#include "common/wire/protocol.h"
#include "tests/support/stderr_capture.h"
#include "tests/support/temp_dir.h"
#include "tests/cluster/elastic_peers.h"
#include "tests/support/wait.h"
#include "tools/cluster/local_cluster.h"
#include "worker/train/epoch_members.h"
#include "worker/train/membership_answer.h"
#include "worker/train/ps_join.h"
#include "worker/train/ps_rejoin.h"
#include "worker/train/worker_checkpoint.h"

using namespace pstrain;
using std::chrono::milliseconds;

using pstrain::test::decision_key;
using pstrain::test::elastic_options;
using pstrain::test::Entry;
using pstrain::test::kDecisionTimeoutMs;
using pstrain::test::register_peer;
using pstrain::test::rejoin_peer;
using pstrain::test::wait_for_change;

TEST_CASE("a change announced while a worker waits in a checkpoint's barrier is answered there: no deadlock") {
  pstrain::test::TempDir dir("ckchange");
  const std::string ctl = dir.file("ctl.txt");
  std::ofstream(ctl).flush();
  pstrain::test::StderrCapture log;
  LocalCluster cluster(elastic_options(ctl));
  std::string error0, error1, decision0, decision1;

  // Worker 0, ahead: at the boundary before step 2 (nothing announced yet), then the checkpoint's barrier.
  std::thread w0([&] {
    try {
      const auto client = register_peer(cluster, 0);
      MembershipAnswers answers;
      const EpochDriver::NextStep next{0, 2, false, 2}, after{0, 3, false, 3};
      answers.answer(*client, 0, next, after);
      client->barrier("checkpoint 2", [&] { answers.answer_heard(*client, 0, next, after); });
      decision0 = client->store_get(decision_key(), kDecisionTimeoutMs);  // its promise: before step 3
      client->barrier(std::string(kFinalBarrier));
      client->finish();
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  // Worker 1, behind: answers with its next step (2), waits for the decision, then takes the barrier.
  std::thread w1([&] {
    try {
      const auto client = register_peer(cluster, 1);
      std::vector<std::int64_t> changes;
      const bool heard = pstrain::test::wait_until([&] {
        client->drain_incoming();
        changes = client->take_membership_changes();
        return !changes.empty();
      }, milliseconds(60000), "the change's announcement at worker 1");
      if (!heard || changes != std::vector<std::int64_t>{1}) throw std::runtime_error("change 1 was not announced");
      client->store_set(decision_key() + "/1", "0 2 2");
      try {
        decision1 = client->store_get(decision_key(), kDecisionTimeoutMs);
      } catch (const std::exception& e) {
        error1 = e.what();  // the deadlock: still pass the barrier, so that the job can end
      }
      client->barrier("checkpoint 2");
      if (error1.empty()) {
        client->finish(/*retired=*/true);
      } else {
        client->barrier(std::string(kFinalBarrier));
        client->finish();
      }
    } catch (const std::exception& e) {
      if (error1.empty()) error1 = e.what();
    }
  });
  // The change is asked for only once worker 0 waits in the barrier: its announcement reaches it there.
  const bool arrived = pstrain::test::wait_until(
      [&] { return log.has("worker 0 arrived at barrier 'checkpoint 2'"); }, milliseconds(60000),
      "worker 0 in the checkpoint's barrier");
  if (arrived) std::ofstream(ctl, std::ios::app) << "workers 1\n";
  w1.join();
  w0.join();
  REQUIRE(arrived);
  CHECK(error1 == "");
  CHECK(error0 == "");
  // Worker 0's answer from the barrier is the step after its next (3), worker 1's its next (2): the most advanced.
  CHECK(decision1 == "0 3 0 retire");
  CHECK(decision0 == "0 3 0 retire");
  CHECK(log.has("worker 0 arrived at barrier 'checkpoint 2'"));
  cluster.join();
}

// The joiner's form (issue 29): a joiner entering at step 3 waits in the
// barrier of the checkpoint of its first step (the others take it after
// step 2), with worker 0, ahead; only then is a second change asked for (a
// shrink to 2 workers: the joiner, rank 2, retires), so its announcement
// reaches both there. Worker 1, behind, answers it with its next step (3)
// and waits for the decision before it reaches that barrier. The joiner
// answers from within the barrier with the step after its first (4;
// MembershipAnswers::answer_ahead, what ps_worker.cc gives it from its first
// step's function), as worker 0 does: the decision comes (from step 4), all
// three pass the barrier, and the joiner adds that segment after its own
// (from step 3) and retires at step 4. Its first step itself would be no
// answer: a second segment from step 3 is refused. Before, the joiner took
// that barrier before its answers existed: the decision waited for it, the
// barrier for worker 1, and worker 1's wait for the decision timed out.
TEST_CASE("a joiner waiting in the checkpoint barrier of its first step answers a change announced there") {
  pstrain::test::TempDir dir("ckjoin");
  const std::string ctl = dir.file("ctl.txt");
  std::ofstream(ctl).flush();
  pstrain::test::StderrCapture log;
  LocalCluster cluster(elastic_options(ctl, 3));
  std::string error0, error1, error2, decision0, decision1;
  std::vector<EpochSegment> joiner_segments;
  std::atomic<int> registered{0};

  // Worker 0, ahead: answers the join (change 1) with step 3, takes its decision, enters checkpoint 3's barrier.
  std::thread w0([&] {
    try {
      const auto client = register_peer(cluster, 0);
      ++registered;
      wait_for_change(*client, 1, "worker 0");
      client->store_set(decision_key(1) + "/0", "0 3 3");
      client->store_get(decision_key(1), kDecisionTimeoutMs);
      MembershipAnswers answers;
      const EpochDriver::NextStep next{0, 3, false, 3}, after{0, 4, false, 4};
      client->barrier("checkpoint 3", [&] { answers.answer_heard(*client, 0, next, after); });
      decision0 = client->store_get(decision_key(2), kDecisionTimeoutMs);  // its promise: before step 4
      client->barrier(std::string(kFinalBarrier));
      client->finish();
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  // Worker 1, behind: answers the join with step 2; answers change 2 with its next step (3), waits for
  // its decision, then takes the barrier.
  std::thread w1([&] {
    try {
      const auto client = register_peer(cluster, 1);
      ++registered;
      wait_for_change(*client, 1, "worker 1");
      client->store_set(decision_key(1) + "/1", "0 2 2");
      client->store_get(decision_key(1), kDecisionTimeoutMs);
      wait_for_change(*client, 2, "worker 1");
      client->store_set(decision_key(2) + "/1", "0 3 3");
      try {
        decision1 = client->store_get(decision_key(2), kDecisionTimeoutMs);
      } catch (const std::exception& e) {
        error1 = e.what();  // the deadlock: still pass the barrier, so that the job can end
      }
      client->barrier("checkpoint 3");
      client->barrier(std::string(kFinalBarrier));
      client->finish();
    } catch (const std::exception& e) {
      if (error1.empty()) error1 = e.what();
    }
  });
  // The joiner: once both are in the job (a join before is refused until then).
  std::thread j([&] {
    try {
      if (!pstrain::test::wait_until([&] { return registered.load() == 2; }, milliseconds(60000), "both workers")) {
        throw std::runtime_error("the workers did not register");
      }
      const auto client = register_peer(cluster, 2, Entry::kJoin);
      Logger jlog("joiner", LogLevel::kError);
      const std::optional<JoinStart> start = wait_for_join_start(*client, kDecisionTimeoutMs, jlog);
      if (!start || start->global_step != 3 || !start->take_checkpoint) throw std::runtime_error("not a start at step 3");
      EpochMembers members(EpochMembers::all_of(2));
      learn_join_segments(*client, *start, members, kDecisionTimeoutMs);
      MembershipAnswers answers;
      const EpochDriver::NextStep after_first{0, 4, false, 4};  // next_step() while step 3's function runs
      client->barrier("checkpoint 3", [&] { answers.answer_ahead(*client, 2, after_first); });
      // Its step 3 ran; the boundary after it: the answer given in the barrier is due here.
      answers.answer(*client, 2, after_first, EpochDriver::NextStep{0, 5, false, 5});
      answers.settle(*client, members, kDecisionTimeoutMs, jlog);
      joiner_segments = members.segments(0);
      client->finish(/*retired=*/true);
    } catch (const std::exception& e) {
      error2 = e.what();
    }
  });
  // The change is asked for only once worker 0 and the joiner wait in the barrier: its announcement reaches them there.
  const bool arrived = pstrain::test::wait_until(
      [&] {
        return log.has("worker 0 arrived at barrier 'checkpoint 3'") && log.has("worker 2 arrived at barrier 'checkpoint 3'");
      },
      milliseconds(60000), "worker 0 and the joiner in the checkpoint's barrier");
  if (arrived) std::ofstream(ctl, std::ios::app) << "workers 2\n";
  j.join();
  w1.join();
  w0.join();
  REQUIRE(arrived);
  CHECK(error1 == "");
  CHECK(error0 == "");
  CHECK(error2 == "");
  // The joiner's answer and worker 0's are step 4, worker 1's its next (3): the most advanced.
  CHECK(decision1 == "0 4 0,1 retire");
  CHECK(decision0 == "0 4 0,1 retire");
  REQUIRE(joiner_segments.size() == 3);
  CHECK(joiner_segments[1] == EpochSegment{3, {0, 1, 2}});
  CHECK(joiner_segments[2] == EpochSegment{4, {0, 1}});
  cluster.join();
}

// The rejoiner's form (issue 29): worker 1 of 3 is killed (the launcher's
// exit report) and a new process takes its rank back (on_worker_failure =
// "restart") at step 3, a checkpoint's step: its first checkpoint barrier is
// that of step 3, taken at the start of its first step (enter_rejoined,
// worker/train/ps_rejoin.h), where it first writes its part (the others had
// not passed that barrier when it was taken back). Worker 0, ahead, waits in
// the same barrier; only then is a change asked for (a shrink to 2 workers:
// rank 2 retires), so its announcement reaches both there. Worker 2, behind,
// answers it with its next step (3) and waits for the decision before it
// reaches the barrier. The rejoiner answers from within the barrier with the
// step after its first (4; MembershipAnswers::answer_ahead), as worker 0
// does: the decision comes (from step 4), and all three pass the barrier.
// Before, the rejoiner took that barrier before its driver and answers
// existed (in its initial weights): the decision waited for it, the barrier
// for worker 2, and worker 2's wait for the decision timed out.
TEST_CASE("a rejoiner waiting in the checkpoint barrier of its first step answers a change announced there") {
  pstrain::test::TempDir dir("ckrejoin");
  const std::string ctl = dir.file("ctl.txt");
  const std::string exits = dir.file("exits.txt");
  std::ofstream(ctl).flush();
  std::ofstream(exits).flush();
  pstrain::test::StderrCapture log;
  LocalClusterOptions options = elastic_options(ctl, 3);
  options.num_workers = 3;
  options.cluster.on_worker_failure = WorkerFailurePolicy::kRestart;
  options.cluster.max_restarts = 1;
  options.exits_file = exits;
  LocalCluster cluster(options);
  RunConfig config;
  config.output.run_dir = dir.path().string();
  config.checkpoint.interval_steps = 3;
  config.cluster = options.cluster;
  std::string error0, error1, error2, decision0, decision2;
  std::vector<EpochSegment> rejoiner_segments;
  std::atomic<int> registered{0};
  std::atomic<bool> rejoined{false};

  // Worker 0, ahead: at the boundary before step 3 (nothing announced yet), then the checkpoint's barrier.
  std::thread w0([&] {
    try {
      const auto client = register_peer(cluster, 0, Entry::kRegister, 3);
      ++registered;
      MembershipAnswers answers;
      const EpochDriver::NextStep next{0, 3, false, 3}, after{0, 4, false, 4};
      answers.answer(*client, 0, next, after);
      client->barrier("checkpoint 3", [&] { answers.answer_heard(*client, 0, next, after); });
      decision0 = client->store_get(decision_key(1), kDecisionTimeoutMs);  // its promise: before step 4
      client->barrier(std::string(kFinalBarrier));
      client->finish();
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  // Worker 2, behind: answers the change with its next step (3), waits for its decision, then the barrier.
  std::thread w2([&] {
    try {
      const auto client = register_peer(cluster, 2, Entry::kRegister, 3);
      ++registered;
      wait_for_change(*client, 1, "worker 2");
      client->store_set(decision_key(1) + "/2", "0 3 3");
      try {
        decision2 = client->store_get(decision_key(1), kDecisionTimeoutMs);
      } catch (const std::exception& e) {
        error2 = e.what();  // the deadlock: still pass the barrier, so that the job can end
      }
      client->barrier("checkpoint 3");
      if (error2.empty()) {
        client->finish(/*retired=*/true);  // the decision leaves it out from step 4
      } else {
        client->barrier(std::string(kFinalBarrier));
        client->finish();
      }
    } catch (const std::exception& e) {
      if (error2.empty()) error2 = e.what();
    }
  });
  // Worker 1: registers, is killed (the launcher's exit report), and a new process takes its rank back.
  std::thread w1([&] {
    try {
      {
        const auto victim = register_peer(cluster, 1, Entry::kRegister, 3, 4242);
        ++registered;
        if (!pstrain::test::wait_until([&] { return registered.load() == 3; }, milliseconds(60000), "the workers")) {
          throw std::runtime_error("the workers did not register");
        }
      }
      std::ofstream(exits, std::ios::app) << "worker 1 pid 4242: killed by signal 9 (Killed)\n";
      const std::unique_ptr<SchedulerClient> client = rejoin_peer(cluster, 1, 3, 4243);
      rejoined = true;
      Logger rlog("rejoiner", LogLevel::kError);
      EpochMembers members(EpochMembers::all_of(3));
      members.segments(0);
      MembershipAnswers answers;
      const EpochDriver::NextStep after_first{0, 4, false, 4};  // next_step() while step 3's function runs
      enter_rejoined(*client, config, 3, 16, 1, rlog, answers, after_first, [&] {
        WorkerCheckpoint part;
        part.step = 3;
        part.epoch_members = members.history_before(0, 3);
        return part;
      });
      // Its step 3 ran; the boundary after it: the answer given in the barrier is due here.
      answers.answer(*client, 1, after_first, EpochDriver::NextStep{0, 5, false, 5});
      answers.settle(*client, members, kDecisionTimeoutMs, rlog);
      rejoiner_segments = members.segments(0);
      client->barrier(std::string(kFinalBarrier));
      client->finish();
    } catch (const std::exception& e) {
      error1 = e.what();
    }
  });
  // The change is asked for only once worker 0 and the rejoiner wait in the barrier.
  const bool arrived = pstrain::test::wait_until(
      [&] {
        return rejoined.load() && log.has("worker 0 arrived at barrier 'checkpoint 3'") &&
               log.has("worker 1 arrived at barrier 'checkpoint 3'");
      },
      milliseconds(60000), "worker 0 and the rejoiner in the checkpoint's barrier");
  if (arrived) std::ofstream(ctl, std::ios::app) << "workers 2\n";
  w1.join();
  w2.join();
  w0.join();
  REQUIRE(arrived);
  CHECK(error2 == "");
  CHECK(error0 == "");
  CHECK(error1 == "");
  CHECK(log.has("worker 1 rejoined the job"));
  // The rejoiner's answer and worker 0's are step 4, worker 2's its next (3): the most advanced.
  CHECK(decision2 == "0 4 0,1 retire");
  CHECK(decision0 == "0 4 0,1 retire");
  REQUIRE(rejoiner_segments.size() == 2);
  CHECK(rejoiner_segments[1] == EpochSegment{4, {0, 1}});
  // Its part of checkpoint 3 (the others had not passed that barrier when it was taken back).
  CHECK(std::filesystem::exists(checkpoint_root(config) / checkpoint_dir_name(3) / worker_part_name(1)));
  cluster.join();
}

// A change announced while a joiner waits in the pull of its first step
// (issue 29; ps_rejoin.h, pull_entry_weights), in ssp with bound 1, the
// order an ssp job with a straggler can take: worker 1 (behind) answered the
// join (change 1) early, at the boundary after its step 0 (with 2), and
// worker 0 (ahead) at the boundary after its step 3 (with 5): the joiner
// enters at step 5. Change 2 (a shrink: the joiner retires) is announced as
// the joiner pulls the weights of step 5, which the servers give once the
// slowest clock is 4. Worker 1 answers it at the boundary after its step 1
// (with 3), and so waits for its decision after its step 2, at clock 3: one
// push short of the joiner's pull (and of worker 0's pull of step 5). The
// joiner answers from its pull (with 6), the decision comes (from step 6),
// worker 1 goes on, and every pull completes. Before, the joiner pulled
// without answering: the decision waited for it, its pull for worker 1's
// push, and worker 1 for the decision, until timeout_ms.
TEST_CASE("a joiner waiting in the pull of its first step answers a change announced there") {
  pstrain::test::TempDir dir("pulljoin");
  const std::string ctl = dir.file("ctl.txt");
  std::ofstream(ctl).flush();
  pstrain::test::StderrCapture log;
  LocalClusterOptions options = elastic_options(ctl, 3);
  options.mode = Mode::kSsp;
  options.staleness_bound = 1;
  LocalCluster cluster(options);
  ParamLayout layout;
  layout.add("w", {16});
  std::string error0, error1, error2, decision0, decision1;
  std::vector<EpochSegment> joiner_segments;
  std::atomic<int> registered{0};
  std::atomic<bool> entering{false};
  const auto step = [](WorkerSession& s, std::vector<float>& w, std::int64_t t) {
    s.kv().wait(s.kv().pull(w, t));
    s.kv().wait(s.kv().push(std::vector<float>(16, 0.01f), t, 0.1));
  };

  // Worker 0, ahead: steps 0-3, answers the join with 5; step 4, answers change 2 with 6; step 5.
  std::thread w0([&] {
    try {
      WorkerSession s(cluster.transport(), cluster.worker_options(0), layout);
      ++registered;
      std::vector<float> w(16, 1.0f);
      s.broadcast_initial(w);
      for (std::int64_t t = 0; t < 4; ++t) step(s, w, t);
      wait_for_change(s.scheduler(), 1, "worker 0");
      s.scheduler().store_set(decision_key(1) + "/0", "0 5 5");
      step(s, w, 4);
      wait_for_change(s.scheduler(), 2, "worker 0");
      s.scheduler().store_set(decision_key(2) + "/0", "0 6 6");
      s.scheduler().store_get(decision_key(1), kDecisionTimeoutMs);
      step(s, w, 5);
      decision0 = s.scheduler().store_get(decision_key(2), kDecisionTimeoutMs);
      s.scheduler().barrier(std::string(kFinalBarrier));
      s.finish();
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  // Worker 1, behind: step 0, answers the join with 2; step 1, answers change 2 with 3; step 2, waits for
  // change 2's decision (at clock 3); steps 3-5.
  std::thread w1([&] {
    try {
      WorkerSession s(cluster.transport(), cluster.worker_options(1), layout);
      ++registered;
      std::vector<float> w(16, 1.0f);
      s.broadcast_initial(w);
      step(s, w, 0);
      wait_for_change(s.scheduler(), 1, "worker 1");
      s.scheduler().store_set(decision_key(1) + "/1", "0 2 2");
      step(s, w, 1);
      wait_for_change(s.scheduler(), 2, "worker 1");
      s.scheduler().store_set(decision_key(2) + "/1", "0 3 3");
      s.scheduler().store_get(decision_key(1), kDecisionTimeoutMs);
      step(s, w, 2);
      try {
        decision1 = s.scheduler().store_get(decision_key(2), kDecisionTimeoutMs);
      } catch (const std::exception& e) {
        error1 = e.what();  // the deadlock: go on, so that the job can end
      }
      for (std::int64_t t = 3; t < 6; ++t) step(s, w, t);
      s.scheduler().barrier(std::string(kFinalBarrier));
      s.finish();
    } catch (const std::exception& e) {
      if (error1.empty()) error1 = e.what();
    }
  });
  // The joiner: enters at step 5, pulls its weights (answering from there), pushes step 5 and retires at 6.
  std::thread j([&] {
    try {
      if (!pstrain::test::wait_until([&] { return registered.load() == 2; }, milliseconds(60000), "both workers")) {
        throw std::runtime_error("the workers did not register");
      }
      WorkerSessionOptions o = cluster.worker_options(-1);
      o.join = true;
      WorkerSession s(cluster.transport(), o, layout);
      Logger jlog("joiner", LogLevel::kError);
      const std::optional<JoinStart> start = wait_for_join_start(s.scheduler(), kDecisionTimeoutMs, jlog);
      if (!start || start->global_step != 5) throw std::runtime_error("not a start at step 5");
      EpochMembers members(EpochMembers::all_of(2));
      learn_join_segments(s.scheduler(), *start, members, kDecisionTimeoutMs);
      MembershipAnswers answers;
      const EpochDriver::NextStep after_first{0, 6, false, 6};  // next_step() while step 5's function runs
      std::vector<float> w(16, 0.0f);
      entering = true;
      pull_entry_weights(s, w, 5, [&] { answers.answer_ahead(s.scheduler(), s.rank(), after_first); });
      s.kv().wait(s.kv().push(std::vector<float>(16, 0.01f), 5, 0.1));
      answers.answer(s.scheduler(), s.rank(), after_first, EpochDriver::NextStep{0, 7, false, 7});
      answers.settle(s.scheduler(), members, kDecisionTimeoutMs, jlog);
      joiner_segments = members.segments(0);
      s.scheduler().finish(/*retired=*/true);
    } catch (const std::exception& e) {
      error2 = e.what();
    }
  });
  // Change 2 is asked for once the joiner pulls (its announcement reaches it there, or just before: either
  // way it is answered before the pull's wait could end).
  const bool pulling = pstrain::test::wait_until([&] { return entering.load(); }, milliseconds(60000),
                                                 "the joiner at its first pull");
  if (pulling) std::ofstream(ctl, std::ios::app) << "workers 2\n";
  j.join();
  w1.join();
  w0.join();
  REQUIRE(pulling);
  CHECK(error1 == "");
  CHECK(error0 == "");
  CHECK(error2 == "");
  // The joiner's answer and worker 0's are step 6, worker 1's 3: the most advanced.
  CHECK(decision1 == "0 6 0,1 retire");
  CHECK(decision0 == "0 6 0,1 retire");
  REQUIRE(joiner_segments.size() == 3);
  CHECK(joiner_segments[1] == EpochSegment{5, {0, 1, 2}});
  CHECK(joiner_segments[2] == EpochSegment{6, {0, 1}});
  cluster.join();
}

// A change under way when a rejoiner registers (issue 29): a shrink to 2
// workers is announced to workers 0, 1 and 2; worker 0 answers it, worker 1
// is killed before it answers (the launcher's exit report) and a new
// process takes its rank back while worker 2 has not answered yet. The
// decision waits for every live worker's answer, the rejoiner's too: the
// scheduler tells it the change (Scheduler::announce_rejoin), and it
// answers at its entry (enter_rejoined, before its first pull). Before, it
// was told only changes announced after it registered: the decision waited
// for an answer that never came (in a job, until the others' waits timed
// out; here, until the rejoiner waited at the job's last barrier, which
// made the decision "none", and worker 2's retirement was refused).
TEST_CASE("a rejoiner registering while a change's answers still come is told the change and answers it") {
  pstrain::test::TempDir dir("pendrejoin");
  const std::string ctl = dir.file("ctl.txt");
  const std::string exits = dir.file("exits.txt");
  std::ofstream(ctl).flush();
  std::ofstream(exits).flush();
  pstrain::test::StderrCapture log;
  LocalClusterOptions options = elastic_options(ctl, 3);
  options.num_workers = 3;
  options.cluster.on_worker_failure = WorkerFailurePolicy::kRestart;
  options.cluster.max_restarts = 1;
  options.exits_file = exits;
  LocalCluster cluster(options);
  RunConfig config;
  config.output.run_dir = dir.path().string();
  config.cluster = options.cluster;  // no checkpoints
  std::string error0, error1, error2, decision0, decision1, decision2;
  std::atomic<int> registered{0};
  std::atomic<bool> rejoined{false};

  std::thread w0([&] {
    try {
      const auto client = register_peer(cluster, 0, Entry::kRegister, 3);
      ++registered;
      wait_for_change(*client, 1, "worker 0");
      client->store_set(decision_key(1) + "/0", "0 3 3");
      decision0 = client->store_get(decision_key(1), kDecisionTimeoutMs);
      client->barrier(std::string(kFinalBarrier));
      client->finish();
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  // Worker 2 answers only once worker 1's rank is taken back: the change is still under way then.
  std::thread w2([&] {
    try {
      const auto client = register_peer(cluster, 2, Entry::kRegister, 3);
      ++registered;
      wait_for_change(*client, 1, "worker 2");
      if (!pstrain::test::wait_until([&] { return rejoined.load(); }, milliseconds(60000), "worker 1's rejoin")) {
        throw std::runtime_error("worker 1 was not taken back");
      }
      client->store_set(decision_key(1) + "/2", "0 2 2");
      try {
        decision2 = client->store_get(decision_key(1), kDecisionTimeoutMs);
      } catch (const std::exception& e) {
        error2 = e.what();  // the deadlock
      }
      if (error2.empty()) {
        client->finish(/*retired=*/true);  // the shrink leaves it out from step 3
      } else {
        client->barrier(std::string(kFinalBarrier));
        client->finish();
      }
    } catch (const std::exception& e) {
      if (error2.empty()) error2 = e.what();
    }
  });
  std::thread w1([&] {
    try {
      {
        const auto victim = register_peer(cluster, 1, Entry::kRegister, 3, 4242);
        ++registered;
        wait_for_change(*victim, 1, "worker 1");
      }
      std::ofstream(exits, std::ios::app) << "worker 1 pid 4242: killed by signal 9 (Killed)\n";
      const std::unique_ptr<SchedulerClient> client = rejoin_peer(cluster, 1, 3, 4243);
      rejoined = true;
      Logger rlog("rejoiner", LogLevel::kError);
      EpochMembers members(EpochMembers::all_of(3));
      members.segments(0);
      MembershipAnswers answers;
      const EpochDriver::NextStep after_first{0, 3, false, 3};  // it enters at step 2
      enter_rejoined(*client, config, 2, 16, 1, rlog, answers, after_first, {});
      answers.answer(*client, 1, after_first, EpochDriver::NextStep{0, 4, false, 4});  // the boundary after step 2
      answers.settle(*client, members, kDecisionTimeoutMs, rlog);
      decision1 = members.segments(0).size() == 2 ? format_members(members.segments(0)[1].members) : "";
      client->barrier(std::string(kFinalBarrier));
      client->finish();
    } catch (const std::exception& e) {
      error1 = e.what();
    }
  });
  // The change is asked for once all three are in the job.
  const bool all = pstrain::test::wait_until([&] { return registered.load() == 3; }, milliseconds(60000),
                                             "the workers");
  if (all) std::ofstream(ctl, std::ios::app) << "workers 2\n";
  w1.join();
  w2.join();
  w0.join();
  REQUIRE(all);
  CHECK(error0 == "");
  CHECK(error1 == "");
  CHECK(error2 == "");
  CHECK(log.has("worker 1 rejoined the job"));
  // The rejoiner's answer and worker 0's are step 3, worker 2's 2: the most advanced; it keeps 0 and 1.
  CHECK(decision0 == "0 3 0,1 retire");
  CHECK(decision2 == "0 3 0,1 retire");
  CHECK(decision1 == "0,1");
  cluster.join();
}

// A rejoiner entering at a checkpoint's step that the others had already
// passed when it was taken back writes no part (the manifest may be in the
// making: its part would change a file the manifest checks) and passes the
// barrier at once: the register reply's aux says the last checkpoint barrier
// released (SchedulerClient::released_checkpoint).
TEST_CASE("a rejoiner entering at a checkpoint the others had passed writes no part and passes its barrier") {
  pstrain::test::TempDir dir("passedrejoin");
  const std::string ctl = dir.file("ctl.txt");
  const std::string exits = dir.file("exits.txt");
  std::ofstream(ctl).flush();
  std::ofstream(exits).flush();
  pstrain::test::StderrCapture log;
  LocalClusterOptions options = elastic_options(ctl, 2);
  options.cluster.on_worker_failure = WorkerFailurePolicy::kRestart;
  options.cluster.max_restarts = 1;
  options.exits_file = exits;
  LocalCluster cluster(options);
  RunConfig config;
  config.output.run_dir = dir.path().string();
  config.checkpoint.interval_steps = 3;
  config.cluster = options.cluster;
  std::string error0, error1;
  std::atomic<bool> made_part{false}, rejoined{false};
  std::int64_t released = -1;

  std::thread w0([&] {
    try {
      const auto client = register_peer(cluster, 0);
      client->barrier("checkpoint 3");
      // The final barrier only once worker 1 is back (released without it, every checkpoint would count as passed).
      if (!pstrain::test::wait_until([&] { return rejoined.load(); }, milliseconds(60000), "worker 1's rejoin")) {
        throw std::runtime_error("worker 1 was not taken back");
      }
      client->barrier(std::string(kFinalBarrier));
      client->finish();
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  std::thread w1([&] {
    try {
      {
        const auto victim = register_peer(cluster, 1, Entry::kRegister, 2, 4242);
        victim->barrier("checkpoint 3");  // passed with worker 0, then killed
      }
      std::ofstream(exits, std::ios::app) << "worker 1 pid 4242: killed by signal 9 (Killed)\n";
      const std::unique_ptr<SchedulerClient> client = rejoin_peer(cluster, 1, 2, 4243);
      released = client->released_checkpoint();
      rejoined = true;
      Logger rlog("rejoiner", LogLevel::kError);
      MembershipAnswers answers;
      enter_rejoined(*client, config, 3, 16, 1, rlog, answers, EpochDriver::NextStep{0, 4, false, 4}, [&] {
        made_part = true;
        return WorkerCheckpoint{};
      });
      client->barrier(std::string(kFinalBarrier));
      client->finish();
    } catch (const std::exception& e) {
      error1 = e.what();
    }
  });
  w1.join();
  w0.join();
  CHECK(error0 == "");
  CHECK(error1 == "");
  CHECK(released == 3);
  CHECK_FALSE(made_part.load());
  CHECK_FALSE(std::filesystem::exists(checkpoint_root(config) / checkpoint_dir_name(3) / worker_part_name(1)));
  CHECK(log.has("worker 1 rejoined the job"));
  cluster.join();
}
