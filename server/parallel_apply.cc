#include "server/parallel_apply.h"

#include <algorithm>
#include <string>

#include "common/base/errors.h"

namespace pstrain {

int default_apply_threads(unsigned cores, int servers) {
  const int c = std::max(1, static_cast<int>(cores));
  return std::max(1, c / std::max(1, servers));
}

int servers_on_host(const ClusterConfig& cluster, int rank) {
  const auto& hosts = cluster.server_hosts;
  if (hosts.empty() || rank < 0 || static_cast<std::size_t>(rank) >= hosts.size()) {
    return std::max(1, cluster.num_servers);
  }
  const std::string& mine = hosts[static_cast<std::size_t>(rank)];
  return std::max(1, static_cast<int>(std::count(hosts.begin(), hosts.end(), mine)));
}

int resolve_apply_threads(int configured, const ClusterConfig& cluster, int rank) {
  if (configured > 0) return configured;
  return default_apply_threads(std::thread::hardware_concurrency(), servers_on_host(cluster, rank));
}

std::string apply_threads_reason(int configured, const ClusterConfig& cluster, int rank) {
  if (configured > 0) return "ps.apply_threads " + std::to_string(configured);
  return "ps.apply_threads 0: " + std::to_string(std::thread::hardware_concurrency()) + " cores, " +
         std::to_string(servers_on_host(cluster, rank)) + " servers on this host";
}

ApplyPool::ApplyPool(int threads, std::size_t min_part_elems) : min_part_elems_(std::max<std::size_t>(min_part_elems, 1)) {
  if (threads < 1) throw ConfigError("ps.apply_threads: expected >= 1 threads, got " + std::to_string(threads));
  helpers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { helper_loop(); });
}

ApplyPool::~ApplyPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    stopping_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() holds or `limit` has passed (the clock read every 64
// turns); returns done().
template <class Done>
bool spin_until(const Done& done, std::chrono::microseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (unsigned turn = 1;; ++turn) {
    if (done()) return true;
    if (turn % 64 == 0 && std::chrono::steady_clock::now() >= until) return done();
    cpu_relax();
  }
}

}  // namespace

std::size_t ApplyPool::parts_for(std::size_t n) const {
  const std::size_t by_size = n / min_part_elems_;
  return std::max<std::size_t>(1, std::min<std::size_t>(helpers_.size() + 1, by_size));
}

std::int64_t ApplyPool::run(std::size_t n, RangeBody body) {
  const auto start = std::chrono::steady_clock::now();
  const std::size_t parts = parts_for(n);
  ++stats_.runs;
  if (parts == 1) {
    const std::int64_t total = body(0, n);  // an exception passes straight through: nothing else runs
    stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return total;
  }
  ++stats_.split_runs;
  std::unique_lock<std::mutex> lock(mutex_);
  job_.body = &body;
  job_.n = n;
  job_.parts = parts;
  job_.next = 0;
  job_.remaining = parts;
  job_.total = 0;
  job_.error = nullptr;
  ++job_.generation;
  unfinished_.store(parts, std::memory_order_relaxed);
  published_.store(job_.generation, std::memory_order_release);  // spinning helpers see it now
  if (sleeping_helpers_ > 0) {
    lock.unlock();
    wake_.notify_all();
    lock.lock();
  }
  work(lock);  // the caller takes the first part, and any a helper has not taken yet
  wait_for_parts(lock);
  job_.body = nullptr;
  const std::int64_t total = job_.total;
  const std::exception_ptr error = job_.error;
  lock.unlock();
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (error) std::rethrow_exception(error);
  return total;
}

void ApplyPool::wait_for_parts(std::unique_lock<std::mutex>& lock) {
  if (job_.remaining == 0) return;
  lock.unlock();
  const bool ended = spin_until([this] { return unfinished_.load(std::memory_order_acquire) == 0; }, kApplySpin);
  lock.lock();
  if (ended && job_.remaining == 0) return;
  ++stats_.caller_waits;
  caller_sleeping_ = true;
  done_.wait(lock, [this] { return job_.remaining == 0; });
  caller_sleeping_ = false;
}

void ApplyPool::work(std::unique_lock<std::mutex>& lock) {
  while (job_.body != nullptr && job_.next < job_.parts) {
    const std::size_t index = job_.next++;
    const RangeBody& body = *job_.body;
    const Range r = split_range(job_.n, job_.parts, index);
    lock.unlock();
    std::int64_t count = 0;
    std::exception_ptr error;
    try {
      count = body(r.begin, r.end);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    // The job is still this one: the caller waits for every part's end
    // (remaining) before it finishes it or publishes another.
    job_.total += count;
    if (error && !job_.error) job_.error = error;
    --job_.remaining;
    unfinished_.store(job_.remaining, std::memory_order_release);
    if (job_.remaining == 0 && caller_sleeping_) done_.notify_one();
  }
}

void ApplyPool::helper_loop() {
  // Generation 0 is the one before any job: a helper that starts after the
  // first run() published its job still takes part in it.
  std::uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return published_.load(std::memory_order_acquire) != seen ||
                            stopping_.load(std::memory_order_acquire); },
               kApplySpin);
    std::unique_lock<std::mutex> lock(mutex_);
    if (!stop_ && job_.generation == seen) {
      ++sleeping_helpers_;
      wake_.wait(lock, [&] { return stop_ || job_.generation != seen; });
      --sleeping_helpers_;
    }
    if (stop_) return;
    seen = job_.generation;
    work(lock);
  }
}

}  // namespace pstrain
