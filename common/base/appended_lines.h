// Tailing a file that other processes append lines to: the launcher's view of
// the workers' metrics (tools/launcher/metrics_tail.h) and the scheduler's of
// the launcher's exit reports (common/node/exit_report.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace pstrain {

class AppendedLines {
 public:
  // A line longer than max_line bytes is no record: it is dropped at its
  // newline (and never held whole in memory).
  explicit AppendedLines(std::filesystem::path file, std::size_t max_line = std::size_t{1} << 20)
      : file_(std::move(file)), max_line_(max_line) {}

  // The complete lines appended since the last call; none while the file does
  // not exist. A line still being written waits for its newline. A file that
  // shrank (rewritten) is read from its start.
  std::vector<std::string> read();
  // Passes over what the file holds now (a resumed run's earlier lines).
  void skip_existing();
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
  std::size_t max_line_;
  std::uint64_t offset_ = 0;
  std::string partial_;
};

}  // namespace pstrain
