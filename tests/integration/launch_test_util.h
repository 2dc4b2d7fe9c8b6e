// Helpers of the integration tests: run the `launch` program as a real
// process (output to a file), temp dirs, and reading a run directory.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

namespace it {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline const fs::path kBinDir = PSTRAIN_BIN_DIR;
inline const fs::path kSourceDir = PSTRAIN_SOURCE_DIR;

// A fresh directory under the system's temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "pstrain-it-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

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

// Polls `condition` every 50 ms for at most `limit`.
inline bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

struct Exit {
  bool signaled = false;
  int code = 0;  // or the signal
};

// The `launch` program running with `args`, stdout and stderr into one file.
class LaunchProcess {
 public:
  LaunchProcess(const std::vector<std::string>& args, fs::path output_file) : output_file_(std::move(output_file)) {
    std::vector<std::string> argv{(kBinDir / "launch").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    const int fd = open(output_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("cannot create " + output_file_.string());
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      execv(raw[0], raw.data());
      _exit(127);
    }
    close(fd);
  }
  ~LaunchProcess() {
    if (!exit_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  LaunchProcess(const LaunchProcess&) = delete;
  LaunchProcess& operator=(const LaunchProcess&) = delete;

  pid_t pid() const { return pid_; }
  std::string output() const { return read_file(output_file_); }

  // Its exit, waiting at most `limit`; empty if it is still running.
  std::optional<Exit> wait(std::chrono::milliseconds limit) {
    wait_until([&] { return reap(); }, limit);
    return exit_;
  }

 private:
  bool reap() {
    if (exit_) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    exit_ = WIFSIGNALED(status) ? Exit{true, WTERMSIG(status)} : Exit{false, WEXITSTATUS(status)};
    return true;
  }

  fs::path output_file_;
  pid_t pid_ = -1;
  std::optional<Exit> exit_;
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

}  // namespace it
