#include "scheduler/job_records.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/base/json_line.h"

namespace pstrain {

std::string to_json_line(const AbandonedJoin& j) {
  return JsonLine()
      .add("type", "join_abandoned")
      .add("time_s", j.time_s)
      .add("rank", j.rank)
      .add("change", j.change)
      .add("pid", j.pid)
      .add("host", j.host)
      .add("reason", j.reason)
      .str();
}

std::filesystem::path scheduler_records_path(const std::filesystem::path& run_dir) {
  return run_dir / "metrics" / "scheduler.jsonl";
}

std::function<void(const std::string& line)> json_line_appender(const std::filesystem::path& file, Logger& log,
                                                                 std::string lost) {
  return [file, &log, lost = std::move(lost), warned = false](const std::string& line) mutable {
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    std::ofstream out(file, std::ios::app);
    out << line << "\n";
    if (!out.flush() && !warned) {
      warned = true;
      log.warn("cannot append to " + file.string() + ": " + std::strerror(errno) + " (" + lost + ")");
    }
  };
}

std::function<void(const AbandonedJoin&)> abandoned_join_writer(const std::filesystem::path& file, Logger& log) {
  auto append = json_line_appender(file, log, "an abandoned join is not recorded there: the run's summary will not name it");
  return [append = std::move(append)](const AbandonedJoin& join) mutable { append(to_json_line(join)); };
}

}  // namespace pstrain
