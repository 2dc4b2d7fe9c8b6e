// A server's options for a run's config, built in one place for every server
// that runs one: pstrain-server (server/main.cc), the in-process LocalCluster
// (tools/cluster/local_cluster.cc), the push/pull bench
// (tools/bench/ps_pushpull.cc) and the fuzz harness (fuzz/cluster_sequence.cc).
// So they all run the same optimizer (server_optimizer: in async and ssp the
// momentum less the momentum asynchrony adds), job fingerprint and checkpoint
// settings for the same config.
#pragma once

#include "common/config/config.h"
#include "server/server.h"

namespace pstrain {

// From `config`: mode, staleness bound, the servers' optimizer
// (server_optimizer, common/math/optimizer.h; `implicit_momentum`, if given,
// gets the momentum it took off), the highest learning rate a push may
// carry (schedule_max_lr, common/math/lr_schedule.h), partition size, cluster settings, the
// scheduler's endpoint (cluster.scheduler), the job fingerprint, and the
// checkpoint interval, root and fingerprint, ps.apply_threads and
// ps.apply_split_bytes (the threads are resolved once the rank is known). What belongs to one process is
// left for the caller: where it listens, its rank, security, trace, traffic
// counters, the registration callback, resume and rejoin.
ServerOptions server_options(const RunConfig& config, double* implicit_momentum = nullptr);

}  // namespace pstrain
