// The launcher's side of the run directory (docs/run_directory.md).
#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

namespace pstrain::launcher {

// The lock of a run directory, RUN_DIR/launch.lock: an flock(2) held while
// this object lives, the file holding the owner's pid. The kernel drops the
// flock when its owner dies, so a lock left by a dead launcher is free;
// the file then still names that pid, and stale_pid() reports it.
class RunDirLock {
 public:
  // Creates run_dir if needed and takes its lock. Throws RunDirBusy naming
  // the owner's pid when a live launcher holds it; Error for I/O problems.
  explicit RunDirLock(const std::filesystem::path& run_dir);
  ~RunDirLock();  // empties the file (a clean end), then releases the lock
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // The pid the file named when we took a free lock (a launcher that died
  // without releasing it), if any.
  std::optional<long> stale_pid() const { return stale_pid_; }

  static std::filesystem::path file(const std::filesystem::path& run_dir) { return run_dir / "launch.lock"; }

  // Without taking it or creating anything: the message RunDirBusy would
  // carry when a live launcher holds run_dir's lock now, else "" (`launch
  // --check` refuses a busy run directory as a launch would).
  static std::string busy(const std::filesystem::path& run_dir);

 private:
  int fd_ = -1;
  std::optional<long> stale_pid_;
};

// Thrown by RunDirLock when another live launch holds the directory.
struct RunDirBusy : std::runtime_error {
  RunDirBusy(const std::string& message, long owner) : std::runtime_error(message), owner_pid(owner) {}
  long owner_pid;
};

// What keep_previous_run() moved.
struct KeptRun {
  std::filesystem::path moved_to;  // empty: the directory held no previous run
  int entries = 0;                 // files and folders moved
};

// Moves everything a previous run left in run_dir (all entries but
// launch.lock and launch.log, the output of whoever started this launch)
// into a new sibling folder RUN_DIR.prev-YYYYmmdd-HHMMSS (-2, -3, ... when
// that exists), so that no launch destroys results; then creates run_dir/logs
// and run_dir/metrics. Call it with the lock held. Throws Error naming the path.
KeptRun keep_previous_run(const std::filesystem::path& run_dir);

// The endpoint in a file the scheduler wrote (one line); empty if the file
// does not exist yet or has no complete line.
std::optional<std::string> read_endpoint_file(const std::filesystem::path& file);

}  // namespace pstrain::launcher
