#include "common/node/node_cli.h"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <string>

#include "common/base/endpoint_address.h"
#include "common/checkpoint/checkpoint.h"
#include "common/base/errors.h"
#include "common/base/fatal_signal.h"
#include "common/observe/trace.h"

namespace pstrain {

void add_node_options(CLI::App& app, NodeArgs& args) {
  app.add_option("--config", args.config_path, "run configuration (TOML)")->required();
  app.add_option("--set", args.overrides, "override a config key: section.key=value (repeatable)");
  app.add_option("--rank", args.rank, "this node's rank within its role (default: from the launcher or assigned)");
  app.add_option("--scheduler", args.scheduler, "scheduler endpoint (overrides cluster.scheduler)");
  app.add_option("--resume", args.resume,
                 "start from a checkpoint: a step-N directory, or a run directory / checkpoint root (its newest "
                 "complete checkpoint)");
  app.add_flag("--rejoin", args.rejoin,
               "replace a failed node of the same rank in a running job (cluster.on_worker_failure / "
               "on_server_failure = \"restart\"; the launcher passes it); needs --rank");
  app.add_flag("--join", args.join,
               "(workers) join a running elastic job in a vacant slot (cluster.max_workers); --rank R asks for slot R")
      ->excludes("--rejoin")
      ->excludes("--resume");
}

std::string resume_checkpoint(const NodeArgs& args, const RunConfig& config,
                              const std::function<void(const std::string&)>& say) {
  if (args.resume.empty()) return "";
  std::vector<std::string> skipped;
  try {
    const FoundCheckpoint found = resolve_resume(args.resume, config, &skipped);
    for (const std::string& s : skipped) say("passed over checkpoint " + s);
    return found.dir.string();
  } catch (const CheckpointError& e) {
    for (const std::string& s : skipped) say("passed over checkpoint " + s);
    throw ConfigError(e.what());
  }
}

RunConfig load_node_config(const NodeArgs& args) {
  RunConfig config = load_config(args.config_path);
  apply_overrides(config, args.overrides);
  if (!args.scheduler.empty()) {
    config.cluster.scheduler = args.scheduler;
  } else if (std::string master = scheduler_from_master_env(); !master.empty()) {
    config.cluster.scheduler = std::move(master);
  }
  if (args.rank < 0 && launcher_rank()) check_world_size(job_world_size(config));
  return config;
}

void check_scheduler_known(const RunConfig& config, const char* role) {
  const std::string& endpoint = config.cluster.scheduler;
  const std::optional<EndpointAddress> address = parse_endpoint(endpoint);
  const std::string port = address && address->is_tcp() ? address->port : "";
  if (port != "0" && port != "*") return;
  throw ConfigError(std::string("a ") + role + " needs the scheduler's actual endpoint, but cluster.scheduler = '" +
                    endpoint +
                    "' has port " + port + " (the scheduler picks a free port when it starts): pass --scheduler "
                    "tcp://HOST:PORT as the scheduler printed it (or wrote it with --endpoint-file), set "
                    "MASTER_ADDR and MASTER_PORT, or give cluster.scheduler a fixed port");
}

namespace {

// A non-negative integer that fits an int, or nullopt.
std::optional<long> parse_count(const char* text) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || errno == ERANGE || value > INT_MAX) return std::nullopt;
  return value;
}

}  // namespace

bool started_by_launcher() {
  const char* value = std::getenv(kLauncherEnv);
  return value != nullptr && *value != '\0';
}

std::optional<int> launcher_rank() {
  for (const char* name : kRankEnvVars) {
    if (const char* value = std::getenv(name)) {
      const auto rank = parse_count(value);
      if (!rank) {
        throw ConfigError(std::string("environment variable ") + name + "='" + value +
                          "' is not a rank (a non-negative integer)");
      }
      return static_cast<int>(*rank);
    }
  }
  return std::nullopt;
}

int job_world_size(const RunConfig& config) {
  const int servers = config.mode == Mode::kAllreduce ? 0 : config.cluster.num_servers;
  return 1 + servers + config.cluster.num_workers;
}

void check_world_size(int expected) {
  const char* value = std::getenv("WORLD_SIZE");
  if (value == nullptr) return;
  const auto size = parse_count(value);
  if (!size || *size == 0) {
    throw ConfigError(std::string("environment variable WORLD_SIZE='") + value + "' is not a process count");
  }
  if (*size != expected) {
    throw ConfigError("environment variable WORLD_SIZE=" + std::to_string(*size) + ", but the config's job has " +
                      std::to_string(expected) +
                      " processes (1 scheduler + cluster.servers servers, none in allreduce mode, + "
                      "cluster.workers workers)");
  }
}

