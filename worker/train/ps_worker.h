// The training loop of a parameter-server worker:
//   pull weights -> forward/backward on the local batch -> push gradients
// Each layer's gradient chunks are pushed as soon as backward has produced
// them (last layer first), overlapping communication with the rest of
// backward. sync: step s pulls version s (which waits for every worker's
// step s-1) and pushes step s. async: pulls the latest weights, pushes, and
// records the staleness the servers report.
// Worker 0 evaluates the test set on the servers' weights at each epoch's end
// and after the last step. Metrics go to the MetricsWriter; spans of each
// step (step > pull wait, data, forward+backward > push sends, push wait; eval)
// to `trace` when given (common/observe/trace.h).
#pragma once

#include <cstdint>

#include "common/config/config.h"
#include "common/base/log.h"
#include "common/observe/trace.h"
#include "worker/client/worker_session.h"
#include "worker/train/metrics.h"
#include "worker/train/records.h"
#include "worker/train/worker_checkpoint.h"
#include "worker/train/workload.h"

namespace pstrain {


// Checkpoints (config [checkpoint], worker/train/worker_checkpoint.h): every
// interval_steps steps this worker writes its part and meets the others at
// the barrier "checkpoint S"; worker 0 then completes the checkpoint.
// `resume` (this worker's part of the checkpoint resumed from): training goes
// on from its step on the servers' restored weights (pulled, not sent).
// `rejoin`: this process took back a dropped worker's rank (--rejoin,
// worker/train/ps_rejoin.h): it joins at the step the job is at.
// `join`: this worker took a vacant slot of a running elastic job (--join,
// worker/train/ps_join.h): it starts at its membership change's boundary.
TrainResult run_ps_worker(const RunConfig& config, WorkerSession& session, Workload& workload, MetricsWriter& metrics,
                          Logger& log, TraceRecorder* trace = nullptr, const WorkerCheckpoint* resume = nullptr,
                          bool rejoin = false, bool join = false);

}  // namespace pstrain
