// Node exits the launcher saw, told to the scheduler so that a failure is
// acted on at once instead of after the heartbeat timeout.
//
// `launch` starts the scheduler with --exits-file RUN_DIR/exits.txt and
// appends one line there for each node process of this machine that exits
// with a failure the job may go on without (cluster.on_worker_failure
// "continue" or "restart", on_server_failure "restart"), before it starts a
// replacement:
//
//   worker 1 pid 4242: killed by signal 9 (Killed)
//
// The scheduler reads the file's new lines in its loop and before it admits
// a rejoin; a line about the process registered for that rank (same role,
// rank and pid) and still in the job declares it failed as a report of its
// own failure would; any other line (an earlier process, a node already
// dropped or restarting) changes nothing. Only the launcher writes the file
// (the run directory's owner; no connection carries it, so no peer can send
// one): a job started without `launch` (SLURM, mpirun, by hand) has no such
// file and the heartbeat timeout stays how failures are found.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/appended_lines.h"  // AppendedLines: how the scheduler reads the exits file
#include "common/wire/protocol.h"

namespace pstrain {

struct ExitReport {
  Role role = Role::kWorker;  // kWorker or kServer
  int rank = -1;
  std::int64_t pid = 0;
  std::string how;  // "killed by signal 9 (Killed)", "exited with code 1"
};

// "worker 1 pid 4242: killed by signal 9 (Killed)" (no newline; `how` on one line).
std::string format_exit_report(const ExitReport& report);
// The report a line holds; empty with `error` saying why when it holds none.
std::optional<ExitReport> parse_exit_report(std::string_view line, std::string& error);

}  // namespace pstrain
