// Internal to the allreduce worker (allreduce_worker.cc: the training loop;
// allreduce_reform.cc: the re-forming collective): the loop's per-run state
// and what the two files share. Not part of the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <set>
#include <vector>

#include "common/base/errors.h"
#include "worker/nn/device_optimizer.h"
#include "worker/train/allreduce_worker.h"
#include "worker/train/divergence.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/epoch_members.h"
#include "worker/train/membership_answer.h"
#include "worker/train/straggler.h"

namespace pstrain::allreduce_detail {

// Per-run state of the loop, to keep each function short.
struct Loop {
  const RunConfig& config;
  WorkerSession& session;
  nn::Model& model;
  const data::DatasetPair& data;
  Collective* collective;  // the job's, or `owned` once re-formed
  nn::DeviceOptimizer& optimizer;
  MetricsWriter& metrics;
  Logger& log;
  std::vector<float> staging;  // host gradients when the collective cannot read the backend's memory
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  TrainResult result;
  double last_compute_s = 0.0;
  Straggler straggler;
  bool buckets_logged = false;
  std::vector<float> simulated_grads;  // simulated compute: the gradients every step (empty otherwise)
  TraceRecorder* trace = nullptr;
  NonFiniteGuard guard;
  std::vector<float> check_grads;      // "skip" on a GPU without staging: the averaged gradients, to check
  const ReformCollective* reform = nullptr;  // makes the collective of a new generation (re-forms, membership changes)
  std::unique_ptr<Collective> owned;   // the collective re-formed (without dropped workers, or at a membership change)
  std::vector<int> live;               // workers' ranks still in the job, ascending
  std::size_t forming = 0;             // the size of the collective in use or being formed (live before drops)
  bool formation = false;              // a collective being formed: until its first resync completed
  // Ranks the scheduler announced dropped and not taken back (grow_collective): a decided change's
  // members that are among them are left out of its collective (their drop may come before the boundary).
  std::set<int> dropped;
  int generation = 0;
  EpochMembers* members = nullptr;  // each epoch's workers (recorded in checkpoints)
  // The last collective phase this replica completed (replica_resync.h: step
  // s is 4s + 1, the checkpoint after it 4s + 2, the check after an epoch
  // ending at n steps 4n); a phase at or before it is not run again (after a
  // re-form took a replica further on).
  std::int64_t done = -1;
  std::vector<float> checkpoint_token{};  // the checkpoint's collective operation (kept: it may outlive a failed wait)
  std::map<int, std::int64_t> rejoined{};  // "restart": workers heard to have rejoined (rank -> take), not yet taken in
  // Elastic membership (allreduce_elastic.cc): set once the first step runs
  // (its next_step() is this worker's answer to a change), the changes
  // answered whose decision is not read yet, and the decided changes whose
  // boundary step is still ahead.
  const EpochDriver* driver = nullptr;
  std::vector<std::int64_t> answered{};
  std::int64_t changes_known = 0;  // the highest change whose decision this worker has (told to a rejoiner)
  std::vector<std::pair<std::int64_t, MembershipDecision>> boundaries{};  // (change, decision)
  bool reforms_on_failure = false;  // cluster.on_worker_failure "continue"/"restart": a failure re-forms
};

// Whether this worker evaluates and writes the final weights: worker 0, or
// the lowest worker left once it has been dropped.
inline bool leads(const Loop& L) { return !L.live.empty() && L.live.front() == L.session.rank(); }

inline bool staged(const Loop& L) { return L.collective->device_memory() != L.model.backend().is_cuda(); }

// Runs `op` on a copy of `host` in the collective's memory space, then copies back.
void on_collective_memory(Loop& L, std::span<float> host, const std::function<void(float*)>& op);
// Waits for every started collective operation, handling the scheduler's
// messages meanwhile (an abort, a drop: TransportError when re-forming may follow).
void wait_collective(Loop& L);
// After a resync: the manifest of a checkpoint whose operation another replica completed.
void complete_missed_checkpoint(Loop& L);

// ---- Elastic membership (allreduce_elastic.cc) ---------------------------------

// Answers, without waiting, every membership change the scheduler announced
// since the last call: the next step this worker runs (nothing before the
// first step). Called at a step's end and while waiting for the collective,
// so a worker held in an allreduce by a peer that waits for the decision
// answers all the same (`waiting`: the step in progress completes, its
// next one is the answer).
void answer_changes(Loop& L, bool waiting);
// At a step's end (after its checkpoint): answers what is new, reads the
// decision of every change answered (waiting for it: the others answer at
// their step's end or while they wait for this worker), adds its segment to
// the epoch's members, and when the next step is a decided boundary
// re-forms the collective with that change's members under the next
// generation (resync_replicas: a joiner takes the lowest rank's weights and
// optimizer state). A boundary due now is taken before waiting for a later
// decision (which may need the answer of a joiner not yet in the
// collective). A worker the change leaves out does not re-form: the
// EpochDriver retires it at the boundary.
void settle_changes(Loop& L);

// ---- The re-forming collective (allreduce_reform.cc) --------------------------

// Whether rejoined workers are taken back into the collective (cluster.on_worker_failure = "restart").
bool grows(const Loop& L);
// The replica check at an epoch's end; returns the rejoined workers all
// replicas take in there (rank -> take), under "restart".
std::map<int, std::int64_t> check_replicas(Loop& L, const char* when);
// "restart": takes `joiners` into the collective after `steps_done` steps.
void grow_collective(Loop& L, const std::map<int, std::int64_t>& joiners, std::int64_t steps_done);
// Every replica takes the most advanced one's state; returns the leader's worker rank.
int resync_replicas(Loop& L);
// Takes the drops the scheduler announced: each into L.dropped and out of
// L.live; true when one was in L.live.
bool take_drops(Loop& L);
// Under "continue"/"restart": takes the drops the scheduler announced; when
// one was a worker of `live` (the collective in use or being formed), throws
// TransportError, which in_collective answers by re-forming without it.
void check_dropped(Loop& L);
// The collective of the next generation among `live` (this worker in it),
// its rendezvous ended by a drop (check_dropped).
void form_collective(Loop& L);
// After the collective failed with `why`: true once it has been re-formed
// among the workers the scheduler has not dropped (it waits for the drop,
// retry_until watching the scheduler) and the replicas resynced; false when
// it cannot be (no reform, or nobody was dropped in time). A member lost
// while it re-forms (in the rendezvous or the resync) is waited for and left
// out the same way, under the generation after. A collective that failed
// while it formed (L.formation) with nobody dropped is formed again among
// the same workers (settle_failed_forming, allreduce_worker.h).
bool reform_collective(Loop& L, const std::string& why);

// After the collective failed with `why`: under "continue"/"restart" the
// re-form (reform_collective: true once re-formed); under "abort" false,
// after hearing the scheduler out (allreduce_worker.cc: its abort naming the
// failed worker, or its silence, ends this worker with that reason first).
bool recover_collective(Loop& L, const std::string& why);

// Runs `phase` of the collective: when the collective fails in it (a peer
// gone: TransportError, TimeoutError), re-forms it among the workers left
// (reform_collective; the replicas take the most advanced one) and runs the
// phase again, which skips what the replica taken had completed (L.done).
// Rethrows when the collective cannot be re-formed.
template <class Phase>
void in_collective(Loop& L, Phase&& phase) {
  for (;;) {
    try {
      phase();
      return;
    } catch (const TransportError& e) {
      if (!recover_collective(L, e.what())) throw;
    } catch (const TimeoutError& e) {
      if (!recover_collective(L, e.what())) throw;
    }
  }
}

}  // namespace pstrain::allreduce_detail
