#include "tools/launcher/line_splitter.h"

#include <utility>

namespace pstrain::launcher {

LineSplitter::LineSplitter(Sink sink, std::size_t max_line_bytes)
    : sink_(std::move(sink)), max_line_bytes_(max_line_bytes == 0 ? 1 : max_line_bytes) {}

void LineSplitter::emit(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  sink_(line);
}

void LineSplitter::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    const std::size_t nl = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, nl);
    if (nl != std::string_view::npos && partial_.empty()) {
      emit(piece);
    } else {
      partial_.append(piece);
      if (nl != std::string_view::npos) {
        emit(partial_);
        partial_.clear();
      }
    }
    bytes = nl == std::string_view::npos ? std::string_view{} : bytes.substr(nl + 1);
    while (partial_.size() > max_line_bytes_) {
      emit(std::string_view(partial_).substr(0, max_line_bytes_));
      partial_.erase(0, max_line_bytes_);
    }
  }
}

void LineSplitter::finish() {
  if (!partial_.empty()) emit(partial_);
  partial_.clear();
}

}  // namespace pstrain::launcher
