// Elastic membership in allreduce mode (docs/architecture.md, "Elastic
// membership"): an allreduce worker's answer to a change the scheduler
// announces (kMembershipChange), and the collective re-formed at the
// decided step boundary with the change's members.
//
// The answer is the PS workers' (membership_answer.h: the next step this
// worker runs), but in allreduce every step needs every member, so a worker
// that answered and waits for the decision holds up the others' next
// allreduce. They answer while they wait for it (wait_collective calls
// answer_changes): the step they are in completes once the decision is out,
// so their next step is a true answer, and the boundary, the most advanced
// answer, is a step no worker has run. At the boundary the members form the
// next generation's collective among themselves; the workers it leaves out
// have run every step before it and retire (the EpochDriver ends their run).
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/node/scheduler_client.h"
#include "common/wire/protocol.h"
#include "worker/train/allreduce_loop.h"

namespace pstrain::allreduce_detail {
namespace {

std::string change_key(std::int64_t change) { return std::string(kMembershipPrefix) + std::to_string(change); }

// A grow: the lowest member that was in the collective (`before`) tells the
// joiners the collective of the new generation (L.live, L.generation) and the
// step it starts at, under allreduce_grow_key(change) (allreduce_worker.h).
void publish_grow(Loop& L, std::int64_t change, const std::vector<int>& before) {
  const auto old = [&](int r) { return std::find(before.begin(), before.end(), r) != before.end(); };
  if (std::all_of(L.live.begin(), L.live.end(), old)) return;  // nobody joins
  const auto publisher = std::find_if(L.live.begin(), L.live.end(), old);
  if (publisher == L.live.end() || *publisher != L.session.rank()) return;
  const AllreduceJoin join{L.live, L.generation, L.driver->next_step().global};
  L.session.scheduler().store_set(allreduce_grow_key(change), format_join(join));
}

// The collective of the next generation with `members` (this worker among
// them), every replica then the most advanced one's (the lowest rank among
// equals: worker `members[0]` for a shrink, and what a joiner takes). A
// member lost meanwhile, before or in the rendezvous or in the resync, is
// noticed at its drop (form_collective's watch, the resync's wait) and left
// out: the others re-form without it under the generation after, once
// (reform_collective), as a joiner does (allreduce_node.cc, start_replicas).
void resize_collective(Loop& L, std::int64_t change, const MembershipDecision& d) {
  const int me = L.session.rank();
  const auto at = std::find(d.members.begin(), d.members.end(), me);
  if (at == d.members.end()) return;  // left out: it retires at the boundary
  const std::vector<int> before = L.live;
  L.collective = nullptr;
  L.owned.reset();
  if (L.reforms_on_failure) take_drops(L);
  L.live = d.members;  // less the members dropped since the decision: none of them forms it
  std::erase_if(L.live, [&L](int r) { return L.dropped.count(r) != 0; });
  ++L.generation;
  publish_grow(L, change, before);
  L.log.info("membership change at epoch " + std::to_string(d.epoch) + " step " + std::to_string(d.from_step) +
             ": the collective re-formed from workers " + format_members(before) + " to " +
             format_members(L.live) + ", this one rank " +
             std::to_string(std::find(L.live.begin(), L.live.end(), me) - L.live.begin()) + " of " +
             std::to_string(L.live.size()) + ", generation " + std::to_string(L.generation));
  int leader = L.live.front();
  try {
    form_collective(L);
    leader = resync_replicas(L);
  } catch (const TransportError& e) {
    if (!reform_collective(L, e.what())) throw;
    return;  // it said whose weights the replicas took
  } catch (const TimeoutError& e) {
    if (!reform_collective(L, e.what())) throw;
    return;
  }
  L.log.info("replicas took worker " + std::to_string(leader) + "'s weights and optimizer state");
}

// Re-forms the collective for every decided change whose boundary is the
// next step; false when one leaves this worker out (it retires there).
bool resize_if_due(Loop& L) {
  const EpochDriver::NextStep& next = L.driver->next_step();
  for (auto it = L.boundaries.begin(); it != L.boundaries.end();) {
    if (next.end || it->second.epoch != next.epoch || it->second.from_step != next.step) {
      ++it;
      continue;
    }
    const std::vector<int>& members = it->second.members;
    const bool stays = std::find(members.begin(), members.end(), L.session.rank()) != members.end();
    resize_collective(L, it->first, it->second);
    it = L.boundaries.erase(it);
    if (!stays) return false;
  }
  return true;
}

}  // namespace

void answer_changes(Loop& L, bool waiting) {
  if (L.driver == nullptr) return;
  SchedulerClient& scheduler = L.session.scheduler();
  for (const std::int64_t change : scheduler.take_membership_changes()) {
    const std::string answer = format_answer(L.driver->next_step());
    scheduler.store_set(change_key(change) + "/" + std::to_string(L.session.rank()), answer);
    L.answered.push_back(change);
    L.log.info("membership change " + std::to_string(change) + ": answered '" + answer + "' (the next step)" +
               (waiting ? " while waiting for the collective" : " at the step's end"));
  }
}

void settle_changes(Loop& L) {
  SchedulerClient& scheduler = L.session.scheduler();
  scheduler.drain_incoming();  // a change announced while this step needed no wait
  answer_changes(L, false);
  // A boundary due now is taken before waiting for a later change's decision:
  // that decision may need a joiner's answer, which it gives only once it is
  // in the collective (in its first step).
  if (!resize_if_due(L)) return;
  while (!L.answered.empty()) {
    const std::int64_t change = L.answered.front();
    L.answered.erase(L.answered.begin());
    const std::optional<MembershipDecision> d =
        parse_decision(scheduler.store_get(change_key(change), L.config.cluster.timeout_ms));
    L.changes_known = std::max(L.changes_known, change);
    if (!d) {
      L.log.info("membership change " + std::to_string(change) + ": no step left to change");
      continue;
    }
    if (L.reform == nullptr) {
      throw ConfigError("membership change " + std::to_string(change) +
                        ": this allreduce worker cannot form a new collective (no collective factory)");
    }
    L.members->add_segment(d->epoch, d->from_step, d->members, d->reason);
    L.log.info("membership change " + std::to_string(change) + ": from epoch " + std::to_string(d->epoch) + " step " +
               std::to_string(d->from_step) + " workers " + format_members(d->members));
    L.boundaries.emplace_back(change, *d);
    if (!resize_if_due(L)) return;
  }
}

}  // namespace pstrain::allreduce_detail
