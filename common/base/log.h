// A small line logger: "[12.345 server 0] message" to a stream (stderr by
// default), the time in seconds on the job clock (common/base/job_clock.h), so
// lines of every process of a launched job share one time axis. One per
// node, passed to what needs it: no global logger. Lines are written whole
// under a lock, so threads of one process don't interleave.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "common/base/job_clock.h"

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

// Warnings about a peer's bad input, limited per peer so that no peer can
// fill the log: the first `burst` warnings of a peer in each `window` are
// written, the rest counted and reported in one line when the peer's next
// window begins. At most `max_peers` peers are tracked (a flood of new peers
// shares one "other peers" entry). Not thread-safe: one per event loop.
class PeerWarnings {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PeerWarnings(Logger& log, int burst = 5, std::chrono::milliseconds window = std::chrono::seconds(60),
                        std::size_t max_peers = 1024);
  // `peer` names the sender ("worker 1", or its connection); `now` for tests.
  void warn(const std::string& peer, std::string_view msg, Clock::time_point now = Clock::now());
  std::int64_t written() const { return written_; }
  std::int64_t suppressed() const { return suppressed_; }

 private:
  struct Window {
    Clock::time_point start;
    int count = 0;
    std::int64_t suppressed = 0;
  };
  Logger& log_;
  int burst_;
  std::chrono::milliseconds window_;
  std::size_t max_peers_;
  std::map<std::string, Window> peers_;
  std::int64_t written_ = 0;
  std::int64_t suppressed_ = 0;
};

}  // namespace pstrain
