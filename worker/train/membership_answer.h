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

// Reads the scheduler's news without waiting, then answers every change
// announced since the last call (rank = this worker's, next = where it is)
// and adds each decided segment to `members`. Waits at most timeout_ms for
// each decision (the slowest worker's next step boundary).
void answer_membership_changes(SchedulerClient& scheduler, int rank, const EpochDriver::NextStep& next,
                               EpochMembers& members, int timeout_ms, Logger& log);

}  // namespace pstrain
