#include "common/log.h"

#include <cstdio>

#include "common/errors.h"

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

}  // namespace pstrain
