#include "common/base/log.h"

#include <cstdio>

#include "common/base/errors.h"

namespace pstrain {

LogLevel parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  throw ConfigError("log level '" + std::string(name) + "': expected debug, info, warn or error");
}

std::string log_prefix(double seconds, std::string_view name) {
  char time[32];
  std::snprintf(time, sizeof(time), "[%8.3f ", seconds);
  std::string out = time;
  out.append(name);
  out += "] ";
  return out;
}

Logger::Logger(std::string name, LogLevel level, std::FILE* out, JobClock clock)
    : name_(std::move(name)), level_(level), out_(out), clock_(clock) {}

void Logger::set_name(std::string name) {
  std::lock_guard lock(mutex_);
  name_ = std::move(name);
}

void Logger::write(LogLevel level, std::string_view msg) {
  if (!enabled(level)) return;
  static constexpr const char* kTags[] = {"debug: ", "", "warning: ", "error: "};
  const double seconds = clock_.now_s();
  std::lock_guard lock(mutex_);
  const std::string prefix = log_prefix(seconds, name_);
  std::fprintf(out_, "%s%s%.*s\n", prefix.c_str(), kTags[static_cast<int>(level)], static_cast<int>(msg.size()),
               msg.data());
  std::fflush(out_);
}

PeerWarnings::PeerWarnings(Logger& log, int burst, std::chrono::milliseconds window, std::size_t max_peers)
    : log_(log), burst_(burst), window_(window), max_peers_(max_peers) {}

void PeerWarnings::warn(const std::string& peer, std::string_view msg, Clock::time_point now) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    const std::string key = peers_.size() < max_peers_ ? peer : std::string("(other peers)");
    it = peers_.try_emplace(key, Window{now, 0, 0}).first;
  }
  Window& w = it->second;
  if (now - w.start >= window_) {
    if (w.suppressed > 0) {
      log_.warn(std::to_string(w.suppressed) + " more warnings about " + it->first + " were not written");
    }
    w = Window{now, 0, 0};
  }
  if (w.count < burst_) {
    ++w.count;
    ++written_;
    log_.warn(msg);
    if (w.count == burst_) log_.warn("further warnings about " + it->first + " are limited to " +
                                     std::to_string(burst_) + " per " + std::to_string(window_.count() / 1000) + " s");
    return;
  }
  ++w.suppressed;
  ++suppressed_;
}

}  // namespace pstrain
