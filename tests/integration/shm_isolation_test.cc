// The shared memory of a job is closed to the other processes of its user
// (issue 27, item 6): a job launched as a non-root user (uid 65534 when the
// test runs as root: root itself may read any process) with the default
// cluster.transport = "shm" and a CNN whose chunks go through the segments;
// while it trains, a second process of the same user does what an attacker
// would: it looks for the nodes' memfds (memfd:pstrain-*) in
// /proc/<pid>/fd of server 0 and worker 0, opens each read-write, maps it
// and changes a byte (then puts it back). Before nodes were made
// non-dumpable it mapped the server's weights arena and both connection
// segments read-write; now /proc/<pid>/fd is refused to it. The job still
// moves its tensors through shared memory (the segments and arenas now reach
// their peers over the memfd share, SCM_RIGHTS) and ends with exit 0.
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"

namespace {

using namespace std::chrono_literals;
using pstrain::report::JsonValue;

constexpr uid_t kOtherUser = 65534;  // nobody: who the job and the attacker run as when the test runs as root

// Becomes the non-root user the job runs as (nothing when the test is not root). False when it cannot.
bool become_job_user() {
  if (geteuid() != 0) return true;
  return setgroups(0, nullptr) == 0 && setresgid(kOtherUser, kOtherUser, kOtherUser) == 0 &&
         setresuid(kOtherUser, kOtherUser, kOtherUser) == 0;
}

// `launch args...` as the job's user, stdout and stderr into `output`.
pid_t spawn_launch_as_job_user(const std::vector<std::string>& args, const it::fs::path& output) {
  const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!become_job_user()) _exit(126);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    std::vector<std::string> argv{(it::kBinDir / "launch").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    execv(raw[0], raw.data());
    _exit(127);
  }
  close(fd);
  return pid;
}

// The pstrain memfds among `pid`'s descriptors, as this (root or same-user) process sees them.
int memfds_of(pid_t pid, const std::string& kind) {
  int count = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code link_ec;
    const auto target = std::filesystem::read_symlink(e.path(), link_ec).string();
    count += target.rfind("/memfd:pstrain-" + kind, 0) == 0;
  }
  return count;
}

// What the attacker did to one process.
struct Attack {
  int memfds_seen = 0;     // pstrain memfds it found in /proc/<pid>/fd
  int changed = 0;         // of those, mapped read-write and changed
  std::string refused;     // why /proc/<pid>/fd was closed to it, if it was
};

// Runs in the attacker: every pstrain memfd of `pid` opened read-write,
// mapped and one byte changed (its last: an arena's header padding or a
// segment's last slot), checked and put back.
Attack attack(pid_t pid) {
  Attack a;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    a.refused = "opendir " + dir + ": " + std::strerror(errno);
    return a;
  }
  while (const dirent* e = readdir(d)) {
    const std::string path = dir + "/" + e->d_name;
    char target[256] = {};
    if (readlink(path.c_str(), target, sizeof target - 1) <= 0) continue;
    if (std::string(target).rfind("/memfd:pstrain-", 0) != 0) continue;
    ++a.memfds_seen;
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
      void* p = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        volatile unsigned char* last = static_cast<unsigned char*>(p) + st.st_size - 1;
        const unsigned char was = *last;
        *last = static_cast<unsigned char>(was ^ 0xff);
        if (*last == static_cast<unsigned char>(was ^ 0xff)) ++a.changed;
        *last = was;
        munmap(p, static_cast<std::size_t>(st.st_size));
      }
    }
    close(fd);
  }
  closedir(d);
  return a;
}

// The attacker: a forked process of the job's user attacking each of `pids`; what it did.
std::vector<Attack> attack_as_job_user(const std::vector<pid_t>& pids) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    if (!become_job_user()) _exit(126);
    std::string report;
    for (const pid_t pid : pids) {
      const Attack a = attack(pid);
      report += std::to_string(a.memfds_seen) + " " + std::to_string(a.changed) + " " + a.refused + "\n";
    }
    const bool ok = write(fds[1], report.data(), report.size()) == static_cast<ssize_t>(report.size());
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  std::string report;
  char buffer[512];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) report.append(buffer, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "the attacker could not run as uid " << kOtherUser);
  std::vector<Attack> attacks;
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);) {
    Attack a;
    std::istringstream fields(line);
    fields >> a.memfds_seen >> a.changed;
    std::getline(fields >> std::ws, a.refused);
    attacks.push_back(a);
  }
  REQUIRE(attacks.size() == pids.size());
  return attacks;
}

double number(const JsonValue& j, const char* key) {
  const JsonValue* v = j.find(key);
  REQUIRE(v != nullptr);
  return v->as_number(key);
}

}  // namespace

TEST_CASE("shm isolation: another process of the job's user cannot map the nodes' segments or arenas; the job still uses them") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  if (geteuid() == 0) REQUIRE(chown(dir.path().c_str(), kOtherUser, kOtherUser) == 0);
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  for (const char* s : {"workload.model=fmnist_cnn", "workload.epochs=4", "cluster.servers=1", "cluster.workers=1",
                        "cluster.timeout_ms=120000"}) {
    args.insert(args.end(), {"--set", std::string(s)});
  }
  args.push_back("--quiet");
  const auto output_file = dir.path() / "out.txt";
  const pid_t launcher = spawn_launch_as_job_user(args, output_file);
  struct Reap {
    pid_t pid;
    bool done = false;
    ~Reap() {
      if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reap{launcher};
  // Running, with its shared memory made: the server's weights arena and the worker's segment.
  pid_t server = 0, worker = 0;
  const bool ready = it::wait_until(
      [&] {
        const auto pids = it::fs::exists(run / "pids.txt") ? it::read_pids(run) : std::map<std::string, pid_t>{};
        if (pids.count("server-0") == 0 || pids.count("worker-0") == 0) return false;
        server = pids.at("server-0");
        worker = pids.at("worker-0");
        // Root sees them; a non-root test (the nodes' own user) is shut out as the attacker is,
        // and waits for a training step instead (by then both exist).
        const auto steps = run / "metrics" / "worker-0.jsonl";
        if (geteuid() != 0) return it::fs::exists(steps) && it::contains(it::read_file(steps), "\"type\":\"step\"");
        return memfds_of(server, "arena") >= 1 && memfds_of(worker, "conn") >= 1;
      },
      180s, "server 0's arena and worker 0's segment");
  INFO(it::read_file(output_file));
  REQUIRE(ready);

  const std::vector<Attack> attacks = attack_as_job_user({server, worker});
  // Both still running: the attack saw live processes, not a finished job.
  REQUIRE(kill(server, 0) == 0);
  REQUIRE(kill(worker, 0) == 0);
  for (std::size_t i = 0; i < attacks.size(); ++i) {
    CAPTURE(i);
    CAPTURE(attacks[i].refused);
    CHECK(attacks[i].changed == 0);
    CHECK(attacks[i].memfds_seen == 0);
    CHECK(it::contains(attacks[i].refused, "Permission denied"));
  }

  const auto exit = pstrain::test::wait_exit(launcher, 600s);
  reap.done = exit.has_value();
  const std::string output = it::read_file(output_file);
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 0);
  const JsonValue m = pstrain::report::parse_json(it::read_file(run / "metrics" / "server-0.json"), "server metrics");
  CHECK(number(m, "shm_connections") == 1);
  CHECK(number(m, "shm_bodies_sent") > 0);
}
