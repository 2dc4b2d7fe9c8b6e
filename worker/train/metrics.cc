#include "worker/train/metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/errors.h"

namespace pstrain {

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw Error("cannot create directory " + path + ": " + ec.message());
}

MetricsWriter::MetricsWriter(const std::string& run_dir, const std::string& file_name) {
  if (run_dir.empty()) return;
  make_directories(run_dir + "/metrics");
  path_ = run_dir + "/metrics/" + file_name;
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) throw Error("cannot write " + path_ + ": " + std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

double MetricsWriter::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void MetricsWriter::write(const JsonLine& line) {
  if (file_ == nullptr) return;
  const std::string text = line.str();
  if (std::fprintf(file_, "%s\n", text.c_str()) >= 0 && std::fflush(file_) == 0) return;
  const std::string why = std::strerror(errno);
  std::fclose(file_);
  file_ = nullptr;
  incomplete_ = true;
  const std::string message = "cannot write " + path_ + ": " + why +
                              "; the metrics are incomplete from here on (nothing more is written to it)";
  if (log_ != nullptr) {
    log_->warn(message);
  } else {
    std::fprintf(stderr, "warning: %s\n", message.c_str());
  }
}

}  // namespace pstrain
