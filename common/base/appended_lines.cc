#include "common/base/appended_lines.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <string_view>

namespace pstrain {

void AppendedLines::skip_existing() {
  struct stat st {};
  offset_ = stat(file_.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  partial_.clear();
}

std::vector<std::string> AppendedLines::read() {
  std::vector<std::string> lines;
  const int fd = open(file_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return lines;
  struct stat st {};
  if (fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) < offset_) {
    offset_ = 0;  // rewritten from the start
    partial_.clear();
  }
  std::array<char, 64 * 1024> buf;
  for (;;) {
    const ssize_t n = pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset_));
    if (n <= 0) break;
    offset_ += static_cast<std::uint64_t>(n);
    std::string_view bytes(buf.data(), static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = bytes.find('\n')) != std::string_view::npos; bytes.remove_prefix(nl + 1)) {
      partial_.append(bytes.substr(0, std::min(nl, max_line_ + 1)));
      if (partial_.size() <= max_line_) lines.push_back(std::move(partial_));
      partial_.clear();
    }
    partial_.append(bytes);
    if (partial_.size() > max_line_) partial_.resize(max_line_ + 1);  // too long: dropped at its newline
  }
  close(fd);
  return lines;
}

}  // namespace pstrain
