// One parameter-server push+pull measurement among forked processes: a
// scheduler, S servers and W workers (sync mode, plain SGD, lr 1). A round =
// every worker pushes a float tensor of num_bytes (in chunks over the
// servers) and pulls the updated tensor back; the pull is sent right after
// the push and the servers answer it once the update is applied.
// Correctness is checked outside the timed loop: every element must have
// moved by exactly -1 per round (gradients of 1, mean 1, lr 1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pstrain::bench {

struct PsBenchOptions {
  int workers = 1;
  int servers = 1;
  std::int64_t partition_bytes = 0;  // 0: size / servers (one chunk per server, like ps-lite's one key per server)
  std::string transport = "tcp";     // "tcp" | "ipc" (the servers' endpoints) | "shm" (tcp + shared memory)
  std::string key_dir;               // non-empty: security.mode = "curve" with these keys (pstrain-keygen)
  std::string wire_dtype = "float32";  // ps.wire_dtype: "float32" | "bfloat16"
  int io_threads = 0;  // ZeroMQ I/O threads of each node's context; 0: as a node picks (io_threads_for)
};

struct PsRound {
  double seconds = 0;  // worker 0's median round
  int wrong = 0;       // elements of worker 0's weights off the expected value
};

// Throws Error when a benchmark process fails.
PsRound ps_pushpull_round(std::size_t num_bytes, int rounds, const PsBenchOptions& options);

}  // namespace pstrain::bench
