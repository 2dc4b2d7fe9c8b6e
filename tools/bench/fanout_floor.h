// The machine's floor for a barrier over W threads, without the project: W
// threads, each blocked on its own ZeroMQ DEALER socket (inproc://, as the
// scale benchmark's workers), released by one ROUTER thread that sends each a
// message, after which each sends its next arrival: the same wake-ups, the
// same sockets and the same libzmq calls as a barrier's release and arrival,
// and nothing else (no headers, no checks, no budget, no membership). What a
// barrier measured by tools/bench/scale_run.h costs above this is the
// project's; what this costs is the machine's (its threads' wake-ups on its
// cores) and libzmq's.
#pragma once

namespace pstrain::bench {

struct FanoutFloor {
  int workers = 0;
  int rounds = 0;
  double release_p50_s = 0;   // the first send of a release -> the last thread woken (median over rounds)
  double releaser_cpu_s = 0;  // the releasing thread's CPU per round per worker (its sends and receives)
  double worker_cpu_s = 0;    // the threads' CPU per round per worker (woken, the next arrival sent)
  bool batch_workers = false;  // the threads were SCHED_BATCH (as the cluster's with --batch-workers)
};

// `rounds` releases over `workers` threads (after one unmeasured round);
// `batch_workers`: the threads SCHED_BATCH, the releasing thread not.
FanoutFloor measure_fanout_floor(int workers, int rounds, bool batch_workers = false);

}  // namespace pstrain::bench
