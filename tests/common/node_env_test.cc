// The launchers' environment rules of common/node/node_cli.h: which variable gives
// the global rank, WORLD_SIZE against the config, MASTER_ADDR/MASTER_PORT as
// the scheduler's endpoint, and the errors for bad values.
#include <doctest/doctest.h>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "common/base/errors.h"
#include "common/node/node_cli.h"

namespace pstrain {
namespace {

const std::string kSyncConfig = std::string(PSTRAIN_SOURCE_DIR) + "/configs/tiny_sync.toml";  // 2 servers, 2 workers
const std::string kAllreduceConfig = std::string(PSTRAIN_SOURCE_DIR) + "/configs/tiny_allreduce.toml";

// Clears every variable these rules read for the test's lifetime and puts
// back what was there before, so tests neither see nor leak environment.
class CleanEnv {
 public:
  CleanEnv() {
    for (const char* name : kNames) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      unsetenv(name);
    }
  }
  ~CleanEnv() {
    for (const char* name : kNames) {
      const auto it = saved_.find(name);
      if (it == saved_.end()) {
        unsetenv(name);
      } else {
        setenv(name, it->second.c_str(), 1);
      }
    }
  }
  CleanEnv(const CleanEnv&) = delete;
  CleanEnv& operator=(const CleanEnv&) = delete;

  void set(const char* name, const char* value) { setenv(name, value, 1); }

