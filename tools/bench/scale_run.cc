#include "tools/bench/scale_run.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "common/base/errors.h"
#include "common/observe/traffic_counters.h"
#include "common/wire/protocol.h"
#include "tools/bench/processes.h"
#include "tools/bench/thread_cpu.h"
#include "tools/cluster/local_cluster.h"

namespace pstrain::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What one worker measured (written by its thread only).
struct WorkerRecord {
  std::vector<Clock::time_point> barrier_in, barrier_out;
  std::vector<Clock::time_point> round_in, round_out;  // the barriers back to back
  std::vector<double> push_s, pull_s, store_s;
  int wrong = 0;
};

// The process at one moment: CPU by thread name, bytes by node kind.
struct Snapshot {
  Clock::time_point at;
  std::map<std::string, double> cpu;
  std::map<std::string, UserSystem> split;  // the rounds' snapshots only
  double scheduler_bytes = 0, server_bytes = 0, worker_bytes = 0;
};

double bytes_of(const TrafficCounters& c) { return static_cast<double>(c.bytes_sent() + c.bytes_received()); }

// Each barrier's latency: the last arrival sent -> the last worker released (last), -> the first (first).
struct Latencies {
  std::vector<double> last, first;
};

using Times = std::vector<Clock::time_point> WorkerRecord::*;

Latencies latencies(const std::vector<WorkerRecord>& records, Times in, Times out) {
  Latencies l;
  const std::size_t nb = (records[0].*in).size();
  for (std::size_t b = 0; b < nb; ++b) {
    Clock::time_point last_in{}, last_out{}, first_out = Clock::time_point::max();
    for (const WorkerRecord& w : records) {
      last_in = std::max(last_in, (w.*in)[b]);
      last_out = std::max(last_out, (w.*out)[b]);
      first_out = std::min(first_out, (w.*out)[b]);
    }
    l.last.push_back(seconds(last_out - last_in));
    l.first.push_back(seconds(first_out - last_in));
  }
  return l;
}

class ScaleJob {
 public:
  explicit ScaleJob(const ScaleOptions& o)
      : o_(o), records_(static_cast<std::size_t>(o.workers)), worker_traffic_(static_cast<std::size_t>(o.workers)),
        server_traffic_(static_cast<std::size_t>(o.servers)) {
    layout_.add("w", {o.elems_per_server * o.servers});
  }

  ScaleResult run();

 private:
  LocalClusterOptions cluster_options();
  void worker(LocalCluster& cluster, int rank);
  void steps(WorkerSession& session, WorkerRecord& rec, std::span<float> params, std::span<const float> grads);
  void rounds(SchedulerClient& scheduler, WorkerRecord& rec, int rank);
  void idle(int rank);
  Snapshot snapshot() const;
  // A snapshot by worker 0's thread, its own CPU for taking it not counted (it reads /proc for every thread).
  Snapshot worker0_snapshot();
  ScaleResult summarize() const;

  const ScaleOptions& o_;
  ParamLayout layout_;
  std::vector<WorkerRecord> records_;
  std::vector<TrafficCounters> worker_traffic_;
  std::vector<TrafficCounters> server_traffic_;
  TrafficCounters scheduler_traffic_;
  // Written by worker 0 after a barrier, read once the workers have ended.
  Snapshot start_, end_, rounds_a_, rounds_b_, idle_a_, idle_b_;
  double snapshot_cpu_s_ = 0;  // worker 0's CPU spent taking rounds_a_ and rounds_b_
  int rounds_ = o_.barrier_rounds >= 0 ? o_.barrier_rounds : std::max(20, 51200 / o_.workers);
  std::int64_t rss_before_ = 0, rss_running_ = 0;
  int batch_threads_ = 0;
};

