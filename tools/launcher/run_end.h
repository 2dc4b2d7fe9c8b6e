// What the launcher does about a node's exit and a run's end beyond
// supervising: it tells the scheduler of an exit (common/node/exit_report.h)
// and, when a run ends interrupted or failed, writes its partial summary
// (tools/report/summary.h, PartialRun).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>

#include "tools/launcher/status_line.h"

namespace pstrain::launcher {

// "worker 1" -> 1 for a worker's node name; empty for any other node.
std::optional<int> worker_rank_of(const std::string& node_name);

// Appends node `node_name`'s exit (process `pid`, `how` it ended) to the
// scheduler's exits file; returns "" or the error (the heartbeat timeout
// then finds the failure, as before).
std::string report_exit(const std::filesystem::path& exits_file, const std::string& node_name, pid_t pid,
                        const std::string& how);

// Writes RUN_DIR/summary.json and summary.md of a run that ended early
// (`reason`: "interrupted by signal 2 (Interrupt)", "failed: ..."); returns
// the line to say: where it is and how many steps ran, or why there is none
// ("" when no worker wrote metrics: nothing ran).
std::string write_partial_summary(const std::filesystem::path& run_dir, const std::string& reason);

}  // namespace pstrain::launcher
