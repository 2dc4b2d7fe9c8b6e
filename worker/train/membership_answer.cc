#include "worker/train/membership_answer.h"

#include <sstream>
#include <utility>

#include "common/base/errors.h"
#include "common/node/scheduler_client.h"
#include "common/wire/protocol.h"

namespace pstrain {

std::string format_answer(const EpochDriver::NextStep& next) {
  if (next.end) return "end";
  return std::to_string(next.epoch) + " " + std::to_string(next.step) + " " + std::to_string(next.global);
}

std::optional<MembershipDecision> parse_decision(const std::string& text) {
  if (text == "none") return std::nullopt;
  std::istringstream in(text);
  MembershipDecision d;
  std::string members, rest;
  const bool ok = static_cast<bool>(in >> d.epoch >> d.from_step >> members) && d.epoch >= 0 && d.from_step >= 1;
  if (ok && in >> d.reason && (d.reason.size() > 16 || d.reason.find_first_not_of("abcdefghijklmnopqrstuvwxyz") != std::string::npos)) {
    d.reason = "?";  // refused below
  }
  if (!ok || d.reason == "?" || (in >> rest)) {
    throw ProtocolError("membership decision '" + text.substr(0, 64) +
                        "': expected '<epoch> <from_step> <members> [<reason>]' or 'none'");
  }
  d.members = parse_members(members);
  return d;
}

namespace {
// Waits for change `change`'s decision and adds its segment to `members`.
void take_decision(SchedulerClient& scheduler, std::int64_t change, EpochMembers& members, int timeout_ms,
                   Logger& log) {
  {
    const std::string key = std::string(kMembershipPrefix) + std::to_string(change);
    const std::optional<MembershipDecision> d = parse_decision(scheduler.store_get(key, timeout_ms));
    if (!d) {
      log.info("membership change " + std::to_string(change) + ": no step left to change");
      return;
    }
    members.add_segment(d->epoch, d->from_step, d->members, d->reason);
    log.info("membership change " + std::to_string(change) + ": from epoch " + std::to_string(d->epoch) + " step " +
             std::to_string(d->from_step) + " workers " + format_members(d->members));
  }
}
}  // namespace

void MembershipAnswers::answer(SchedulerClient& scheduler, int rank, const EpochDriver::NextStep& next,
                               const EpochDriver::NextStep& after) {
  due_ = std::exchange(answered_, {});  // answered at the previous boundary: its promise is the next step
  scheduler.drain_incoming();            // a change announced while this step needed no wait
  answer_heard(scheduler, rank, next, after);
}

void MembershipAnswers::answer_heard(SchedulerClient& scheduler, int rank, const EpochDriver::NextStep& next,
                                     const EpochDriver::NextStep& after) {
  for (const std::int64_t change : scheduler.take_membership_changes()) {
    const bool one_ahead = !next.end && !after.end;
    set_answer(scheduler, change, rank, one_ahead ? after : next);
    (one_ahead ? answered_ : due_).push_back(change);
  }
}

void MembershipAnswers::answer_ahead(SchedulerClient& scheduler, int rank, const EpochDriver::NextStep& after_first) {
  for (const std::int64_t change : scheduler.take_membership_changes()) {
    set_answer(scheduler, change, rank, after_first);
    answered_.push_back(change);  // due at the boundary after the first step (answer() moves it)
  }
}

void MembershipAnswers::set_answer(SchedulerClient& scheduler, std::int64_t change, int rank,
                                   const EpochDriver::NextStep& at) {
  scheduler.store_set(std::string(kMembershipPrefix) + std::to_string(change) + "/" + std::to_string(rank),
                      format_answer(at));
}

void MembershipAnswers::settle(SchedulerClient& scheduler, EpochMembers& members, int timeout_ms, Logger& log) {
  for (const std::int64_t change : std::exchange(due_, {})) take_decision(scheduler, change, members, timeout_ms, log);
}

}  // namespace pstrain
