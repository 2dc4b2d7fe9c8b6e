// One point of the scale benchmark (tools/bench_scale.cc): a whole
// parameter-server job in this process, the real scheduler, servers,
// consistency policies, worker sessions and KV clients, W workers as threads
// over ZeroMQ inproc:// (tools/cluster/local_cluster.h). Only the compute is
// simulated (a sleep of compute_us per step: a GPU's step, which leaves the
// host's CPU free) and the wire is in memory. Each step every worker pushes a
// gradient of ones for every chunk and pulls the next weights (sent at once,
// as the PS loop does); every barrier_every steps the workers meet at a
// scheduler barrier, every epoch_steps steps each asks for the epoch's members
// (the scheduler's store, as worker/train/epoch_members.h does). Then the
// workers take barrier_rounds barriers back to back, nothing between them: a
// barrier alone, its latency and its CPU (the scheduler's thread, the project's
// part; the workers' threads woken, the machine's part here: 2,000 threads on
// a few cores). Then the workers sleep idle_ms between two barriers: the
// scheduler's CPU time then is the price of heartbeats and liveness alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/config.h"

namespace pstrain::bench {

struct ScaleOptions {
  Mode mode = Mode::kSync;
  int staleness_bound = 2;  // ssp
  int workers = 8;
  int servers = 4;
  int steps = 20;
  int barrier_every = 1;     // steps between barriers (0: none)
  int epoch_steps = 10;      // steps per simulated epoch: a store get of its members (0: none)
  std::int64_t elems_per_server = 1024;  // floats per chunk; one chunk per server
  int compute_us = 0;        // simulated compute per step (a sleep)
  int heartbeat_ms = 500;    // cluster.heartbeat_interval_ms
  int idle_ms = 1000;        // the heartbeat-only phase
  // Barriers back to back after the steps (0: none; -1: 51,200 / workers, at least 20, so that every
  // size takes about as many arrivals: a second or more of the scheduler's CPU, enough for the kernel's
  // user/system split).
  int barrier_rounds = -1;
  // The workers' threads (and their heartbeat threads) SCHED_BATCH: a worker
  // woken by its release waits for its core's next turn instead of preempting
  // the scheduler mid-release, as on a cluster where each worker has a host of
  // its own (docs/scaling.md, "Where a barrier's time goes").
  bool batch_workers = false;
};

// Per step unless named otherwise; times in seconds, CPU in seconds.
struct ScaleResult {
  ScaleOptions options;
  double step_s = 0;             // wall time of the measured steps / steps
  int batch_worker_threads = 0;  // the workers' threads found SCHED_BATCH while the cluster ran (batch_workers)
  double barrier_p50_s = 0;      // a barrier: the last arrival sent -> the last worker released
  double barrier_max_s = 0;
  double barrier_first_p50_s = 0;  // the last arrival sent -> the first worker released (no fan-out)
  int barriers = 0;
  // The barriers back to back (barrier_rounds): latency as above, median and max, and per barrier the
  // scheduler thread's CPU without heartbeats (arrivals, the release's sends) and the workers' threads' CPU
  // (each woken by its release, sending its next arrival) per worker.
  double round_p50_s = 0, round_max_s = 0, round_first_p50_s = 0;
  double round_scheduler_cpu_s = 0;
  double round_scheduler_user_share = 0;  // of the scheduler thread's CPU in the rounds: user space (the kernel's split)
  double round_worker_cpu_s = 0;
  double store_get_p50_s = 0;    // a worker's epoch-members get, median
  double push_p50_s = 0;         // a worker's push of all chunks -> every server's ack, median
  double pull_p50_s = 0;         // the pull sent with it -> every chunk's reply, median
  double scheduler_cpu_s = 0;    // per step, the scheduler's thread
  double scheduler_idle_cpu_s = 0;  // per second of the idle phase: heartbeats and liveness
  double server_cpu_per_request_s = 0;  // server threads' CPU / requests they answered (push or pull)
  double worker_cpu_s = 0;       // per step per worker (its thread and its heartbeat thread)
  double zmq_io_cpu_s = 0;       // per step, ZeroMQ's own threads
  double scheduler_bytes = 0;    // per step, sent + received
  double server_bytes = 0;       // per step per server, sent + received
  double worker_bytes = 0;       // per step per worker, sent + received
  double scheduler_messages = 0; // per step, requests and replies counted, heartbeats from the interval
  double server_messages = 0;    // per step per server
  double worker_messages = 0;    // per step per worker
  std::int64_t rss_bytes = 0;    // the process with the whole cluster running
  double rss_per_node_bytes = 0; // its growth from before the cluster / (workers + servers + 1)
  int wrong = 0;                 // sync: elements of the final weights off the exact expected value
};

// Runs one point; throws Error when a node fails.
ScaleResult run_scale(const ScaleOptions& options);

// ZeroMQ sockets (and so file descriptors: one each) a point needs.
int sockets_needed(int workers, int servers);

}  // namespace pstrain::bench
