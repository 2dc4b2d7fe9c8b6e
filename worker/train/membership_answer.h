// A worker's answer to the elastic membership changes the scheduler
// announces (kMembershipChange; docs/architecture.md, "Elastic membership"):
// at a step boundary it tells the scheduler the next step it runs, waits
// for the change's boundary (every live worker's answer decides it: the
// most advanced, which no worker has run yet), and adds that segment to its
// epoch's members: the EpochDriver then re-splits the rest of the epoch, or
// retires this worker there when the change leaves it out.
#pragma once

#include <optional>
#include <string>

#include "common/base/log.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/epoch_members.h"

namespace pstrain {

class SchedulerClient;

// "<epoch> <step> <global step>" or "end": the store value of a worker's answer.
std::string format_answer(const EpochDriver::NextStep& next);

// The scheduler's decision "<epoch> <from_step> <members> [<reason>]" (nullopt for
// "none": no step was left to change); ProtocolError naming the text else.
struct MembershipDecision {
  int epoch = 0;
  std::int64_t from_step = 1;
  std::vector<int> members;
  std::string reason;  // "ctl", "join", "retire"; empty when the decision names none
};
std::optional<MembershipDecision> parse_decision(const std::string& text);

// A worker's answers at each step boundary, after the step's pushes:
// answer() reads the scheduler's news without waiting and answers every
// change announced since with the step after its next one (`after`),
// promising to wait for the decision before that step, not before its next
// one; then the step's checkpoint, if one is due; then settle() waits (at
// most timeout_ms) for the decisions due now (those answered at the previous
// boundary) and adds each decided segment to `members`. Answering before the
// checkpoint's barrier: a worker waiting for a decision does not reach that
// barrier, and one that waited there before answering would never answer. So a worker that heard of a change pushes
// one more step before it waits: in sync (and ssp) a worker a step ahead,
// which passed its boundary before the news reached it and waits in its next
// pull for that push, reaches its next boundary and answers too (waiting at
// once would hold the push it waits for, and neither would go on). When
// there is no step after the next one (`after.end`) it answers `next` and
// waits at once, as it has no step to run past a boundary.
//
// Every wait of the boundary answers too: a change announced while this
// worker waits in the step's checkpoint barrier is answered there
// (answer_heard, from SchedulerClient::barrier's on_news) with the same
// answer and promise as answer() gives, since a worker behind, which
// answered before and waits for the decision at a boundary before that
// checkpoint, cannot reach the barrier until the decision is out.
class MembershipAnswers {
 public:
  void answer(SchedulerClient& scheduler, int rank, const EpochDriver::NextStep& next,
              const EpochDriver::NextStep& after);
  // Answers the changes heard since (take_membership_changes), without
  // reading the scheduler's news: answer()'s second half.
  void answer_heard(SchedulerClient& scheduler, int rank, const EpochDriver::NextStep& next,
                    const EpochDriver::NextStep& after);
  // A joiner's answer before its first step S, from the barrier of the
  // checkpoint at S it takes first (worker/train/ps_join.h): every change
  // heard since is answered with `after_first`, the step after S (the
  // driver's next_step() while S's step function runs; `end` when S is the
  // job's last), due at the boundary after S: the answer and promise a
  // worker gives at the boundary before S. S itself it cannot answer (its
  // own change's segment starts there, and a second one at the same step is
  // refused), and it cannot wait to answer at that boundary: a worker behind
  // may wait for this decision before it reaches the barrier.
  void answer_ahead(SchedulerClient& scheduler, int rank, const EpochDriver::NextStep& after_first);
  void settle(SchedulerClient& scheduler, EpochMembers& members, int timeout_ms, Logger& log);

 private:
  // Sets this worker's answer to `change`: the step `at` (format_answer).
  static void set_answer(SchedulerClient& scheduler, std::int64_t change, int rank, const EpochDriver::NextStep& at);
  std::vector<std::int64_t> due_;       // decisions to wait for at this boundary's settle()
  std::vector<std::int64_t> answered_;  // answered one step ahead: due at the next boundary
};

}  // namespace pstrain
