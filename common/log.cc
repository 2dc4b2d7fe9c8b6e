#include "common/log.h"

#include "common/errors.h"

namespace pstrain {

LogLevel parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  throw ConfigError("log level '" + std::string(name) + "': expected debug, info, warn or error");
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
  std::fprintf(out_, "[%8.3f %s] %s%.*s\n", seconds, name_.c_str(), kTags[static_cast<int>(level)],
               static_cast<int>(msg.size()), msg.data());
  std::fflush(out_);
}

}  // namespace pstrain
