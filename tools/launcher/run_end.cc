#include "tools/launcher/run_end.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/node/exit_report.h"
#include "tools/report/metrics.h"
#include "tools/report/summary.h"

namespace pstrain::launcher {

std::optional<int> worker_rank_of(const std::string& node_name) {
  static constexpr std::string_view kWorker = "worker ";
  if (!node_name.starts_with(kWorker)) return std::nullopt;
  try {
    std::size_t used = 0;
    const int rank = std::stoi(node_name.substr(kWorker.size()), &used);
    if (used != node_name.size() - kWorker.size() || rank < 0) return std::nullopt;
    return rank;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string report_exit(const std::filesystem::path& exits_file, const std::string& node_name, pid_t pid,
                        const std::string& how) {
  ExitReport r;
  const auto space = node_name.find(' ');
  if (space == std::string::npos) return "not a server or worker: " + node_name;
  const std::string role = node_name.substr(0, space);
  if (role != "worker" && role != "server") return "not a server or worker: " + node_name;
  r.role = role == "worker" ? Role::kWorker : Role::kServer;
  try {
    r.rank = std::stoi(node_name.substr(space + 1));
  } catch (const std::exception&) {
    return "no rank in the node name " + node_name;
  }
  r.pid = pid;
  r.how = how;
  std::ofstream out(exits_file, std::ios::app);
  out << format_exit_report(r) << '\n';
  if (!out.flush()) return "cannot append to " + exits_file.string() + ": " + std::strerror(errno);
  return "";
}

std::string write_partial_summary(const std::filesystem::path& run_dir, const std::string& reason) {
  if (!std::filesystem::exists(run_dir / "metrics")) return "";  // no worker began: nothing ran
  try {
    const report::PartialRun partial{reason};
    const report::RunSummary s = report::write_run_summary(run_dir, &partial);
    std::int64_t steps = -1;
    for (const report::WorkerSummary& w : s.per_worker) {
      if (w.status != "dropped") steps = steps < 0 ? w.steps_done : std::min(steps, w.steps_done);
    }
    return "partial summary (" + reason + "; " + std::to_string(std::max<std::int64_t>(steps, 0)) +
           " steps by every worker left) in " + (run_dir / "summary.md").string();
  } catch (const std::exception& e) {
    return std::string("no partial summary: ") + e.what();
  }
}

}  // namespace pstrain::launcher
