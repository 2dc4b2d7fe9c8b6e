// Turns SIGINT, SIGTERM and SIGCHLD into readable events on a file
// descriptor (Linux signalfd), so the launcher's poll loop sees them without
// signal handlers or globals. SIGPIPE is ignored while it lives (a closed
// stdout must not kill the launcher before it has stopped its children).
//
// Construct it before starting any thread or child; it blocks the three
// signals for this thread and restores the previous mask and SIGPIPE
// disposition when destroyed. Children must call restore_in_child() between
// fork and exec (async-signal-safe) so they get the original mask.
#pragma once

#include <signal.h>

#include <optional>

namespace pstrain::launcher {

class SignalWatch {
 public:
  SignalWatch();
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  // Poll it for POLLIN.
  int fd() const { return fd_; }
  // The next pending signal number, or empty when none is pending.
  std::optional<int> next();
  // Between fork and exec: the original mask and default SIGPIPE.
  void restore_in_child() const;

 private:
  int fd_ = -1;
  sigset_t old_mask_{};
  struct sigaction old_pipe_{};
};

}  // namespace pstrain::launcher
