// A peer that holds a worker slot and says `done` at once (issue 27, item 1),
// against real node programs over tcp: the scheduler, two servers and the
// honest worker 0 started by hand (as under SLURM), and worker 1 a peer in
// this process that registers with the job's credentials (security off: any
// peer can) and sends `done` instead of training. Before the fix worker 0
// waited at the initial barrier for as long as the scheduler's heartbeats
// came: the job never ended. Now the job ends (on_worker_failure "abort")
// or goes on without the peer ("continue") within the job's timeout, and
// says why: the early done and the barrier it strands.
#include <doctest/doctest.h>

#include "common/wire/security.h"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/base/log.h"
#include "common/config/config.h"
#include "common/config/job_fingerprint.h"
#include "common/node/scheduler_client.h"
#include "common/transport/zmq/zmq_transport.h"
#include "tests/integration/launch_test_util.h"
#include "worker/train/workload.h"

using namespace pstrain;
namespace fs = std::filesystem;

namespace {

constexpr int kTimeoutMs = 30000;  // the job's cluster.timeout_ms: the bound on every wait below

struct Job {
  it::TempDir dir;
  fs::path run = dir.path() / "run";
  std::string port = std::to_string(it::free_port());
  std::vector<std::string> common;
  std::vector<std::pair<std::string, pid_t>> nodes;

  explicit Job(const std::string& policy) {
    common = {"--config", (it::kSourceDir / "configs/tiny_sync.toml").string(),  // 2 servers, 2 workers
              "--set", "output.run_dir=" + run.string(), "--set", "cluster.on_worker_failure=" + policy,
              "--set", "cluster.timeout_ms=" + std::to_string(kTimeoutMs), "--set", "output.trace=off",
              "--set", "cluster.scheduler=tcp://127.0.0.1:" + port,
              "--set", it::secret_override(dir.path())};  // the job's secret, which the peer holds too
    // The scheduler logs each barrier arrival at debug level: the test waits for worker 0's.
    start("scheduler", "pstrain-scheduler", -1, {"--set", "output.log_level=debug"});
    for (int s = 0; s < 2; ++s) start("server-" + std::to_string(s), "pstrain-server", s);
    start("worker-0", "pstrain-worker", 0);
  }
  ~Job() {  // whatever a failed REQUIRE leaves running
    for (auto& [name, pid] : nodes) {
      if (pid <= 0) continue;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  fs::path out(const std::string& name) const { return dir.path() / (name + ".txt"); }
  std::string output(const std::string& name) const { return it::read_file(out(name)); }

  void start(const std::string& name, const std::string& program, int rank, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{(it::kBinDir / program).string()};
    argv.insert(argv.end(), common.begin(), common.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (rank >= 0) argv.insert(argv.end(), {"--rank", std::to_string(rank)});
    nodes.emplace_back(name, it::spawn(argv, {}, out(name)));
  }

  // The config the nodes run (for the peer's credentials: fingerprint and model layout).
  RunConfig config() const {
    RunConfig c = load_config((it::kSourceDir / "configs/tiny_sync.toml").string());
    std::vector<std::string> sets;
    for (std::size_t i = 0; i + 1 < common.size(); ++i) {
      if (common[i] == "--set") sets.push_back(common[i + 1]);
    }
    apply_overrides(c, sets);
    return c;
  }

  // Every node's exit code, each within `limit` (nullopt: still running).
  std::vector<std::pair<std::string, std::optional<int>>> exits(std::chrono::milliseconds limit) {
    std::vector<std::pair<std::string, std::optional<int>>> codes;
    for (auto& [name, pid] : nodes) {
      const std::optional<int> code = it::wait_exit(pid, limit);
      if (code) pid = -1;  // reaped
      codes.emplace_back(name, code);
    }
    return codes;
  }
};

// Worker 1: registers with the job's fingerprint, model layout and secret, as
// a peer that holds a worker's credentials can (a stolen secret or key).
class EarlyDonePeer {
 public:
  explicit EarlyDonePeer(const RunConfig& config)
      : security_(SecurityContext::load(config.security, Role::kWorker, 1)),
        client_(std::make_unique<ZmqTransport>(), config.cluster.scheduler, Role::kWorker, config.cluster, nullptr,
                &security_) {
    Logger log("early-done peer", LogLevel::kError);
    const Workload workload = make_workload(config, 1, log);
    RegisterRequest req;
    req.requested_rank = 1;
    req.host = "early-done peer";
    req.job_fingerprint = job_fingerprint(config.mode, config.ps.partition_bytes, config.cluster.num_servers,
                                          config.cluster.num_workers);
    req.layout = workload.model->layout();
    REQUIRE(client_.register_node(req).rank == 1);
  }
  // `done`, without waiting for the end of the job.
  void done() {
    Header h;
    h.type = MsgType::kDone;
    h.role = Role::kWorker;
    h.sender = 1;
    client_.connection().send(h);
  }

 private:
  SecurityContext security_;
  SchedulerClient client_;
};

}  // namespace

TEST_CASE("abort: a peer's done while worker 0 waits at the initial barrier ends the job, naming the done") {
  Job job("abort");
  EarlyDonePeer peer(job.config());
  REQUIRE(it::wait_until([&] { return it::contains(job.output("scheduler"), "worker 0 arrived at barrier 'initial weights'"); },
                         std::chrono::milliseconds(kTimeoutMs), "worker 0 at the initial barrier"));
  peer.done();
  // Within the job's timeout: the abort reaches every node at once.
  for (const auto& [name, code] : job.exits(std::chrono::milliseconds(kTimeoutMs))) {
    CAPTURE(name);
    INFO(job.output(name));
    REQUIRE(code.has_value());  // before the fix: worker 0 waited for ever, and the job with it
    CHECK(*code != 0);
  }
  const std::string why = "worker 1 said done before the end of the job";
  CHECK(it::contains(job.output("scheduler"), why));
  CHECK(it::contains(job.output("scheduler"), "barrier 'initial weights'"));
  CHECK(it::contains(job.output("worker-0"), why));  // the waiting worker hears why
}

TEST_CASE("continue: a peer that says done at once is dropped, and worker 0 trains on and finishes the job") {
  Job job("continue");
  EarlyDonePeer peer(job.config());
  peer.done();  // at once after the rendezvous: worker 0 may not have reached the initial barrier yet
  for (const auto& [name, code] : job.exits(std::chrono::milliseconds(180000))) {  // worker 0 trains the whole job
    CAPTURE(name);
    INFO(job.output(name));
    REQUIRE(code.has_value());
    CHECK(*code == 0);
  }
  const std::string scheduler = job.output("scheduler");
  CHECK(it::contains(scheduler, "worker 1 said done before the end of the job"));
  CHECK(it::contains(scheduler, "dropped from the job"));
  CHECK(it::contains(job.output("worker-0"), "done: "));  // worker 0's training summary line
}