LocalClusterOptions ScaleJob::cluster_options() {
  LocalClusterOptions c;
  c.mode = o_.mode;
  c.staleness_bound = o_.staleness_bound;
  c.num_servers = o_.servers;
  c.num_workers = o_.workers;
  c.optimizer.momentum = 0.0;  // the weights move by exactly -lr per step in sync: checked
  c.partition_bytes = o_.elems_per_server * static_cast<std::int64_t>(sizeof(float));
  c.cluster.heartbeat_interval_ms = o_.heartbeat_ms;
  c.cluster.heartbeat_timeout_ms = 300000;  // 2,000 threads on 2 cores: no false alarm
  c.cluster.timeout_ms = 600000;
  c.transport = "inproc";
  c.zmq_max_sockets = sockets_needed(o_.workers, o_.servers);
  c.scheduler_traffic = &scheduler_traffic_;
  c.server_traffic = server_traffic_;
  return c;
}

Snapshot ScaleJob::snapshot() const {
  Snapshot s;
  s.at = Clock::now();
  s.cpu = cpu_seconds_by_thread_name();
  s.scheduler_bytes = bytes_of(scheduler_traffic_);
  for (const TrafficCounters& c : server_traffic_) s.server_bytes += bytes_of(c);
  for (const TrafficCounters& c : worker_traffic_) s.worker_bytes += bytes_of(c);
  return s;
}

void ScaleJob::steps(WorkerSession& session, WorkerRecord& rec, std::span<float> params, std::span<const float> grads) {
  KVClient& kv = session.kv();
  for (int s = 0; s < o_.steps; ++s) {
    if (o_.epoch_steps > 0 && s % o_.epoch_steps == 0) {  // a new epoch: who shares it
      const auto t0 = Clock::now();
      session.scheduler().store_get(std::string(kEpochMembersPrefix) + std::to_string(s / o_.epoch_steps), 600000);
      rec.store_s.push_back(seconds(Clock::now() - t0));
    }
    if (o_.compute_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(o_.compute_us));
    const auto t0 = Clock::now();
    const auto push = kv.push(grads, s, 1.0);
    const auto pull = kv.pull(params, s + 1);  // sent at once: the servers park it until its step is applied
    kv.wait(push);
    rec.push_s.push_back(seconds(Clock::now() - t0));
    kv.wait(pull);
    rec.pull_s.push_back(seconds(Clock::now() - t0));
    if (o_.barrier_every > 0 && (s + 1) % o_.barrier_every == 0) {
      rec.barrier_in.push_back(Clock::now());
      session.scheduler().barrier("step");
      rec.barrier_out.push_back(Clock::now());
    }
  }
}

