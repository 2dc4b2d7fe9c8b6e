// The scheduler's handler of the launcher's exit reports
// (common/node/exit_report.h): a node process that exited is declared failed
// at once, through the same failure policy as a node reporting its own
// failure, instead of after heartbeat_timeout_ms of silence.
#include "scheduler/scheduler.h"

namespace pstrain {

void Scheduler::take_exit_reports() {
  if (!exits_) return;
  for (const std::string& line : exits_->read()) {
    std::string error;
    const std::optional<ExitReport> report = parse_exit_report(line, error);
    if (!report) {
      warnings_.warn(exits_->file().string(), "ignored a line: " + error);
      continue;
    }
    Member* node = members_.find(report->role, report->rank);
    // Not in the job (any more), already known, or about an earlier process
    // of that rank (its replacement registered since): nothing to do.
    if (node == nullptr || node->done || node->dropped || node->restarting || node->request.pid != report->pid) {
      continue;
    }
    const std::string reason = std::string(to_string(node->role)) + " " + std::to_string(node->rank) + " (" +
                               node->request.host + ", pid " + std::to_string(report->pid) + ") " + report->how +
                               " (reported by the launcher)";
    if (node->role == Role::kWorker) {
      worker_failed(*node, reason);
    } else {
      server_failed(*node, reason);
    }
  }
}

}  // namespace pstrain
