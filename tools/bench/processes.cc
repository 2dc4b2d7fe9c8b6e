#include "tools/bench/processes.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <exception>
#include <vector>

#include "common/base/errors.h"

namespace pstrain::bench {

pid_t spawn(const std::function<int()>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw Error("fork failed");
  if (pid == 0) {
    int code = 0;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench child: %s\n", e.what());
      code = 1;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(code);
  }
  return pid;
}

bool wait_all(const std::vector<pid_t>& pids) {
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

LinePipe::LinePipe() {
  if (pipe(fds_) != 0) throw Error("pipe failed");
}

LinePipe::~LinePipe() {
  close(fds_[0]);
  if (fds_[1] >= 0) close(fds_[1]);
}

void LinePipe::close_write() {
  if (fds_[1] >= 0) close(fds_[1]);
  fds_[1] = -1;
}

bool LinePipe::write_line(const std::string& line) const {
  const std::string text = line + "\n";
  return write(fds_[1], text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

std::string LinePipe::read_line() const {
  std::string line;
  char c = 0;
  while (read(fds_[0], &c, 1) == 1 && c != '\n') line += c;
  return line;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double memcpy_seconds(std::size_t num_bytes, int rounds) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::byte> from(num_bytes, std::byte{3}), to(num_bytes, std::byte{0});
  std::vector<double> times;
  for (int r = 0; r < rounds + 2; ++r) {
    const std::size_t probe = static_cast<std::size_t>(r) * 4099 % num_bytes;
    from[probe] = static_cast<std::byte>(r);  // the copy must move this round's bytes
    const auto t0 = Clock::now();
    std::memcpy(to.data(), from.data(), num_bytes);
    const auto t1 = Clock::now();
    if (to[probe] != static_cast<std::byte>(r)) std::abort();
    if (r >= 2) times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  return median(times);
}

int rounds_for(double size_mib, int requested) {
  if (requested > 0) return requested;
  return std::clamp(static_cast<int>(400.0 / size_mib), 8, 200);
}

}  // namespace pstrain::bench
