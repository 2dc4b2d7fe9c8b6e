#include "common/node/exit_report.h"

#include <charconv>

namespace pstrain {
namespace {

// Reads a non-negative integer at the start of `text` and moves past it.
template <class Int>
bool take_number(std::string_view& text, Int& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data() || value < 0) return false;
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  return true;
}

bool take(std::string_view& text, std::string_view word) {
  if (!text.starts_with(word)) return false;
  text.remove_prefix(word.size());
  return true;
}

}  // namespace

std::string format_exit_report(const ExitReport& r) {
  std::string how = r.how;
  for (char& c : how) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return std::string(to_string(r.role)) + " " + std::to_string(r.rank) + " pid " + std::to_string(r.pid) + ": " + how;
}

std::optional<ExitReport> parse_exit_report(std::string_view line, std::string& error) {
  ExitReport r;
  std::string_view text = line;
  if (take(text, "worker ")) {
    r.role = Role::kWorker;
  } else if (take(text, "server ")) {
    r.role = Role::kServer;
  } else {
    error = "expected 'worker R pid P: how' or 'server R pid P: how', got '" + std::string(line.substr(0, 80)) + "'";
    return std::nullopt;
  }
  if (!take_number(text, r.rank) || !take(text, " pid ") || !take_number(text, r.pid) || r.pid == 0 ||
      !take(text, ": ")) {
    error = "expected 'ROLE RANK pid PID: how' (numbers, pid > 0), got '" + std::string(line.substr(0, 80)) + "'";
    return std::nullopt;
  }
  r.how = std::string(text);
  return r;
}


}  // namespace pstrain
