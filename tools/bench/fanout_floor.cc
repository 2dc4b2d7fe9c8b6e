#include "tools/bench/fanout_floor.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/base/errors.h"
#include "tools/bench/thread_cpu.h"

namespace pstrain::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kEndpoint = "inproc://pstrain-fanout-floor";

double cpu_s(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// A simulated worker: arrives (a message about a barrier's size), waits for its release, rounds + 1 times.
// Ends early, quietly, when the context is shut down (the releasing thread failed).
void fanout_worker(zmq::context_t* ctx, int rounds, bool batch, std::atomic<std::int64_t>* woken_ns) {
  pthread_setname_np(pthread_self(), "floor-worker");
  if (batch) {
    try {
      make_this_thread_batch();
    } catch (const Error&) {
      // Checked before the threads started (measure_fanout_floor): not reached; it would run unbatched.
    }
  }
  try {
    zmq::socket_t s(*ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.connect(kEndpoint);
    const std::string arrival(48, 'a');
    for (int r = 0; r <= rounds; ++r) {
      s.send(zmq::buffer(arrival), zmq::send_flags::none);
      zmq::message_t release;
      if (!s.recv(release, zmq::recv_flags::none)) return;
      woken_ns->store(Clock::now().time_since_epoch().count(), std::memory_order_release);
    }
  } catch (const zmq::error_t&) {
    // ETERM: the measurement was abandoned.
  }
}

// The release sent at `start` -> the last thread woken (every thread has stored its wake-up since).
double latency_s(const std::vector<std::atomic<std::int64_t>>& woken, Clock::time_point start) {
  std::int64_t last = 0;
  for (const auto& w : woken) last = std::max(last, w.load(std::memory_order_acquire));
  return std::chrono::duration<double>(Clock::duration(last) - start.time_since_epoch()).count();
}

// The releasing thread's part: `rounds` + 1 releases (the first unmeasured), each after every
// arrival. Appends each measured release's latency (the last one's once the threads are joined:
// returned in `last_start`); `cpu` gets the process's and this thread's CPU clocks at the start.
void release_rounds(zmq::socket_t& router, const std::vector<std::atomic<std::int64_t>>& woken, int rounds,
                    std::vector<double>& latencies, Clock::time_point& last_start, double cpu[2]) {
  std::vector<zmq::message_t> ids(woken.size());
  const std::string release(48, 'r');
  for (int r = 0; r <= rounds; ++r) {
    for (zmq::message_t& id : ids) {  // a round's arrivals: each thread is past its previous wake-up
      zmq::message_t body;
      if (!router.recv(id, zmq::recv_flags::none) || !router.recv(body, zmq::recv_flags::none)) {
        throw Error("fan-out floor: a receive failed");
      }
    }
    if (r >= 2) latencies.push_back(latency_s(woken, last_start));  // release 0 warms up
    if (r == 1) {
      cpu[0] = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
      cpu[1] = cpu_s(CLOCK_THREAD_CPUTIME_ID);
    }
    last_start = Clock::now();
    for (zmq::message_t& id : ids) {
      router.send(id, zmq::send_flags::sndmore);
      router.send(zmq::buffer(release), zmq::send_flags::none);
    }
  }
}

}  // namespace

FanoutFloor measure_fanout_floor(int workers, int rounds, bool batch_workers) {
  if (workers < 1 || rounds < 1) throw Error("fan-out floor: need at least 1 worker and 1 round");
  if (batch_workers) {  // the kernel refuses here, before any thread waits on another, or not at all
    std::exception_ptr refused;
    std::thread([&refused] {
      try {
        make_this_thread_batch();
      } catch (...) {
        refused = std::current_exception();
      }
    }).join();
    if (refused) std::rethrow_exception(refused);
  }
  zmq::context_t ctx;
  ctx.set(zmq::ctxopt::max_sockets, workers + 64);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind(kEndpoint);
  std::vector<std::atomic<std::int64_t>> woken(static_cast<std::size_t>(workers));
  std::vector<std::thread> threads;
  threads.reserve(woken.size());
  std::vector<double> latencies;
  Clock::time_point last_start;
  double cpu[2] = {0, 0};  // the process's and this thread's CPU at the first measured release
  try {
    for (auto& w : woken) threads.emplace_back(fanout_worker, &ctx, rounds, batch_workers, &w);
    release_rounds(router, woken, rounds, latencies, last_start, cpu);
  } catch (...) {
    router.close();
    ctx.shutdown();  // the threads' blocking calls end (ETERM): they can be joined
    for (std::thread& t : threads) t.join();
    throw;
  }
  for (std::thread& t : threads) t.join();
  latencies.push_back(latency_s(woken, last_start));
  const double mine = cpu_s(CLOCK_THREAD_CPUTIME_ID) - cpu[1];
  const double all = cpu_s(CLOCK_PROCESS_CPUTIME_ID) - cpu[0];
  std::sort(latencies.begin(), latencies.end());
  FanoutFloor f;
  f.workers = workers;
  f.rounds = rounds;
  f.batch_workers = batch_workers;
  f.release_p50_s = latencies[latencies.size() / 2];
  f.releaser_cpu_s = mine / rounds / workers;
  f.worker_cpu_s = std::max(0.0, all - mine) / rounds / workers;
  return f;
}

}  // namespace pstrain::bench
