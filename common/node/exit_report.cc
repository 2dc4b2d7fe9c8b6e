#include "common/node/exit_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <charconv>

namespace pstrain {
namespace {

constexpr std::size_t kMaxLine = 4096;  // a longer "line" is no report: dropped

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

std::vector<std::string> AppendedLines::read() {
  std::vector<std::string> lines;
  const int fd = open(file_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return lines;
  std::array<char, 4096> buf;
  for (;;) {
    const ssize_t n = pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset_));
    if (n <= 0) break;
    offset_ += static_cast<std::uint64_t>(n);
    std::string_view bytes(buf.data(), static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = bytes.find('\n')) != std::string_view::npos; bytes.remove_prefix(nl + 1)) {
      partial_.append(bytes.substr(0, nl));
      if (partial_.size() <= kMaxLine) lines.push_back(std::move(partial_));
      partial_.clear();
    }
    partial_.append(bytes);
    if (partial_.size() > kMaxLine) partial_.resize(kMaxLine + 1);  // kept too long: dropped at its newline
  }
  close(fd);
  return lines;
}

}  // namespace pstrain
