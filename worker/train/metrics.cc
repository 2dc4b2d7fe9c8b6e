#include "worker/train/metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/base/errors.h"

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

MetricsWriter::MetricsWriter(const std::string& run_dir, const std::string& file_name, std::int64_t keep_bytes,
                             double time_offset_s)
    : time_offset_s_(time_offset_s) {
  if (run_dir.empty()) return;
  make_directories(run_dir + "/metrics");
  path_ = run_dir + "/metrics/" + file_name;
  std::error_code ec;
  if (keep_bytes >= 0 && std::filesystem::exists(path_, ec) &&
      static_cast<std::int64_t>(std::filesystem::file_size(path_, ec)) > keep_bytes) {
    std::filesystem::resize_file(path_, static_cast<std::uintmax_t>(keep_bytes), ec);
    if (ec) throw Error("cannot cut " + path_ + " back to its checkpoint's size: " + ec.message());
  }
  file_ = std::fopen(path_.c_str(), "a");
  if (file_ == nullptr) throw Error("cannot append to " + path_ + ": " + std::strerror(errno));
  std::fseek(file_, 0, SEEK_END);
}

std::int64_t MetricsWriter::size() const {
  if (incomplete_) return written_bytes_;  // what reached the file before the failed write
  return file_ == nullptr ? 0 : static_cast<std::int64_t>(std::ftell(file_));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

double MetricsWriter::elapsed_s() const {
  return time_offset_s_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void MetricsWriter::write(const JsonLine& line) {
  if (file_ == nullptr) return;
  const std::string text = line.str();
  const std::int64_t before = static_cast<std::int64_t>(std::ftell(file_));
  if (std::fprintf(file_, "%s\n", text.c_str()) >= 0 && std::fflush(file_) == 0) return;
  const std::string why = std::strerror(errno);
  written_bytes_ = before;
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
