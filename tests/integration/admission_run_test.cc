// Admission with real processes (issue 27, items 4 and 7):
// - security.mode = "off" (the default): a peer that reaches the scheduler's
//   port but holds no secret of the job cannot take a free worker slot; the
//   job, its slot then taken by the honest worker, ends with the same weights
//   as the same job never approached; launch makes the secret (RUN_DIR/secret,
//   0600) and hands the nodes its path only;
// - a job whose config leaves security.mode unset and reaches beyond
//   loopback says what the launcher chose.
// (Curve with a restarted worker: curve_restart_test.cc.)
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/config/config.h"
#include "common/node/scheduler_client.h"
#include "common/transport/make_transport.h"
#include "common/wire/job_secret.h"
#include "tests/integration/launch_test_util.h"
#include "tests/support/throw_text.h"
#include "tools/launcher/launch_plan.h"

namespace {

// configs/tiny_sync.toml (2 servers, 2 workers), 1 epoch, roles started by
// hand with the job's secret; worker 1 last, when the test says.
struct HandJob {
  it::TempDir dir{"admission"};
  it::fs::path run = dir.path() / "run";
  std::string port = std::to_string(it::free_port());
  std::vector<std::string> job;  // what every node of the job is given (the stranger: all but the secret)
  std::string secret = it::secret_override(dir.path());
  std::vector<std::pair<std::string, pid_t>> nodes;

