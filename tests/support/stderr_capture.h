// This process's stderr into a file for one scope, so a test can wait for a
// line that an in-process node logs (tests/support/wait.h) instead of
// sleeping until it has probably happened. What was captured is written to
// the real stderr again at the end of the scope, so a failing test's log is
// still shown.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "tests/support/temp_dir.h"

namespace pstrain::test {

class StderrCapture {
 public:
  StderrCapture() : dir_("stderr"), file_(dir_.file("stderr.txt")) {
    std::fflush(stderr);
    const int fd = open(file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("cannot create " + file_);
    saved_ = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    const std::string captured = text();
    std::fwrite(captured.data(), 1, captured.size(), stderr);
    std::fflush(stderr);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // Everything written to stderr since the capture began.
  std::string text() const {
    std::ifstream in(file_);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bool has(const std::string& part) const { return text().find(part) != std::string::npos; }

 private:
  TempDir dir_;
  std::string file_;
  int saved_ = -1;
};

}  // namespace pstrain::test
