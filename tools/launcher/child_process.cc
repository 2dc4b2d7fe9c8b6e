#include "tools/launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/base/errors.h"

namespace pstrain::launcher {
namespace {

// Closes a set of descriptors on scope exit unless released.
struct FdGuard {
  std::vector<int> fds;
  ~FdGuard() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
};

void make_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("pipe2 failed: ") + std::strerror(errno));
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(char* const* argv, int null_fd, int out_fd, int err_fd, pid_t parent,
                             const SignalWatch& signals, const std::string& exec_error) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);  // the launcher died before prctl
  signals.restore_in_child();
  if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0) {
    _exit(127);
  }
  execv(argv[0], argv);
  const ssize_t ignored = write(STDERR_FILENO, exec_error.data(), exec_error.size());
  (void)ignored;
  _exit(127);
}

}  // namespace

Child spawn_child(const std::vector<std::string>& argv, const SignalWatch& signals, bool stdin_pipe) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string exec_error = "launch: cannot execute " + argv.at(0) + "\n";
  int out[2];
  int err[2];
  make_pipe(out);
  FdGuard guard{{out[0], out[1]}};
  make_pipe(err);
  guard.fds.insert(guard.fds.end(), {err[0], err[1]});
  int in[2] = {-1, -1};
  if (stdin_pipe) {
    make_pipe(in);
  } else {
    in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in[0] < 0) throw Error(std::string("open /dev/null failed: ") + std::strerror(errno));
  }
  const int null_fd = in[0];
  guard.fds.insert(guard.fds.end(), {in[0], in[1]});
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error("fork of " + argv[0] + " failed: " + std::strerror(errno));
  if (pid == 0) exec_child(args.data(), null_fd, out[1], err[1], parent, signals, exec_error);
  setpgid(pid, pid);  // also here, so it holds before we might signal the group
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  guard.fds = {out[1], err[1], null_fd};  // keep the read ends (and stdin's write end)
  return Child{pid, out[0], err[0], in[1]};
}

bool signal_group(pid_t pid, int signal) {
  if (pid <= 0) return false;  // kill(-1) or kill(0) would reach far more than one node
  return kill(-pid, signal) == 0 || kill(pid, signal) == 0;
}

ExitStatus decode_wait_status(int status) {
  if (WIFSIGNALED(status)) return ExitStatus{true, WTERMSIG(status)};
  return ExitStatus{false, WIFEXITED(status) ? WEXITSTATUS(status) : 1};
}

std::string describe(const ExitStatus& status) {
  if (status.signaled) {
    return "was killed by signal " + std::to_string(status.code) + " (" + strsignal(status.code) + ")";
  }
  return "exited with code " + std::to_string(status.code);
}

}  // namespace pstrain::launcher
