// Starting one node process: fork + exec with its stdout and stderr on
// pipes, stdin on /dev/null (or on a pipe the caller holds), in a process group of its own (so a terminal's
// Ctrl-C reaches only the launcher, which then stops the nodes itself), and
// with SIGTERM as its parent-death signal (a killed launcher leaves no
// orphans). Linux only.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tools/launcher/signal_watch.h"

namespace pstrain::launcher {

struct Child {
  pid_t pid = -1;      // also its process group id
  int stdout_fd = -1;  // read ends, non-blocking, close-on-exec; owned by the caller
  int stderr_fd = -1;
  int stdin_fd = -1;   // with stdin_pipe: the write end, close-on-exec; owned by the caller
};

// argv[0] is the program's path. Throws Error if the pipes or fork fail; a
// failed exec shows up as exit code 127 and a line on the child's stderr.
// With `stdin_pipe` the child's stdin is a pipe whose write end the caller
// keeps: closing it (or the caller's death) is the child's end of input.
Child spawn_child(const std::vector<std::string>& argv, const SignalWatch& signals, bool stdin_pipe = false);

// Sends `signal` to the child's whole process group; false if it is gone.
bool signal_group(pid_t pid, int signal);

// How a reaped process ended, from waitpid's status.
struct ExitStatus {
  bool signaled = false;
  int code = 0;  // exit code, or the signal number when signaled
  bool ok() const { return !signaled && code == 0; }
};
ExitStatus decode_wait_status(int status);
// "exited with code 1", "was killed by signal 9 (Killed)".
std::string describe(const ExitStatus& status);

}  // namespace pstrain::launcher