 private:
  static constexpr const char* kNames[] = {"RANK",        "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                           "SLURM_PROCID", "WORLD_SIZE",           "MASTER_ADDR", "MASTER_PORT"};
  std::map<std::string, std::string> saved_;
};

NodeArgs args_for(const std::string& config) {
  NodeArgs args;
  args.config_path = config;
  return args;
}

TEST_CASE("no launcher variable: no launcher rank") {
  CleanEnv env;
  CHECK_FALSE(launcher_rank().has_value());
  CHECK(role_rank_from_launcher(1, 2, "server") == -1);
}

TEST_CASE("each launcher's rank variable is read") {
  for (const char* name : kRankEnvVars) {
    CAPTURE(name);
    CleanEnv env;
    env.set(name, "4");
    CHECK(launcher_rank() == std::optional<int>(4));
  }
}

TEST_CASE("the innermost launcher's rank wins: RANK > OMPI > PMIX > PMI > SLURM") {
  CleanEnv env;
  env.set("SLURM_PROCID", "1");  // e.g. `srun torchrun ...`: the node's task index
  CHECK(launcher_rank() == std::optional<int>(1));
  env.set("PMI_RANK", "2");
  CHECK(launcher_rank() == std::optional<int>(2));
  env.set("PMIX_RANK", "3");
  CHECK(launcher_rank() == std::optional<int>(3));
  env.set("OMPI_COMM_WORLD_RANK", "4");
  CHECK(launcher_rank() == std::optional<int>(4));
  env.set("RANK", "5");
  CHECK(launcher_rank() == std::optional<int>(5));  // disagreeing outer values are ignored, not an error
}

TEST_CASE("a rank that is not a non-negative integer is a config error naming the variable") {
  for (const char* bad : {"one", "", "-1", "3x", "1.5", "99999999999"}) {
    CAPTURE(bad);
    CleanEnv env;
    env.set("RANK", bad);
    env.set("SLURM_PROCID", "0");  // a valid outer value does not hide the bad inner one
    CHECK_THROWS_WITH_AS(launcher_rank(), ("environment variable RANK='" + std::string(bad) +
                                           "' is not a rank (a non-negative integer)").c_str(),
                         ConfigError);
  }
}

TEST_CASE("the global rank maps to a role's rank, and a rank of another role is an error") {
  CleanEnv env;
  env.set("RANK", "4");
  CHECK(role_rank_from_launcher(3, 2, "worker") == 1);  // 1 scheduler + 2 servers: workers are 3..4
  CHECK_THROWS_WITH_AS(role_rank_from_launcher(1, 2, "server"),
                       "launcher rank 4 is not a server: servers are global ranks 1..2", ConfigError);
}

TEST_CASE("WORLD_SIZE must be the job's 1 + servers + workers when the rank comes from the environment") {
  CleanEnv env;
  env.set("RANK", "3");
  env.set("WORLD_SIZE", "5");
  CHECK_NOTHROW(load_node_config(args_for(kSyncConfig)));
  env.set("WORLD_SIZE", "4");
  CHECK_THROWS_WITH_AS(load_node_config(args_for(kSyncConfig)),
                       "environment variable WORLD_SIZE=4, but the config's job has 5 processes (1 scheduler + "
                       "cluster.servers servers, none in allreduce mode, + cluster.workers workers)",
                       ConfigError);
  env.set("WORLD_SIZE", "3");  // allreduce: no servers, 1 + 2 workers
  CHECK_NOTHROW(load_node_config(args_for(kAllreduceConfig)));
  NodeArgs set_servers = args_for(kSyncConfig);
  set_servers.overrides = {"cluster.servers=1"};
  env.set("WORLD_SIZE", "4");
  CHECK_NOTHROW(load_node_config(set_servers));  // overrides count
}

TEST_CASE("WORLD_SIZE is not a count: config error") {
  for (const char* bad : {"five", "0", "-5", ""}) {
    CAPTURE(bad);
    CleanEnv env;
    env.set("RANK", "0");
    env.set("WORLD_SIZE", bad);
    CHECK_THROWS_WITH_AS(load_node_config(args_for(kSyncConfig)),
                         ("environment variable WORLD_SIZE='" + std::string(bad) + "' is not a process count").c_str(),
                         ConfigError);
  }
}

TEST_CASE("WORLD_SIZE is not checked when --rank is given or no rank variable is set") {
  CleanEnv env;
  env.set("WORLD_SIZE", "17");
  CHECK_NOTHROW(load_node_config(args_for(kSyncConfig)));  // no launcher rank: not this launcher's job
  env.set("RANK", "1");
  NodeArgs args = args_for(kSyncConfig);
  args.rank = 0;
  CHECK_NOTHROW(load_node_config(args));
  args.rank = -1;
  CHECK_THROWS_AS(load_node_config(args), ConfigError);
}

TEST_CASE("scheduler endpoint: --scheduler > MASTER_ADDR/MASTER_PORT > cluster.scheduler") {
  CleanEnv env;
  CHECK(load_node_config(args_for(kSyncConfig)).cluster.scheduler == "tcp://127.0.0.1:0");
  env.set("MASTER_ADDR", "node1");
  env.set("MASTER_PORT", "29500");
  CHECK(scheduler_from_master_env() == "tcp://node1:29500");
  CHECK(load_node_config(args_for(kSyncConfig)).cluster.scheduler == "tcp://node1:29500");
  NodeArgs flag = args_for(kSyncConfig);
  flag.scheduler = "tcp://10.0.0.1:4000";
  CHECK(load_node_config(flag).cluster.scheduler == "tcp://10.0.0.1:4000");
  env.set("MASTER_ADDR", "::1");
  CHECK(scheduler_from_master_env() == "tcp://[::1]:29500");
}

TEST_CASE("MASTER_PORT out of range or not a number: config error") {
  for (const char* bad : {"0", "65536", "-1", "http", "80a", ""}) {
    CAPTURE(bad);
    CleanEnv env;
    env.set("MASTER_ADDR", "node1");
    env.set("MASTER_PORT", bad);
    CHECK_THROWS_WITH_AS(scheduler_from_master_env(),
                         ("environment variable MASTER_PORT='" + std::string(bad) + "' is not a port (1..65535)").c_str(),
                         ConfigError);
  }
  CleanEnv env;
  env.set("MASTER_ADDR", "node1");
  env.set("MASTER_PORT", "65535");
  CHECK(scheduler_from_master_env() == "tcp://node1:65535");
}

TEST_CASE("MASTER_ADDR without MASTER_PORT, or the other way round: config error") {
  {
    CleanEnv env;
    env.set("MASTER_ADDR", "node1");
    CHECK_THROWS_WITH_AS(load_node_config(args_for(kSyncConfig)),
                         "environment variable MASTER_ADDR='node1' is set but MASTER_PORT is not: set both (the "
                         "scheduler's host and port) or neither",
                         ConfigError);
    NodeArgs flag = args_for(kSyncConfig);
    flag.scheduler = "tcp://10.0.0.1:4000";
    CHECK_NOTHROW(load_node_config(flag));  // --scheduler given: the variables are not read
  }
  {
    CleanEnv env;
    env.set("MASTER_PORT", "29500");
    CHECK_THROWS_WITH_AS(scheduler_from_master_env(),
                         "environment variable MASTER_PORT is set but MASTER_ADDR is not: set both (the scheduler's "
                         "host and port) or neither",
                         ConfigError);
  }
}

}  // namespace
}  // namespace pstrain

