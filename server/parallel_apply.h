// A server's apply threads (ps.apply_threads): the element loops of an update
// (the optimizer's pass over a chunk, the sync sum's copy and add) split into
// contiguous ranges, run by the calling thread and the pool's helpers at once.
// Each element's arithmetic is unchanged, so the weights are the same bits
// with any number of threads (tests/server/parallel_apply_test.cc).
//
// The pool belongs to one server (no process-wide pool: an in-process cluster
// runs several servers, each with its own) and is used by its event-loop
// thread only, one run at a time. A loop shorter than two parts of
// `min_part_elems` (ps.apply_split_bytes) stays on the calling thread: a
// helper's wake-up (tens of microseconds on a loaded host) costs more than
// a small chunk's pass. With threads = 1 there are no helpers at all.
// A split loop has one part per thread, of equal size, so all finish
// together; the caller takes the first part at once and any part no helper
// has taken yet. The hand-off avoids the condition variable's wake-up where
// it can: after a run a helper spins for kApplySpin on the job's generation
// before it sleeps (an update's chunks come back to back), and the caller,
// its parts done, spins as long for the helpers' ends before it sleeps; a
// sleeping helper is woken, a spinning one only sees the new generation.
// run() allocates nothing: the job is a few fields under one mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/config/config.h"
#include "common/math/parallel_ranges.h"

namespace pstrain {

// The default of ps.apply_threads (0 = this): the host's cores shared among
// the servers on it, at least 1. `cores` 0 (unknown) counts as 1.
int default_apply_threads(unsigned cores, int servers);
// How many servers of the job run on the host of server `rank`: the entries
// of cluster.server_hosts equal to its own, or, without server_hosts (every
// server listens on this machine's loopback: the launcher starts them all
// here), cluster.servers. At least 1.
int servers_on_host(const ClusterConfig& cluster, int rank);
// ps.apply_threads for server `rank`: `configured` when > 0, else
// default_apply_threads(hardware_concurrency, servers_on_host).
int resolve_apply_threads(int configured, const ClusterConfig& cluster, int rank);
// Where that count comes from, for the server's log: "ps.apply_threads 4",
// or "ps.apply_threads 0: 16 cores, 2 servers on this host".
std::string apply_threads_reason(int configured, const ClusterConfig& cluster, int rank);

// How long a helper spins for the next job, and the caller for the helpers'
// ends, before sleeping on a condition variable.
inline constexpr std::chrono::microseconds kApplySpin{50};

struct ApplyPoolStats {
  std::int64_t runs = 0;        // loops run (each update and sum pass)
  std::int64_t split_runs = 0;  // of them, split over more than one thread
  double seconds = 0;           // wall time inside run(), all loops
  std::int64_t caller_waits = 0;  // split runs whose caller slept for a helper's end (its spin ran out)
};

class ApplyPool final : public RangeRunner {
 public:
  // threads >= 1 (ConfigError otherwise; the caller's thread is one of them);
  // min_part_elems >= 1: the smallest range a split gives a thread.
  ApplyPool(int threads, std::size_t min_part_elems);
  ~ApplyPool() override;
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  std::int64_t run(std::size_t n, RangeBody body) override;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }
  // How many parts run() splits a loop of n elements into.
  std::size_t parts_for(std::size_t n) const;
  const ApplyPoolStats& stats() const { return stats_; }

 private:
  struct Job {
    std::uint64_t generation = 0;
    const RangeBody* body = nullptr;
    std::size_t n = 0, parts = 0;
    std::size_t next = 0;       // the next part to take
    std::size_t remaining = 0;  // parts not finished
    std::int64_t total = 0;
    std::exception_ptr error;
  };
  void helper_loop();
  // Takes and runs parts of the current job until none is left; `lock` held
  // on entry and exit, released while a part runs.
  void work(std::unique_lock<std::mutex>& lock);
  // The caller, its parts taken: spins, then sleeps, until every part has ended.
  void wait_for_parts(std::unique_lock<std::mutex>& lock);

  std::size_t min_part_elems_;
  std::mutex mutex_;
  std::condition_variable wake_;  // helpers: a new job, or stop
  std::condition_variable done_;  // the caller: remaining reached 0
  Job job_;
  // Copies of job_.generation, job_.remaining and stop_, written under the
  // mutex, read without it by the spins.
  std::atomic<std::uint64_t> published_{0};
  std::atomic<std::size_t> unfinished_{0};
  std::atomic<bool> stopping_{false};
  int sleeping_helpers_ = 0;     // helpers waiting on wake_
  bool caller_sleeping_ = false;  // the caller waiting on done_
  bool stop_ = false;
  std::vector<std::thread> helpers_;
  ApplyPoolStats stats_;
};

}  // namespace pstrain