Snapshot ScaleJob::worker0_snapshot() {
  timespec a{}, b{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  Snapshot s = snapshot();
  s.split = user_system_by_thread_name();
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  snapshot_cpu_s_ += static_cast<double>(b.tv_sec - a.tv_sec) + 1e-9 * static_cast<double>(b.tv_nsec - a.tv_nsec);
  return s;
}

// Barriers back to back: between worker 0's two snapshots, the rounds and about one more barrier (the
// release of "rounds go", whose arrivals may come before the first snapshot, and the arrivals at
// "rounds done", whose release ends the window).
void ScaleJob::rounds(SchedulerClient& scheduler, WorkerRecord& rec, int rank) {
  if (rounds_ <= 0) return;
  if (rank == 0) rounds_a_ = worker0_snapshot();
  scheduler.barrier("rounds go");
  for (int k = 0; k < rounds_; ++k) {
    rec.round_in.push_back(Clock::now());
    scheduler.barrier("round");
    rec.round_out.push_back(Clock::now());
  }
  scheduler.barrier("rounds done");
  if (rank == 0) rounds_b_ = worker0_snapshot();
}

// Heartbeats and liveness only: worker 0 samples the middle half of it, clear of the barriers around it.
void ScaleJob::idle(int rank) {
  const auto quarter = std::chrono::milliseconds(o_.idle_ms / 4);
  if (rank != 0) {
    std::this_thread::sleep_for(4 * quarter);
    return;
  }
  std::this_thread::sleep_for(quarter);
  idle_a_ = snapshot();
  std::this_thread::sleep_for(2 * quarter);
  idle_b_ = snapshot();
  std::this_thread::sleep_for(quarter);
}

void ScaleJob::worker(LocalCluster& cluster, int rank) {
  pthread_setname_np(pthread_self(), "ps-worker");  // its heartbeat thread takes the name too
  if (o_.batch_workers) make_this_thread_batch();    // and the policy: before the session starts it
  const auto n = static_cast<std::size_t>(layout_.total_elems());
  std::vector<float> params(n, 0.0f);  // before the session: outlives every frame that points into it
  const std::vector<float> grads(n, 1.0f);
  WorkerSessionOptions options = cluster.worker_options(rank);
  options.traffic = &worker_traffic_[static_cast<std::size_t>(rank)];
  WorkerSession session(cluster.transport(), options, layout_);
  WorkerRecord& rec = records_[static_cast<std::size_t>(rank)];
  session.run_reporting_failure([&] {
    session.broadcast_initial(params);
    session.scheduler().barrier("measure");
    if (rank == 0) {
      rss_running_ = resident_bytes();
      batch_threads_ = batch_threads_with_prefix("ps-worker");  // every worker has registered: its heartbeat runs
      start_ = snapshot();
    }
    session.scheduler().barrier("go");  // nobody steps before worker 0's snapshot
    steps(session, rec, params, grads);
    session.scheduler().barrier("steps done");
    if (rank == 0) end_ = snapshot();
    if (o_.mode == Mode::kSync) {  // gradients of 1, lr 1, no momentum: every weight is -steps exactly
      for (float x : params) rec.wrong += x != -static_cast<float>(o_.steps) ? 1 : 0;
    }
    rounds(session.scheduler(), rec, rank);
    idle(rank);
    session.scheduler().barrier("idle done");
  });
  session.finish();
}

ScaleResult ScaleJob::run() {
  rss_before_ = resident_bytes();
  LocalCluster cluster(cluster_options());
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr failure;
  for (int r = 0; r < o_.workers; ++r) {
    threads.emplace_back([&, r] {
      try {
        worker(cluster, r);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  cluster.join();
  if (failure) std::rethrow_exception(failure);
  return summarize();
}

ScaleResult ScaleJob::summarize() const {
  ScaleResult r;
  r.options = o_;
  const double steps = o_.steps;
  const double window = seconds(end_.at - start_.at);
  const auto cpu = [&](const Snapshot& a, const Snapshot& b, const std::string& prefix) {
    return cpu_seconds_with_prefix(b.cpu, prefix) - cpu_seconds_with_prefix(a.cpu, prefix);
  };
  r.step_s = window / steps;
  r.scheduler_cpu_s = cpu(start_, end_, "ps-scheduler") / steps;
  r.scheduler_idle_cpu_s = cpu(idle_a_, idle_b_, "ps-scheduler") / seconds(idle_b_.at - idle_a_.at);
  const double requests = 2.0 * o_.workers * steps * o_.servers;  // a push and a pull per chunk, one chunk per server
  r.server_cpu_per_request_s = cpu(start_, end_, "ps-server-") / requests;
  r.worker_cpu_s = cpu(start_, end_, "ps-worker") / steps / o_.workers;
  r.zmq_io_cpu_s = cpu(start_, end_, "ZMQbg") / steps;
  r.scheduler_bytes = (end_.scheduler_bytes - start_.scheduler_bytes) / steps;
  r.server_bytes = (end_.server_bytes - start_.server_bytes) / steps / o_.servers;
  r.worker_bytes = (end_.worker_bytes - start_.worker_bytes) / steps / o_.workers;
  // Messages: each request and its reply, as counted; heartbeats both ways each interval.
  const double barriers_per_step = o_.barrier_every > 0 ? 1.0 / o_.barrier_every : 0.0;
  const double gets_per_step = o_.epoch_steps > 0 ? 1.0 / o_.epoch_steps : 0.0;
  const double heartbeats = 2.0 * r.step_s * 1000.0 / o_.heartbeat_ms;
  r.scheduler_messages = o_.workers * 2.0 * (barriers_per_step + gets_per_step) + (o_.workers + o_.servers) * heartbeats;
  r.server_messages = o_.workers * 4.0 + heartbeats;
  r.worker_messages = o_.servers * 4.0 + 2.0 * (barriers_per_step + gets_per_step) + heartbeats;
  const Latencies steps_b = latencies(records_, &WorkerRecord::barrier_in, &WorkerRecord::barrier_out);
  const Latencies rounds_b = latencies(records_, &WorkerRecord::round_in, &WorkerRecord::round_out);
  r.options.barrier_rounds = rounds_;
  if (rounds_ > 0) {
    const double n = rounds_ + 1.0;  // "rounds go" and "rounds done": about one more
    r.round_p50_s = median(rounds_b.last);
    r.round_max_s = rounds_b.last.empty() ? 0 : *std::max_element(rounds_b.last.begin(), rounds_b.last.end());
    r.round_first_p50_s = median(rounds_b.first);
    const double hb = r.scheduler_idle_cpu_s * seconds(rounds_b_.at - rounds_a_.at);  // heartbeats meanwhile
    r.round_scheduler_cpu_s = std::max(0.0, cpu(rounds_a_, rounds_b_, "ps-scheduler") - hb) / n;
    r.round_worker_cpu_s = (cpu(rounds_a_, rounds_b_, "ps-worker") - snapshot_cpu_s_) / n / o_.workers;
    const auto split = [](const Snapshot& x) {
      const auto it = x.split.find("ps-scheduler");
      return it == x.split.end() ? UserSystem{} : it->second;
    };
    const UserSystem a = split(rounds_a_), b = split(rounds_b_);
    const double user = b.user_s - a.user_s, total = user + b.system_s - a.system_s;
    r.round_scheduler_user_share = total > 0 ? user / total : 0;
  }
  std::vector<double> store, push, pull;
  for (const WorkerRecord& w : records_) {
    store.insert(store.end(), w.store_s.begin(), w.store_s.end());
    push.insert(push.end(), w.push_s.begin(), w.push_s.end());
    pull.insert(pull.end(), w.pull_s.begin(), w.pull_s.end());
    r.wrong += w.wrong;
  }
  r.barriers = static_cast<int>(steps_b.last.size());
  r.barrier_p50_s = median(steps_b.last);
  r.barrier_max_s = steps_b.last.empty() ? 0 : *std::max_element(steps_b.last.begin(), steps_b.last.end());
  r.barrier_first_p50_s = median(steps_b.first);
  r.store_get_p50_s = median(store);
  r.push_p50_s = median(push);
  r.pull_p50_s = median(pull);
  r.rss_bytes = rss_running_;
  r.batch_worker_threads = batch_threads_;
  r.rss_per_node_bytes = static_cast<double>(rss_running_ - rss_before_) / (o_.workers + o_.servers + 1);
  return r;
}

}  // namespace

int sockets_needed(int workers, int servers) {
  // A worker: its scheduler connection, its heartbeat connection, one per server;
  // a server: its listener and two to the scheduler; the scheduler's listener; some spare.
  return workers * (servers + 2) + 3 * servers + 1 + 16;
}

ScaleResult run_scale(const ScaleOptions& options) {
  if (options.workers < 1 || options.servers < 1 || options.steps < 1 || options.elems_per_server < 1 ||
      options.heartbeat_ms < 1 || options.idle_ms < 4 || options.barrier_rounds < -1) {
    throw ConfigError("bench_scale: workers, servers, steps, elems, heartbeat-ms must be positive, idle-ms at least 4 "
                      "and barrier-rounds at least -1 (auto)");
  }
  ScaleJob job(options);
  return job.run();
}

}  // namespace pstrain::bench
