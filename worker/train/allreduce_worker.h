// The training loop of an allreduce worker (mode = "allreduce", no servers),
// the collective baseline of PyTorch DDP / Horovod:
//   forward/backward on the local batch -> as backward finishes each layer,
//   its gradients join a bucket of collective.bucket_bytes whose allreduce
//   (mean over the workers) starts at once, overlapping the rest of backward
//   -> wait for every bucket -> the same optimizer update on every worker
//   (nn::DeviceOptimizer: common/math/update_rules.h, the servers' code
//   path on the CPU) applied to its own replica.
// Replicas start from worker 0's weights (broadcast) and stay identical;
// at each epoch's end every worker checks that (a fingerprint of the weights
// compared over the collective: ComputeError if they diverged).
// Everything else is run_ps_worker's: data shards, lr schedule, dropout
// seeds, evaluation by worker 0 at each epoch's end and after the last step,
// the metrics records (docs/run_directory.md) and worker 0's
// run_dir/weights.bin. In "step" records pull_ms is the local optimizer
// update and push_ms the wait for the allreduces after backward (compute_ms
// covers backward and the buckets started during it); see docs/allreduce.md.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/base/log.h"
#include "common/observe/trace.h"
#include "worker/client/worker_session.h"
#include "worker/collective/collective.h"
#include "worker/train/metrics.h"
#include "worker/train/ps_join.h"
#include "worker/train/ps_worker.h"
#include "worker/train/workload.h"

