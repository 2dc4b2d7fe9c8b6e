// Making the replicas of an allreduce job one again after the collective was
// re-formed without a failed worker (cluster.on_worker_failure = "continue").
//
// When a peer dies in the middle of an operation, the survivors need not
// stop at the same point: one may have completed step s (its allreduce got
// every piece before the peer died) while another failed in it, or one may be
// past the replica check at an epoch's end while another is still before it.
// If each then simply repeated "its" step, their operations in the new
// collective would be out of step (Gloo: a 7852-byte bucket segment arriving
// where a 4-byte check was posted, std::terminate), and the one that had
// applied step s would see it applied again.
//
// So every decision after a re-form is taken from values all survivors
// agree on. The first operation of the new collective is an exchange of each
// replica's progress (below); the most advanced replica (the lowest rank
// among equals) is the leader; every replica takes its weights, optimizer
// state, optimizer step count and progress, and then skips the phases the
// leader had already completed (their updates are in the leader's weights).
// The sizes broadcast are agreed as well, so a replica whose optimizer state
// has another size is an error on every rank, not a desynchronized stream.
//
// Progress is a position in the job's sequence of collective phases, the
// same on every replica: step s is at 4s + 1, the checkpoint taken after it
// (when one is due after s + 1 steps) at 4s + 2, the replica check at the end
// of an epoch after n steps in all at 4n (in that order in the job). `done`
// is the last completed one (-1 before any; the checkpoint's phase before
// first_step, 4 * first_step - 2, when resuming at first_step). A checkpoint
// is a phase of its own because its last act is a collective operation taken
// after every replica wrote its part: a replica that completed it (or whose
// leader did) skips it after a re-form, as all its parts exist.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "worker/collective/collective.h"

namespace pstrain {

constexpr std::int64_t step_phase(std::int64_t step) { return 4 * step + 1; }
constexpr std::int64_t checkpoint_phase(std::int64_t step) { return 4 * step + 2; }  // after step `step`
constexpr std::int64_t epoch_check_phase(std::int64_t steps_done) { return 4 * steps_done; }
// The phase a replica resumed at `first_step` has completed last.
constexpr std::int64_t resumed_phase(std::int64_t first_step) { return checkpoint_phase(first_step - 1); }

struct ReplicaState {
  std::int64_t done = -1;             // the last completed phase (see above)
  std::int64_t optimizer_steps = 0;   // updates the optimizer has applied
  std::vector<float> params;          // the model's weights, host copy
  std::vector<float> optimizer_state; // its state (velocity, moments), host copy
};

struct ResyncOutcome {
  int leader = 0;              // the collective rank whose replica everyone took
  std::int64_t own_done = -1;  // this replica's progress before the resync
};

// Runs `op` on a copy of `host` in the collective's memory space (then copies
// back); the default passes the host memory itself (Gloo).
using OnCollectiveMemory = std::function<void(std::span<float> host, const std::function<void(float*)>& op)>;

// Collective over `collective`'s ranks (every rank calls it at the same
// point, as the first operation after a re-form): exchanges the replicas'
// progress, picks the leader and replaces `state` by the leader's. Throws
// ComputeError on every rank when the replicas' parameter or optimizer state
// sizes differ (nothing is broadcast then).
// `wait`, if set, waits for the progress exchange once started (the
// caller's wait, which may end it at a peer's drop the scheduler announces:
// allreduce_loop.h wait_collective); empty: allreduce_mean's own wait.
ResyncOutcome resync_from_leader(Collective& collective, ReplicaState& state, const OnCollectiveMemory& on_memory = {},
                                 const std::function<void()>& wait = {});

}  // namespace pstrain
