#include "tools/bench/thread_cpu.h"

#include <pthread.h>
#include <sched.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "common/base/errors.h"

namespace pstrain::bench {

namespace {

// The CPU time (ns resolution) of thread `tid` of this process: the kernel's
// per-thread CPU clock, the id glibc's pthread_getcpuclockid makes from a
// thread id (CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD_MASK). /proc's stat counts
// in ticks of 10 ms, too coarse for a scheduler that works for milliseconds.
double thread_cpu_seconds(pid_t tid) {
  const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6U);
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return 0;  // the thread ended meanwhile
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

std::map<std::string, double> cpu_seconds_by_thread_name() {
  std::map<std::string, double> by_name;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (!std::getline(comm, name)) continue;  // the thread ended meanwhile
    by_name[name] += thread_cpu_seconds(static_cast<pid_t>(std::stol(task.path().filename().string())));
  }
  return by_name;
}

std::map<std::string, UserSystem> user_system_by_thread_name() {
  std::map<std::string, UserSystem> by_name;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm(task.path() / "comm");
    std::ifstream stat(task.path() / "stat");
    std::string name, line;
    if (!std::getline(comm, name) || !std::getline(stat, line)) continue;  // the thread ended meanwhile
    // After the name in parentheses: state (field 3), ... utime (14), stime (15).
    std::istringstream fields(line.substr(line.rfind(')') + 2));
    std::string skip;
    for (int f = 3; f < 14; ++f) fields >> skip;
    double user = 0, system = 0;
    if (!(fields >> user >> system)) continue;
    by_name[name].user_s += user / tick;
    by_name[name].system_s += system / tick;
  }
  return by_name;
}

double cpu_seconds_with_prefix(const std::map<std::string, double>& by_name, const std::string& prefix) {
  double sum = 0;
  for (const auto& [name, seconds] : by_name) sum += name.rfind(prefix, 0) == 0 ? seconds : 0.0;
  return sum;
}

void make_this_thread_batch() {
  sched_param none{};  // SCHED_BATCH takes priority 0
  if (const int rc = pthread_setschedparam(pthread_self(), SCHED_BATCH, &none); rc != 0) {
    throw Error("cannot make a thread SCHED_BATCH: " + std::system_category().message(rc));
  }
}

int batch_threads_with_prefix(const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm(task.path() / "comm");
    std::ifstream stat(task.path() / "stat");
    std::string name, line;
    if (!std::getline(comm, name) || !std::getline(stat, line) || name.rfind(prefix, 0) != 0) continue;
    std::istringstream fields(line.substr(line.rfind(')') + 2));  // from field 3 (state) on
    std::string skip;
    for (int f = 3; f < 41; ++f) fields >> skip;
    int policy = -1;
    if (fields >> policy && policy == SCHED_BATCH) ++n;
  }
  return n;
}

std::int64_t resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      std::int64_t kib = 0;
      in >> kib;
      return kib * 1024;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

}  // namespace pstrain::bench
