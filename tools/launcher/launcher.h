// A whole local launch: check the config, prepare the run directory, start
// the scheduler, wait for its endpoint, start the servers and workers, watch
// them to the end, and summarize the run (see tools/launch.cc for the CLI).
//
// Own messages go to stderr as "[   1.234 launch] ..." (job clock); the
// nodes' output (unless quiet), the live status (tools/launcher/live_status.h)
// and the final summary go to stdout.
#pragma once

#include <optional>

#include "common/base/errors.h"
#include "tools/launcher/launch_plan.h"

namespace pstrain::launcher {

struct LaunchOptions {
  LaunchRequest request;
  bool check_only = false;          // --check: all checks, print the resolved config, start nothing
  bool quiet = false;               // nodes' output only to their log files
  std::optional<double> timeout_s;  // the whole run; empty = no limit
  double startup_timeout_s = 30;    // for the scheduler's endpoint file
  double shutdown_timeout_s = 30;   // for the others to exit once the scheduler has
  double grace_s = 5;               // SIGTERM, then SIGKILL after this
  double status_interval_s = 10;    // live status: a plain line this often when stdout is not
                                    // a terminal (on one: redrawn in place); 0 = no status
};

// Exit codes of run_launch() and of the launch program (common/base/errors.h):
// kExitOk; kExitFailed (a node failed, a timeout, or the summary failed);
// kExitConfig (config or usage error, or the run directory in use by a live
// launch: nothing was started or changed); kExitDiverged
// (a worker's training diverged: its line is the headline); stopped by
// signal N (SIGINT, SIGTERM): 128 + N.

int run_launch(const LaunchOptions& options);

}  // namespace pstrain::launcher
