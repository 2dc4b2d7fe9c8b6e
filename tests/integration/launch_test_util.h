// Helpers of the integration tests: run the `launch` program as a real
// process (output to a file, with tests/support/process.h) and reading a run
// directory.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/wire/job_secret.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace it {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline const fs::path kBinDir = PSTRAIN_BIN_DIR;
inline const fs::path kSourceDir = PSTRAIN_SOURCE_DIR;

using pstrain::test::TempDir;  // tests/support/temp_dir.h
using pstrain::test::wait_until;  // tests/support/wait.h
using pstrain::test::Exit;

inline std::string read_file(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_file(const fs::path& file, const std::string& text, bool executable = false) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
  if (executable) fs::permissions(file, fs::perms::owner_all, fs::perm_options::add);
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One line of what a test measured, on stdout. Not doctest's MESSAGE: that
// also prints every INFO in scope (a whole job's output when it passes),
// which buries the one failure a CI log shows.
inline void note(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Whether `output` has a line "[<seconds> <node>] <text>": one prefix, the
// job-clock time and the node's name, then exactly `text`.
inline bool has_line(const std::string& output, const std::string& node, const std::string& text) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const std::size_t close = line.find("] ");
    if (line.rfind("[", 0) != 0 || close == std::string::npos) continue;
    const std::string head = line.substr(1, close - 1);  // "   1.234 worker 1"
    const std::size_t space = head.find_first_not_of(' ');
    if (space == std::string::npos) continue;
    const std::size_t name_at = head.find(' ', space);
    if (name_at == std::string::npos || head.substr(name_at + 1) != node) continue;
    if (head.find_first_not_of("0123456789.", space) != name_at) continue;
    if (line.substr(close + 2) == text) return true;
  }
  return false;
}

inline int count_lines(const fs::path& file) {
  std::ifstream in(file);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.empty() ? 0 : 1;
  return n;
}

// The `launch` program running with `args`, stdout and stderr into one file.
class LaunchProcess : public pstrain::test::ChildProcess {
 public:
  LaunchProcess(const std::vector<std::string>& args, fs::path output_file)
      : ChildProcess(launch_command(args), std::move(output_file)) {}

 private:
  static pstrain::test::Command launch_command(const std::vector<std::string>& args) {
    pstrain::test::Command c{{(kBinDir / "launch").string()}, {}, {}};
    c.argv.insert(c.argv.end(), args.begin(), args.end());
    return c;
  }
};

struct Result {
  Exit exit;
  std::string output;
};

// Runs `launch` to its end (at most `limit`; a run past it is a test failure).
inline Result run_launch(const std::vector<std::string>& args, const fs::path& dir,
                         std::chrono::milliseconds limit = 300s) {
  LaunchProcess p(args, dir / "launch-output.txt");
  const auto exit = p.wait(limit);
  if (!exit) throw std::runtime_error("launch did not exit within the test's limit; output:\n" + p.output());
  return Result{*exit, p.output()};
}

// --config CONFIG --run-dir RUN --bin-dir BIN --timeout-s 300
inline std::vector<std::string> launch_args(const fs::path& config, const fs::path& run_dir,
                                            const fs::path& bin_dir = kBinDir) {
  return {"--config", config.string(), "--run-dir", run_dir.string(), "--bin-dir", bin_dir.string(),
          "--timeout-s", "300"};
}

// The --set pair that gives an async or ssp run of configs/tiny_sync.toml tiny_async.toml's rate,
// 0.025 (none for another mode). At tiny_sync's 0.05 such a run now and then collapses to chance:
// measured with 3 async workers, 2 of 556 runs ended at 0.10 (loss ln 10: every ReLU dead; its
// first update overshoots, loss 5.5 -> 40, and the stale updates after it finish the job), and at
// 0.1 half of them did; at 0.025 none of 1,387 (docs/config.md, "Async and ssp"). An accuracy check of a test about something else (a restart, a resume, a
// change) then fails for no fault of its own.
inline std::vector<std::string> tiny_async_rate(const std::string& mode) {
  if (mode == "async" || mode == "ssp") return {"--set", "optimizer.lr=0.025"};
  return {};
}

// run_dir/pids.txt: "<log_stem> <pid>" per line.
inline std::map<std::string, pid_t> read_pids(const fs::path& run_dir) {
  std::map<std::string, pid_t> pids;
  std::istringstream in(read_file(run_dir / "pids.txt"));
  std::string name;
  pid_t pid = 0;
  while (in >> name >> pid) pids[name] = pid;
  return pids;
}

inline bool process_gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// The launcher's line when it fences `node` ("worker 1"), process `pid`
// (tools/launcher/fencing.h).
inline std::string fenced_line(const std::string& node, pid_t pid) {
  return node + " (pid " + std::to_string(pid) + ") is still running after the scheduler declared it failed";
}

// A port that was free a moment ago (the kernel's pick for port 0).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  if (!ok) throw std::runtime_error("could not find a free port");
  return ntohs(addr.sin_port);
}

// Starts `argv` with `env` added to ours (and the launchers' rank variables
// removed first), stdout and stderr into `output`, as a role started by hand.
inline pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                   const fs::path& output) {
  return pstrain::test::spawn({argv, env, {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK",
                                           "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                           "PSTRAIN_JOB_START_US"}},
                              output);
}

// Roles started by hand need the job's secret (security.mode "off",
// common/wire/job_secret.h): writes a fresh one to `dir`/secret (mode 0600)
// and returns the override that names it, the same for every node.
inline std::string secret_override(const fs::path& dir) {
  pstrain::write_secret_file(dir / "secret", pstrain::generate_job_secret());
  return "security.secret_file=" + (dir / "secret").string();
}

// The exit code of `pid` (128 + signal when killed) once it has exited, within `limit`.
inline std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  const std::optional<Exit> exit = pstrain::test::wait_exit(pid, limit);
  if (!exit) return std::nullopt;
  return exit->signaled ? 128 + exit->code : exit->code;
}

// VmRSS of `pid` in bytes (0 once it is gone).
inline std::int64_t rss_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

// Worker 0's step records in RUN_DIR/metrics/worker-0.jsonl so far: their time_s.
inline std::vector<double> worker0_step_times(const fs::path& run_dir) {
  std::vector<double> times;
  std::ifstream in(run_dir / "metrics" / "worker-0.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (!contains(line, "\"type\":\"step\"")) continue;
    const std::size_t at = line.find("\"time_s\":");
    if (at != std::string::npos) times.push_back(std::strtod(line.c_str() + at + 9, nullptr));
  }
  return times;
}

}  // namespace it