namespace pstrain {

// `collective` spans the session's workers (rank and size equal to the
// session's); its memory space may differ from the model's backend (Gloo
// with a model on a GPU: gradients go through host memory).
// Spans of each step (step > data, forward+backward, allreduce wait, update;
// eval) go to `trace` when given.
// Checkpoints (worker/train/worker_checkpoint.h): the leader's part (worker
// 0, or the lowest worker left) holds the replicated model and optimizer
// state, every worker's its position; a collective operation after all parts
// are written ends it (a phase of its own: replica_resync.h), and the leader
// writes the manifest. `resume`: this worker's part of the checkpoint resumed
// from; worker 0 broadcasts the saved model and optimizer state to all.
//
// `reform`: makes a collective of `size` ranks with this worker as `rank`,
// its rendezvous keys apart by `generation` (1, 2, ...). Elastic membership
// uses it under any failure policy: at a membership change's step boundary
// the members form the next generation among themselves, every replica takes
// the lowest member's weights and optimizer state (replica_resync.h), and a
// worker the change leaves out retires there (result.retired, kDone retired;
// docs/architecture.md, "Elastic membership"). Under
// cluster.on_worker_failure = "continue" (or "restart"), when the collective fails (a peer gone), the
// worker waits for the scheduler to drop the failed worker(s), re-forms the
// collective among those left (ranks in the order of the workers' ranks),
// makes every replica worker-0-of-the-survivors' weights and optimizer state
// (a worker may have completed the failed step where another did not), and
// repeats the step. Without it, or with no worker dropped within
// heartbeat_timeout_ms + timeout_ms, the failure ends this worker. `watch`
// is called while the new collective's rendezvous waits; a throw from it
// (a member dropped meanwhile: TransportError) ends the rendezvous at once.
// `generation`: its rendezvous namespace, generation_label's.
using ReformCollective = std::function<std::unique_ptr<Collective>(int rank, int size, const std::string& generation,
                                                                   const std::function<void()>& watch)>;

// The rendezvous namespace of a generation's collective among `members`
// (its keys are under `<key_prefix>gen-<label>/`): the generation and a hash
// of the members. A member lost while a generation forms is left out under
// the same generation number (the survivors and a joiner that learn of the
// drop at different moments meet in one namespace); a retry with the same
// members, and every change, take the next number.
std::string generation_label(int generation, const std::vector<int>& members);

// After a collective failed to
// form or to resync (its rendezvous, its pairs' connections, the first
// exchange): waits, watching the scheduler, until `member_dropped` (which
// takes the scheduler's drops) says one of them was dropped, at most heartbeat_timeout_ms * 3 / 2 +
// heartbeat_interval_ms: a member lost before the failure is dropped by
// then, so every member decides alike. True: one was dropped (the next
// generation leaves it out). False: every member is alive, and the same
// members form the next generation again (a connect that timed out under
// load is retried, not fatal). Throws TransportError with `why` once
// `deadline` has passed with none dropped. `doing`: for the watch's message.
bool settle_failed_forming(SchedulerClient& scheduler, const ClusterConfig& cluster,
                           const std::function<bool()>& member_dropped, std::chrono::steady_clock::time_point deadline,
                           const std::string& why, const std::string& doing);

// cluster.on_worker_failure = "restart": a new process that took back a
// dropped worker's rank (--rejoin) is taken into the collective at an epoch
// boundary. The survivors learn of it from the scheduler (kRejoined); the
// replica check at an epoch's end carries what each has heard, so all decide
// alike; they then re-form the collective with it (the next generation) and
// the lowest one publishes this under allreduce_join_key(rank, take) in the
// scheduler's store. The new process waits for that key, forms the same
// collective, takes the most advanced replica's weights, optimizer state and
// progress (replica_resync.h) and trains from `first_step` (the next epoch's
// first step; the scheduler's epoch members include it from there).
//
// Elastic membership (--join, a grow): a worker that took a vacant slot waits
// for its start (JoinStart, worker/train/ps_join.h: the change, its boundary);
// at the boundary the members form the next generation with it and the lowest
// of them publishes this under allreduce_grow_key(change), `start` empty
// (the joiner fills it in); the joiner forms the same collective, takes the
// lowest member's weights, optimizer state and progress in the resync, learns
// every change's segments and trains from `first_step`, the boundary.
struct AllreduceJoin {
  std::vector<int> live;         // the workers of the grown collective, ascending
  int generation = 0;            // its rendezvous generation
  std::int64_t first_step = 0;   // where training goes on
  std::optional<JoinStart> start{};  // --join: where the scheduler let it in (else a --rejoin)
  // A --rejoin in an elastic job: the membership changes decided so far
  // (1..changes), whose segments it learns as a joiner does; 0: none (a
  // fourth field of the value only when > 0).
  std::int64_t changes = 0;
  // Not in the value: the ranks the scheduler announced dropped while this
  // worker formed its first collective (form_first), for its Loop's `dropped`.
  std::vector<int> dropped{};
};
std::string allreduce_join_key(int rank, std::int64_t take);
std::string allreduce_grow_key(std::int64_t change);
std::string format_join(const AllreduceJoin& join);
AllreduceJoin parse_join(const std::string& text);  // ProtocolError when malformed

// `members_at_start` (without `join`): the workers of the collective it
// starts in, ascending (a resume of an elastic job: the checkpoint's members,
// resume_members in common/checkpoint/checkpoint_members.h; its lowest
// broadcasts the saved state); null: 0..session.num_workers()-1.
TrainResult run_allreduce_worker(const RunConfig& config, WorkerSession& session, Workload& workload,
                                 Collective& collective, MetricsWriter& metrics, Logger& log,
                                 TraceRecorder* trace = nullptr, const WorkerCheckpoint* resume = nullptr,
                                 const ReformCollective* reform = nullptr, const AllreduceJoin* join = nullptr,
                                 const std::vector<int>* members_at_start = nullptr);

// A pstrain-worker process in allreduce mode, from start to exit code: the
// workload on this worker's device (one GPU per worker by local rank), the
// registration, the collective (collective.backend) with its rendezvous
// through the scheduler, training, the end of the job. `requested_rank` -1:
// from the launcher's environment, else assigned by the scheduler.
// `resume_dir`: the checkpoint to start from ("" = a fresh start).
// `rejoin`: --rejoin (cluster.on_worker_failure = "restart"): take back the
// rank of a dropped worker and join the survivors' collective (AllreduceJoin).
// `join`: --join (elastic membership): take a vacant slot (`requested_rank`,
// or the scheduler's choice when -1) and enter the collective at the
// boundary of the change the registration starts.
int run_allreduce_node(const RunConfig& config, int requested_rank, const std::string& resume_dir = "",
                       bool rejoin = false, bool join = false);

}  // namespace pstrain
