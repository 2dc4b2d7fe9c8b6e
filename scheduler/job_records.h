// The scheduler's records of what it decided about the job's membership that
// no worker's metrics show (docs/run_directory.md, metrics/scheduler.jsonl):
// for now an abandoned join, a --join worker that failed before its
// boundary (its slot vacant again, its change gone on without it). The run's
// summary reads them (tools/report/scheduler_records.h), and so does the
// launcher's status line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "common/base/log.h"

namespace pstrain {

// A join abandoned before its boundary (Scheduler::abandon_join).
struct AbandonedJoin {
  int rank = -1;              // the slot it had taken
  std::int64_t change = -1;   // the membership change it was to enter with; -1: none was under way
  std::int64_t pid = 0;       // as the worker registered it
  std::string host;
  double time_s = 0;          // job clock (common/base/job_clock.h): when it was abandoned
  std::string reason;         // why: its exit as the launcher reported it, its silence, a server's refusal, no step left
};

// One JSON line: {"type":"join_abandoned","time_s":..,"rank":..,"change":..,"pid":..,"host":..,"reason":..}.
std::string to_json_line(const AbandonedJoin& join);

// RUN_DIR/metrics/scheduler.jsonl (created with its folder on the first record).
std::filesystem::path scheduler_records_path(const std::filesystem::path& run_dir);

// Appends each line given to `file` (its folder created first), then
// flushes. A write that fails is said once in `log`, with `lost` (what is
// not recorded there); the job goes on.
std::function<void(const std::string& line)> json_line_appender(const std::filesystem::path& file, Logger& log,
                                                                 std::string lost);

// Appends each record to `file` (one JSON line, then flushed). A write that
// fails is said once in `log`; the job goes on (the log has the same facts).
std::function<void(const AbandonedJoin&)> abandoned_join_writer(const std::filesystem::path& file, Logger& log);

}  // namespace pstrain
