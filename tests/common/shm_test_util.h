// What the shared-memory tests share: counting this process's segment
// mappings and /dev/shm names, and a forked child process to kill.
#pragma once

#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace pstrain::test {

// Lines of /proc/self/maps naming one of our segments.
inline int our_mappings() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) count += line.find("memfd:pstrain-") != std::string::npos;
  return count;
}
// Names in /dev/shm that a pstrain process made.
inline int our_shm_names() {
  int count = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    count += entry.path().filename().string().rfind("pstrain", 0) == 0;
  }
  return count;
}

// A forked child running `body` (given the write end of a pipe to the
// parent); it exits 0 when the body returns, 1 when it throws.
struct Child {
  pid_t pid = -1;
  int from_child = -1;

  explicit Child(const std::function<void(int)>& body) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(fds[0]);
      int code = 0;
      try {
        body(fds[1]);
      } catch (...) {
        code = 1;
      }
      _exit(code);
    }
    ::close(fds[1]);
    from_child = fds[0];
  }
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (from_child >= 0) ::close(from_child);
  }
  // Exactly `n` bytes from the child within 10 s, or fails the test.
  std::vector<std::byte> read(std::size_t n) {
    std::vector<std::byte> out(n);
    std::size_t got = 0;
    while (got < n) {
      pollfd p{from_child, POLLIN, 0};
      REQUIRE(poll(&p, 1, 10000) == 1);
      const ssize_t r = ::read(from_child, out.data() + got, n - got);
      REQUIRE(r > 0);
      got += static_cast<std::size_t>(r);
    }
    return out;
  }
  void kill_and_reap() {
    REQUIRE(kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    pid = -1;
  }
  int wait_exit() {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

}  // namespace pstrain::test