TEST_CASE("guarded_main: a write to a closed connection is EPIPE, not a SIGPIPE that kills the node") {
  // In a child, so the test process's own signal disposition is not changed.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGPIPE, SIG_DFL);  // as a freshly started node
    const int code = pstrain::guarded_main("test", [] {
      int fds[2];
      if (pipe(fds) != 0) return 10;
      close(fds[0]);  // the peer is gone
      const char byte = 'x';
      const ssize_t n = write(fds[1], &byte, 1);
      return n == -1 && errno == EPIPE ? 0 : 11;
    });
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK_FALSE(WIFSIGNALED(status));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("guarded_main: a node that dies of a fatal signal names it and leaves a backtrace, and still dies of it") {
  for (const int sig : {SIGSEGV, SIGBUS, SIGABRT}) {  // SIGBUS raised: a signal sent, no address to name
    CAPTURE(sig);
    int out[2];
    REQUIRE(pipe(out) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      dup2(out[1], STDERR_FILENO);
      close(out[0]);
      const int code = pstrain::guarded_main("pstrain-test-node", [sig] {
        if (sig == SIGSEGV) {
          volatile int* volatile nowhere = nullptr;
          return *nowhere;  // a real fault, with its address
        }
        raise(sig);
        return 20;
      });
      _exit(code);
    }
    close(out[1]);
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<std::size_t>(n));
    close(out[0]);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));  // the default action, after the report
    CHECK(WTERMSIG(status) == sig);
    CAPTURE(text);
    const std::string name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGABRT";
    CHECK(text.find("pstrain-test-node: fatal signal " + std::to_string(sig) + " (" + name + ")") != std::string::npos);
    CHECK(text.find("backtrace:\n") != std::string::npos);
    if (sig == SIGSEGV) {
      CHECK(text.find("at address 0x0;") != std::string::npos);
      CHECK(text.find("sent by pid") == std::string::npos);
    } else {
      CHECK(text.find("sent by pid " + std::to_string(child)) != std::string::npos);  // raise(): the node itself
      CHECK(text.find("at address") == std::string::npos);
    }
    // At least a few frames, one line each.
    CHECK(std::count(text.begin(), text.end(), '\n') >= 4);
  }
}

namespace pstrain {
namespace {

// prctl(PR_GET_DUMPABLE) in a forked child after close_to_other_processes()
// with PSTRAIN_KEEP_CORES as given (nullptr: unset); -1 when the child failed.
int dumpable_after_closing(const char* keep_cores) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (keep_cores == nullptr) {
      unsetenv(kKeepCoresEnv);
    } else {
      setenv(kKeepCoresEnv, keep_cores, 1);
    }
    const bool closed = close_to_other_processes();
    const int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    _exit(dumpable == (closed ? 0 : 1) ? dumpable : 100);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) && WEXITSTATUS(status) != 100 ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("close_to_other_processes: a node is not dumpable unless PSTRAIN_KEEP_CORES=1 keeps its cores") {
  CHECK(dumpable_after_closing(nullptr) == 0);
  CHECK(dumpable_after_closing("0") == 0);
  CHECK(dumpable_after_closing("1") == 1);
}

}  // namespace pstrain