  HandJob() {
    job = {"--config", (it::kSourceDir / "configs/tiny_sync.toml").string(), "--set", "output.run_dir=" + run.string(),
           "--set", "workload.epochs=1", "--set", "output.trace=off", "--scheduler", "tcp://127.0.0.1:" + port};
  }
  ~HandJob() {
    for (auto& [name, pid] : nodes) {
      if (pid <= 0) continue;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  std::vector<std::string> argv(const std::string& program, const std::string& rank, bool with_secret = true) const {
    std::vector<std::string> a{(it::kBinDir / program).string()};
    a.insert(a.end(), job.begin(), job.end());
    if (with_secret) a.insert(a.end(), {"--set", secret});
    if (!rank.empty()) a.insert(a.end(), {"--rank", rank});
    return a;
  }
  it::fs::path out(const std::string& name) const { return dir.path() / (name + ".txt"); }
  void start(const std::string& name, const std::vector<std::string>& a,
             const std::map<std::string, std::string>& env = {}) {
    nodes.emplace_back(name, it::spawn(a, env, out(name)));
  }
  void start_all_but_worker_1() {
    auto sched = argv("pstrain-scheduler", "");
    sched.insert(sched.end(), {"--set", "cluster.scheduler=tcp://127.0.0.1:" + port});
    start("scheduler", sched);
    for (const char* s : {"0", "1"}) start(std::string("server-") + s, argv("pstrain-server", s));
    start("worker-0", argv("pstrain-worker", "0"));
  }
  // Waits for `name` to exit: its code (128 + signal), nullopt past `limit`.
  std::optional<int> wait(const std::string& name, std::chrono::seconds limit) {
    for (auto& [n, pid] : nodes) {
      if (n != name || pid <= 0) continue;
      const std::optional<int> code = it::wait_exit(pid, limit);
      if (code) pid = -1;
      return code;
    }
    return std::nullopt;
  }
  // Every node still running exits 0.
  void expect_success() {
    for (auto& [name, pid] : nodes) {
      if (pid <= 0) continue;
      CAPTURE(name);
      const std::optional<int> code = wait(name, std::chrono::seconds(180));
      INFO(it::read_file(out(name)));
      CHECK(code == std::optional<int>(0));
    }
  }
};

std::string final_weights(const it::fs::path& run) {
  REQUIRE(it::fs::exists(run / "weights.bin"));
  return it::read_file(run / "weights.bin");
}

}  // namespace

TEST_CASE("security off: a stranger without the job's secret cannot take a free worker slot; the job ends as if untouched") {
  std::string untouched;
  {
    HandJob job;
    job.start_all_but_worker_1();
    job.start("worker-1", job.argv("pstrain-worker", "1"));
    job.expect_success();
    untouched = final_weights(job.run);
  }
  HandJob job;
  job.start_all_but_worker_1();
  // Worker 0 in, worker 1's slot free: the rendezvous waits for it.
  REQUIRE(it::wait_until([&] { return it::contains(it::read_file(job.out("scheduler")), "registered 2/2 servers and 1/2 workers"); },
                         std::chrono::seconds(60), "the servers and worker 0 to register"));

  // A stranger's worker program, the job's config and rank 1, its own secret (not the job's).
  pstrain::write_secret_file(job.dir.path() / "stranger-secret", pstrain::generate_job_secret());
  job.start("stranger", job.argv("pstrain-worker", "1", false),
            {{pstrain::kSecretFileEnv, (job.dir.path() / "stranger-secret").string()}});
  const std::optional<int> stranger = job.wait("stranger", std::chrono::seconds(60));
  const std::string said = it::read_file(job.out("stranger"));
  INFO(said);
  REQUIRE(stranger.has_value());
  CHECK(*stranger != 0);
  CHECK(it::contains(said, "register: refused a worker from "));
  CHECK(it::contains(said, "wrong answer to the job's challenge"));

  // A peer that sends a registration with no answer at all (no secret): refused too, saying so.
  pstrain::ClusterConfig cluster;
  cluster.timeout_ms = 10000;
  pstrain::SchedulerClient raw(pstrain::make_transport("tcp", std::int64_t{1} << 20), "tcp://127.0.0.1:" + job.port,
                               pstrain::Role::kWorker, cluster);
  pstrain::RegisterRequest req;
  req.requested_rank = 1;
  req.host = "stranger";
  const std::string raw_refusal = pstrain::test::thrown_text<pstrain::TransportError>([&] { raw.register_node(req); });
  CHECK(it::contains(raw_refusal, "no answer to the job's challenge"));

  // The job is unharmed: the scheduler refused them and still waits for worker 1.
  const std::string scheduler = it::read_file(job.out("scheduler"));
  CHECK(it::contains(scheduler, "refused a worker from"));
  CHECK_FALSE(it::contains(scheduler, "registered 2/2 servers and 2/2 workers"));
  job.start("worker-1", job.argv("pstrain-worker", "1"));
  job.expect_success();
  CHECK(final_weights(job.run) == untouched);
}

TEST_CASE("security off through launch: a fresh secret in RUN_DIR/secret (0600), its path, never the secret, handed on") {
  it::TempDir dir("admission");
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "workload.epochs=1", "--set", "output.trace=off", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  CHECK(r.exit.code == 0);
  struct stat st {};
  REQUIRE(::stat((run / "secret").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  const pstrain::RunConfig config = pstrain::load_config((run / "config.toml").string());
  CHECK(config.security.mode == "off");
  CHECK(config.security.secret_file == (run / "secret").string());
  std::string hex;
  std::getline(std::ifstream(run / "secret"), hex);
  REQUIRE(hex.size() == 64);
  CHECK_FALSE(it::contains(it::read_file(run / "config.toml"), hex));
  CHECK_FALSE(it::contains(r.output, hex));
  // Everyone answered the challenge: no refusal in the scheduler's log.
  CHECK_FALSE(it::contains(it::read_file(run / "logs/scheduler.log"), "refused"));
  // Not beyond loopback: no line about the choice of security mode.
  CHECK_FALSE(it::contains(r.output, "security.mode is not set"));
}

TEST_CASE("security off through launch: a secret_file of the user's that other users can read is refused, naming the key") {
  it::TempDir dir("admission");
  pstrain::write_secret_file(dir.path() / "mine", pstrain::generate_job_secret());
  REQUIRE(::chmod((dir.path() / "mine").c_str(), 0640) == 0);
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "security.secret_file=" + (dir.path() / "mine").string()});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  CHECK(r.exit.code == pstrain::kExitConfig);
  CHECK(it::contains(r.output, "--set security.secret_file=" + (dir.path() / "mine").string() +
                                   ": key 'security.secret_file': security: secret file"));
  CHECK(it::contains(r.output, "open to other users (mode 0640)"));
  CHECK_FALSE(it::fs::exists(run / "pids.txt"));
}

TEST_CASE("launch plan: security.mode left unset with a scheduler beyond loopback gets one line saying what it chose") {
  it::TempDir dir("admission");
  pstrain::launcher::LaunchRequest request;
  request.config_path = (it::kSourceDir / "configs/tiny_sync.toml").string();
  request.run_dir = (dir.path() / "run").string();
  request.bin_dir = it::kBinDir;
  CHECK(pstrain::launcher::plan_launch(request).security_note.empty());  // loopback only
  request.overrides = {"cluster.scheduler=tcp://0.0.0.0:0"};               // every interface
  const pstrain::launcher::LaunchPlan plan = pstrain::launcher::plan_launch(request);
  CHECK(it::contains(plan.security_note, "security.mode is not set and this job reaches beyond loopback (0.0.0.0)"));
  CHECK(it::contains(plan.security_note, "chose \"off\""));
  CHECK(it::contains(plan.security_note, "set security.mode = \"curve\" to encrypt"));
  CHECK(plan.config.security.secret_file == (dir.path() / "run" / "secret").string());
  CHECK(plan.generate_secret_in == dir.path() / "run" / "secret");
  request.overrides.push_back("security.mode=off");  // chosen: nothing to say
  CHECK(pstrain::launcher::plan_launch(request).security_note.empty());
}
