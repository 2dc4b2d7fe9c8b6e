#include "tools/launcher/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "common/base/errors.h"

namespace pstrain::launcher {
namespace {

namespace fs = std::filesystem;

void make_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory " + dir.string() + ": " + ec.message());
}

// The pid in a lock file's text, if it holds one.
std::optional<long> pid_in(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return std::nullopt;
  char* end = nullptr;
  const long pid = std::strtol(buf, &end, 10);
  if (end == buf || pid <= 0) return std::nullopt;
  return pid;
}

// "20240131-142501" in local time.
std::string timestamp_now() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &local);
  return buf;
}

// RUN_DIR.prev-STAMP, or with -2, -3, ... when taken.
fs::path free_aside_name(const fs::path& run_dir) {
  const std::string base = run_dir.filename().string() + ".prev-" + timestamp_now();
  fs::path candidate = run_dir.parent_path() / base;
  for (int n = 2; fs::exists(candidate); ++n) candidate = run_dir.parent_path() / (base + "-" + std::to_string(n));
  return candidate;
}

// What a launch refused because `run_dir` is busy says.
std::string busy_message(const fs::path& run_dir, std::optional<long> owner) {
  const std::string who = owner ? "launch pid " + std::to_string(*owner) : "another launch";
  return "run directory " + run_dir.string() + " is in use by " + who + " (lock " + RunDirLock::file(run_dir).string() +
         "); wait for that run to end or stop it, or give this one another --run-dir";
}

}  // namespace

std::string RunDirLock::busy(const fs::path& run_dir) {
  const int fd = open(file(run_dir).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return "";
  std::string message;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) message = busy_message(run_dir, pid_in(fd));
  } else {
    flock(fd, LOCK_UN);
  }
  close(fd);
  return message;
}

RunDirLock::RunDirLock(const fs::path& run_dir) {
  make_dir(run_dir);
  const fs::path path = file(run_dir);
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot open the lock file " + path.string() + ": " + std::strerror(errno));
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::optional<long> owner = pid_in(fd_);
    close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) throw Error("cannot lock " + path.string() + ": " + std::strerror(err));
    throw RunDirBusy(busy_message(run_dir, owner), owner.value_or(0));
  }
  stale_pid_ = pid_in(fd_);
  const std::string text = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int err = errno;
    close(fd_);
    fd_ = -1;
    throw Error("cannot write the lock file " + path.string() + ": " + std::strerror(err));
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  if (ftruncate(fd_, 0) != 0) {
    // The next launch will call our pid stale: harmless.
  }
  close(fd_);  // releases the flock
}

KeptRun keep_previous_run(const fs::path& run_dir) {
  KeptRun kept;
  make_dir(run_dir);
  std::vector<fs::path> entries;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != "launch.lock" && name != "launch.log") entries.push_back(e.path());
  }
  if (ec) throw Error("cannot list " + run_dir.string() + ": " + ec.message());
  if (!entries.empty()) {
    kept.moved_to = free_aside_name(run_dir);
    make_dir(kept.moved_to);
    for (const fs::path& from : entries) {
      fs::rename(from, kept.moved_to / from.filename(), ec);
      if (ec) {
        throw Error("cannot move " + from.string() + " of a previous run to " + kept.moved_to.string() + ": " +
                    ec.message());
      }
      ++kept.entries;
    }
  }
  make_dir(run_dir / "logs");
  make_dir(run_dir / "metrics");
  return kept;
}

std::optional<std::string> read_endpoint_file(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const auto nl = s.find('\n');
  if (nl == std::string::npos || nl == 0) return std::nullopt;
  return s.substr(0, nl);
}

}  // namespace pstrain::launcher
