// A small line logger: "[12.345 server 0] message" to a stream (stderr by
// default), the time in seconds on the job clock (common/job_clock.h), so
// lines of every process of a launched job share one time axis. One per
// node, passed to what needs it: no global logger. Lines are written whole
// under a lock, so threads of one process don't interleave.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

#include "common/job_clock.h"

namespace pstrain {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
// "debug" | "info" | "warn" | "error"; throws ConfigError otherwise.
LogLevel parse_log_level(std::string_view name);

// "[  12.345 server 0] ": the prefix of every log line (time in seconds on the
// job clock, then the name), shared with the launcher's own lines.
std::string log_prefix(double seconds, std::string_view name);

class Logger {
 public:
  explicit Logger(std::string name = "", LogLevel level = LogLevel::kInfo, std::FILE* out = stderr,
                  JobClock clock = JobClock::from_environment());
  void set_name(std::string name);
  void set_level(LogLevel level) { level_ = level; }
  bool enabled(LogLevel level) const { return level >= level_; }

  void debug(std::string_view msg) { write(LogLevel::kDebug, msg); }
  void info(std::string_view msg) { write(LogLevel::kInfo, msg); }
  void warn(std::string_view msg) { write(LogLevel::kWarn, msg); }
  void error(std::string_view msg) { write(LogLevel::kError, msg); }
  void write(LogLevel level, std::string_view msg);
  const JobClock& clock() const { return clock_; }

 private:
  std::mutex mutex_;
  std::string name_;
  LogLevel level_;
  std::FILE* out_;
  JobClock clock_;
};

}  // namespace pstrain
