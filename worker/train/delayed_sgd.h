// Async SGD with a fixed, injected staleness, deterministic and in one
// process: the model of what W asynchronous workers do to the servers'
// weights, without the timing that makes real runs differ.
//
// W virtual workers take turns (round robin); each update u is worker
// u mod W's next batch from its own shard (the sampler the real workers use),
// its gradient computed on the weights as they were `staleness` updates
// earlier, applied at once with the optimizer the servers would run for the
// config (server_optimizer) at the learning rate the worker would send
// (the schedule at that worker's step, scaled by samples_per_update), divided
// by the staleness under optimizer.staleness_rule = "inverse".
// With staleness W-1 this is round-robin asynchrony: each worker's push lands
// after the W-1 pushes of the others made since its pull.
//
// Used by the test that reproduces async divergence on the CPU and shows the
// rules that prevent it (docs/config.md, "Async and ssp"), and by
// tools/async_sim to measure it on the real workload.
#pragma once

#include <cstdint>
#include <vector>

#include "common/config/config.h"
#include "common/base/log.h"
#include "worker/train/workload.h"

namespace pstrain {

struct DelayedSgdOptions {
  int staleness = 0;            // updates between a gradient's weights and its apply
  std::int64_t updates = 0;     // total updates over all virtual workers
  std::int64_t eval_every = 0;  // evaluate the test set every this many updates (0: only at the end)
};

struct DelayedSgdResult {
  std::int64_t updates = 0;         // applied before the end or the divergence
  bool diverged = false;            // a non-finite loss or gradient
  std::int64_t diverged_at = -1;    // the update that found it
  double final_train_loss = 0.0;    // mean over the last 20 updates
  double final_test_accuracy = 0.0; // -1 after a divergence
  std::vector<std::pair<std::int64_t, double>> test_accuracy;  // (update, accuracy) at each evaluation
  double lr = 0.0;                  // the base rate the schedule started from
  double momentum = 0.0;            // what the servers' optimizer used
};

// `config.cluster.num_workers` virtual workers; `workload` from make_workload.
DelayedSgdResult run_delayed_sgd(const RunConfig& config, Workload& workload, const DelayedSgdOptions& options,
                                 Logger& log);

}  // namespace pstrain