std::string scheduler_from_master_env() {
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr == nullptr && port == nullptr) return "";
  if (addr == nullptr || *addr == '\0') {
    throw ConfigError("environment variable MASTER_PORT is set but MASTER_ADDR is not: set both (the scheduler's "
                      "host and port) or neither");
  }
  if (port == nullptr) {
    throw ConfigError(std::string("environment variable MASTER_ADDR='") + addr +
                      "' is set but MASTER_PORT is not: set both (the scheduler's host and port) or neither");
  }
  const auto number = parse_count(port);
  if (!number || *number < 1 || *number > 65535) {
    throw ConfigError(std::string("environment variable MASTER_PORT='") + port + "' is not a port (1..65535)");
  }
  std::string host = addr;
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";  // IPv6
  return "tcp://" + host + ":" + std::to_string(*number);
}

int role_rank_from_launcher(int role_offset, int role_count, const char* role_name) {
  const auto global = launcher_rank();
  if (!global) return -1;
  const int rank = *global - role_offset;
  if (rank < 0 || rank >= role_count) {
    throw ConfigError("launcher rank " + std::to_string(*global) + " is not a " + role_name + ": " + role_name +
                      "s are global ranks " + std::to_string(role_offset) + ".." +
                      std::to_string(role_offset + role_count - 1));
  }
  return rank;
}

namespace {

sigset_t g_termination_signals;  // set once, before any thread (install_termination_watch)

// A forked child has no signal thread: SIGTERM and SIGINT act in it as by default again.
void unblock_termination_in_child() { pthread_sigmask(SIG_UNBLOCK, &g_termination_signals, nullptr); }

// The signal thread: waits for SIGTERM or SIGINT, writes the trace parts,
// then ends the process by that signal's default action.
void await_termination(const std::string& program) {
  int sig = 0;
  while (sigwait(&g_termination_signals, &sig) != 0) {
  }
  for (const std::string& error : write_live_trace_files()) {
    std::fprintf(stderr, "%s: SIG%s: trace not written: %s\n", program.c_str(), sigabbrev_np(sig), error.c_str());
  }
  std::fflush(nullptr);
  std::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);  // the default action ends the process, and its status names the signal
  _exit(128 + sig);
}

}  // namespace

void install_termination_watch(const char* program) {
  static std::once_flag once;
  std::call_once(once, [program] {
    sigemptyset(&g_termination_signals);
    for (const int sig : {SIGTERM, SIGINT}) {
      struct sigaction current {};
      sigaction(sig, nullptr, &current);
      // Ignored (a shell's background job ignores SIGINT): it stays ignored.
      if (current.sa_handler != SIG_IGN) sigaddset(&g_termination_signals, sig);
    }
    if (sigisemptyset(&g_termination_signals)) return;
    pthread_sigmask(SIG_BLOCK, &g_termination_signals, nullptr);  // inherited by every thread made later
    pthread_atfork(nullptr, nullptr, unblock_termination_in_child);
    std::thread(await_termination, std::string(program)).detach();
  });
}

bool close_to_other_processes() {
  const char* keep = std::getenv(kKeepCoresEnv);
  if (keep != nullptr && std::string(keep) == "1") return false;
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    std::fprintf(stderr, "warning: cannot make this process non-dumpable: %s\n", std::strerror(errno));
    return false;
  }
  return true;
}

int guarded_main(const char* program, const std::function<int()>& body) {
  // A peer that closes its connection while this node writes to it must be an
  // error on that write (EPIPE), handled by whoever wrote, never a signal that
  // kills the node: ZeroMQ sends with MSG_NOSIGNAL, but Gloo's tcp pairs write
  // with plain writev (an allreduce survivor died of SIGPIPE when its peer was
  // killed mid-step).
  std::signal(SIGPIPE, SIG_IGN);
  install_fatal_signal_report(program);  // a crash leaves its signal and a backtrace on stderr
  install_termination_watch(program);    // SIGTERM, SIGINT: the trace is written first
  try {
    return body();
  } catch (const CLI::ParseError&) {
    throw;  // the caller's CLI11_PARSE handles usage errors
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s: config error: %s\n", program, e.what());
    return kExitConfig;
  } catch (const AbortedError& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return kExitAborted;
  } catch (const DivergedError& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return kExitDiverged;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return kExitFailed;
  }
}

}  // namespace pstrain
