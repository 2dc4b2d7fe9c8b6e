// Cuts a byte stream into lines. Bytes arrive in arbitrary pieces (pipe
// reads); each complete line (without its '\n', and without a '\r' before
// it) is handed to the callback once. A line longer than max_line_bytes is
// handed on in pieces of that size so memory stays bounded. finish() hands
// on a last line that had no '\n'. Not thread-safe; one per stream.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace pstrain::launcher {

class LineSplitter {
 public:
  using Sink = std::function<void(std::string_view line)>;

  explicit LineSplitter(Sink sink, std::size_t max_line_bytes = 64 * 1024);

  void feed(std::string_view bytes);
  void finish();

 private:
  void emit(std::string_view line);

  Sink sink_;
  std::size_t max_line_bytes_;
  std::string partial_;
};

}  // namespace pstrain::launcher
