// A registered worker that pushes poison (issue 27, item 3): roles started by
// hand as real processes (scheduler, one server, honest worker 0), and worker
// 1 registered from this test over tcp, pushing a huge gradient with a huge
// learning rate, NaN, Inf, and a finite gradient whose update would overflow
// the optimizer's state. Every such push is refused with a reason naming
// worker 1, the weights pulled stay finite, the honest worker trains to the
// end, and the server's log names worker 1, not its victims.
#include <doctest/doctest.h>

#include "common/wire/security.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "common/base/errors.h"
#include "common/base/log.h"
#include "common/config/config.h"
#include "common/config/job_fingerprint.h"
#include "common/transport/zmq/zmq_transport.h"
#include "tests/integration/launch_test_util.h"
#include "worker/client/worker_session.h"
#include "worker/train/workload.h"

using namespace pstrain;

namespace {

// The push's error text, or "accepted".
std::string push_outcome(WorkerSession& session, std::span<const float> grad, std::int64_t step, double lr) {
  try {
    session.kv().wait(session.kv().push(grad, step, lr));
    return "accepted";
  } catch (const ServerError& e) {
    return e.what();
  }
}

struct Reaper {  // whatever a failed REQUIRE leaves running
  std::vector<std::pair<std::string, pid_t>>& nodes;
  ~Reaper() {
    for (auto& [name, pid] : nodes) {
      if (pid <= 0) continue;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

}  // namespace

TEST_CASE("a registered worker's poisoned pushes (lr 1e30, NaN, Inf, an overflowing update) are refused, naming it; "
          "the honest worker finishes") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const std::string port = std::to_string(it::free_port());
  const std::string config_file = (it::kSourceDir / "configs/tiny_async.toml").string();  // async, 2 workers
  // Adam: a finite gradient of 1e30 at an allowed rate overflows its second moment (the weight stays finite).
  const std::vector<std::string> sets{"output.run_dir=" + run.string(), "cluster.servers=1", "cluster.transport=tcp",
                                      "optimizer.name=adam", "optimizer.lr=0.001", "output.trace=off",
                                      "cluster.scheduler=tcp://127.0.0.1:" + port, it::secret_override(dir.path())};
  std::vector<std::string> common{"--config", config_file};
  for (const std::string& s : sets) common.insert(common.end(), {"--set", s});
  auto role = [&](const std::string& program, int rank) {
    std::vector<std::string> argv{(it::kBinDir / program).string()};
    argv.insert(argv.end(), common.begin(), common.end());
    if (rank >= 0) argv.insert(argv.end(), {"--rank", std::to_string(rank)});
    return argv;
  };
  const auto out = [&](const std::string& name) { return dir.path() / (name + ".txt"); };
  std::vector<std::pair<std::string, pid_t>> nodes{{"scheduler", it::spawn(role("pstrain-scheduler", -1), {}, out("scheduler"))}};
  Reaper reaper{nodes};
  nodes.emplace_back("server-0", it::spawn(role("pstrain-server", 0), {}, out("server-0")));
  nodes.emplace_back("worker-0", it::spawn(role("pstrain-worker", 0), {}, out("worker-0")));

  // Worker 1, registered like any worker (its rank, the job's fingerprint and model).
  RunConfig config = load_config(config_file);
  apply_overrides(config, sets);
  Logger log("poisoner", LogLevel::kError);
  const Workload workload = make_workload(config, config.workload.batch_size, log);
  WorkerSessionOptions options;
  options.scheduler_endpoint = config.cluster.scheduler;
  options.cluster = config.cluster;
  options.partition_bytes = config.ps.partition_bytes;
  options.requested_rank = 1;
  options.job_fingerprint = job_fingerprint(config.mode, config.ps.partition_bytes, 1, 2);
  const SecurityContext security = SecurityContext::load(config.security, Role::kWorker, 1);  // the job's secret
  options.security = &security;
  std::vector<float> params(static_cast<std::size_t>(workload.model->num_params()));
  std::vector<std::string> outcomes;
  bool pulled_finite = false;
  std::string session_error;
  try {
    WorkerSession session(std::make_unique<ZmqTransport>(), options, workload.model->layout());
    REQUIRE(session.rank() == 1);
    session.broadcast_initial(params);  // pulls worker 0's initial weights, passes the barrier
    const std::size_t n = params.size();
    outcomes.push_back(push_outcome(session, std::vector<float>(n, 1e30f), 0, 1e30));
    outcomes.push_back(push_outcome(session, std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()), 0, 0.001));
    outcomes.push_back(push_outcome(session, std::vector<float>(n, std::numeric_limits<float>::infinity()), 0, 0.001));
    outcomes.push_back(push_outcome(session, std::vector<float>(n, 1e30f), 0, 0.001));
    session.kv().wait(session.kv().pull(params, 0));
    pulled_finite = std::all_of(params.begin(), params.end(), [](float x) { return std::isfinite(x); });
    session.scheduler().barrier("training done");  // as a worker ends
    session.finish();
  } catch (const std::exception& e) {
    session_error = e.what();  // on the code before the fix: the job was aborted (worker 0 diverged)
  }
  std::map<std::string, int> codes;
  for (auto& [name, pid] : nodes) {
    const std::optional<int> code = it::wait_exit(pid, std::chrono::seconds(180));
    if (code) {
      pid = -1;
      codes[name] = *code;
    }
  }
  const std::string server_log = it::read_file(out("server-0"));
  INFO("worker 0:\n" << it::read_file(out("worker-0")));
  INFO("server 0:\n" << server_log);
  INFO("scheduler:\n" << it::read_file(out("scheduler")));
  CHECK(session_error == "");
  REQUIRE(outcomes.size() == 4);
  for (const std::string& o : outcomes) CHECK(it::contains(o, "from worker 1 at step 0: "));
  CHECK(it::contains(outcomes[0], "learning rate 1e+30 is above the schedule's highest, 0.001"));
  CHECK(it::contains(outcomes[1], "non-finite values (first at element 0); not applied"));
  CHECK(it::contains(outcomes[2], "non-finite values (first at element 0); not applied"));
  CHECK(it::contains(outcomes[3], "the update would make"));
  CHECK(it::contains(outcomes[3], "weights or optimizer values non-finite"));
  CHECK(pulled_finite);
  for (const char* name : {"scheduler", "server-0", "worker-0"}) {
    CAPTURE(name);
    CHECK(codes.count(name) == 1);
    CHECK(codes[name] == 0);
  }
  // The server names the pusher, as it happens and at the end; never the honest worker.
  CHECK(it::contains(server_log, "refused: push of chunk"));
  CHECK(it::contains(server_log, "from worker 1 at step 0: learning rate 1e+30"));
  CHECK(it::contains(server_log, "pushes or steps refused for their values"));
  std::istringstream lines(server_log);
  for (std::string line; std::getline(lines, line);) {
    if (!it::contains(line, "refused")) continue;
    CAPTURE(line);
    CHECK(it::contains(line, "worker 1"));
    CHECK_FALSE(it::contains(line, "worker 0"));
  }
  CHECK_FALSE(it::contains(it::read_file(out("worker-0")), "diverged"));
}
