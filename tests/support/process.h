// Starting a program as a child process of a test, its output into a file,
// and waiting for its exit (never sleeping a fixed time for it).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/wait.h"

namespace pstrain::test {

// How a child ended: its exit code, or the signal that killed it.
struct Exit {
  bool signaled = false;
  int code = 0;  // or the signal
};

// What to start: `argv[0]` is the program's path; `env` is added to the test's
// environment after the variables named in `unset` are removed from it.
struct Command {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::vector<std::string> unset;
};

// Starts `command` with stdout and stderr into `output` (created or
// truncated); its pid. A program that cannot be started exits 127.
inline pid_t spawn(const Command& command, const std::filesystem::path& output) {
  if (command.argv.empty()) throw std::invalid_argument("spawn: empty argv");
  const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + output.string());
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    throw std::runtime_error("fork failed");
  }
  if (pid == 0) {
    for (const std::string& name : command.unset) unsetenv(name.c_str());
    for (const auto& [k, v] : command.env) setenv(k.c_str(), v.c_str(), 1);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    std::vector<char*> raw;
    for (const std::string& a : command.argv) raw.push_back(const_cast<char*>(a.c_str()));
    raw.push_back(nullptr);
    execv(raw[0], raw.data());
    _exit(127);
  }
  close(fd);
  return pid;
}

// `pid`'s exit once it has happened, waiting at most `limit`; empty while it
// still runs. Reaps it.
inline std::optional<Exit> wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  std::optional<Exit> exit;
  wait_until(
      [&] {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) != pid) return false;
        exit = WIFSIGNALED(status) ? Exit{true, WTERMSIG(status)} : Exit{false, WEXITSTATUS(status)};
        return true;
      },
      limit, "pid " + std::to_string(pid) + " to exit");
  return exit;
}

// A child process owned by a test: started by the constructor, killed with
// SIGKILL and reaped by the destructor unless it has exited already.
class ChildProcess {
 public:
  ChildProcess(const Command& command, std::filesystem::path output_file)
      : output_file_(std::move(output_file)), pid_(spawn(command, output_file_)) {}
  ~ChildProcess() {
    if (!exit_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Its stdout and stderr so far.
  std::string output() const {
    std::ifstream in(output_file_);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  // Its exit, waiting at most `limit`; empty if it is still running.
  std::optional<Exit> wait(std::chrono::milliseconds limit) {
    if (!exit_) exit_ = wait_exit(pid_, limit);
    return exit_;
  }

 private:
  std::filesystem::path output_file_;
  pid_t pid_ = -1;
  std::optional<Exit> exit_;
};

}  // namespace pstrain::test
