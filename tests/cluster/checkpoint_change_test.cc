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

#include <stdexcept>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/base/errors.h"
#include "common/config/job_fingerprint.h"
#include "common/node/scheduler_client.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/wire/barrier_names.h"
#include "common/wire/protocol.h"
#include "tests/support/stderr_capture.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"
#include "tools/cluster/local_cluster.h"
#include "worker/train/membership_answer.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

constexpr int kDecisionTimeoutMs = 20000;  // worker 1's wait for the decision: the deadlock's symptom

LocalClusterOptions elastic_options(const std::string& ctl_file) {
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = 2;
  o.optimizer.momentum = 0.0;
  o.transport = "tcp";
  o.cluster.min_workers = 1;
  o.cluster.max_workers = 2;
  o.cluster.timeout_ms = kDecisionTimeoutMs;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 60000;  // nobody is declared dead for silence here
  o.log_level = LogLevel::kDebug;          // the scheduler logs each barrier arrival: the test waits for it
  o.ctl_file = ctl_file;
  return o;
}

std::unique_ptr<SchedulerClient> register_peer(LocalCluster& cluster, int rank) {
  auto client = std::make_unique<SchedulerClient>(std::make_unique<ZmqTransport>(cluster.zmq_context()),
                                                  cluster.scheduler_endpoint(), Role::kWorker,
                                                  cluster.worker_options(rank).cluster, nullptr,
                                                  cluster.worker_options(rank).security);
  RegisterRequest req;
  req.requested_rank = rank;
  req.host = "checkpoint-change peer";
  req.job_fingerprint = job_fingerprint(Mode::kSync, std::int64_t{1} << 20, 1, 2);
  req.layout.add("w", {16});
  if (client->register_node(req).rank != rank) throw std::runtime_error("registered at another rank");
  return client;
}

std::string decision_key() { return std::string(kMembershipPrefix) + "1"; }

}  // namespace

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
