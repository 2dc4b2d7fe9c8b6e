#include "tools/launcher/signal_watch.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/base/errors.h"

namespace pstrain::launcher {

SignalWatch::SignalWatch() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGCHLD);
  if (pthread_sigmask(SIG_BLOCK, &mask, &old_mask_) != 0) throw Error("pthread_sigmask failed");
  fd_ = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    throw Error(std::string("signalfd failed: ") + std::strerror(err));
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &old_pipe_);
}

SignalWatch::~SignalWatch() {
  close(fd_);
  sigaction(SIGPIPE, &old_pipe_, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

std::optional<int> SignalWatch::next() {
  signalfd_siginfo info{};
  const ssize_t n = read(fd_, &info, sizeof(info));
  if (n != static_cast<ssize_t>(sizeof(info))) return std::nullopt;
  return static_cast<int>(info.ssi_signo);
}

void SignalWatch::restore_in_child() const {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGPIPE, &dfl, nullptr);
  sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
}

}  // namespace pstrain::launcher
