// Elastic membership's step boundary (docs/architecture.md, "Elastic
// membership"): the scheduler's pure part of a change of the job's workers.
// A change is announced to every live worker (kMembershipChange); each
// answers, at its next step boundary, where it is (the store key
// kMembershipPrefix + "<change>/<rank>", common/wire/protocol.h), and waits.
// Once every live worker has answered (or has no step left), the boundary is
// the most advanced answer: no worker has run that step yet, so the change
// can take effect there on every worker. Pure: no sockets, no clock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pstrain {

// Where a worker is: the next step it runs is step `step` (counted within
// the epoch) of epoch `epoch`, the job's step `global` (-1: not said);
// `end`: it has no step left.
struct StepPosition {
  int epoch = 0;
  std::int64_t step = 0;
  bool end = false;
  std::int64_t global = -1;
};

// "<epoch> <step>", "<epoch> <step> <global>" or "end"; ProtocolError naming the text otherwise.
StepPosition parse_step_position(const std::string& text);

// From step `from_step` of epoch `epoch` the workers `members` share the
// rest of the epoch.
struct MembershipBoundary {
  int epoch = 0;
  std::int64_t from_step = 1;
  std::int64_t global_step = -1;  // the same step in the job's numbering (-1: not known)
};

// The boundary ahead of every answer: the most advanced (epoch, step), and
// at least the epoch's step 1 (an epoch's step 0 is its first segment,
// fixed by its members' key). nullopt when any worker has no step left
// ("end"): it trained its shard of every epoch to the end under the split it
// had, so no step is ahead of it, and re-splitting the rest among the others
// would train some samples twice and others never (async: a worker that
// finished while another lagged epochs behind; before, the laggard alone
// re-split its epoch, and the next one, fixed with the old members, read as
// a "rejoin" in summary.json: tests/integration/elastic_grow_test.cc).
std::optional<MembershipBoundary> choose_boundary(const std::vector<StepPosition>& answers);

// The decision's text (the value of kMembershipPrefix + "<change>"):
// "<epoch> <from_step> <members>", then " <reason>" when one is given
// (why the members changed: "ctl", "join", "retire"), or "none".
std::string format_decision(const std::optional<MembershipBoundary>& boundary, const std::vector<int>& members,
                            const std::string& reason = "");

// One pending change: its number, the members it leads to, the answers so far.
class MembershipChange {
 public:
  MembershipChange(std::int64_t id, std::vector<int> members, std::string reason)
      : id_(id), members_(std::move(members)), reason_(std::move(reason)) {}
  std::int64_t id() const { return id_; }
  const std::vector<int>& members() const { return members_; }
  const std::string& reason() const { return reason_; }
  // A joiner registered while the answers are still coming: it joins at the
  // same boundary. Removed again when it leaves before the boundary.
  void add_member(int rank);
  void remove_member(int rank);
  // The report key of worker `rank` for this change, and the decision's key.
  std::string report_key(int rank) const;
  std::string decision_key() const;
  // Worker `rank` set store key `key` to `value`: its answer when the key is
  // its report key (ProtocolError for a malformed one); ProtocolError for
  // any other key under kMembershipPrefix (a worker cannot set the
  // decision or answer for another).
  void answer(int rank, const std::string& key, const std::string& value);
  // Whether every worker of `live` answered or is in `finished` (done, or
  // waiting at the job's last barrier: no step left).
  bool answered_by(const std::vector<int>& live, const std::vector<int>& finished) const;
  // The boundary from the answers of `live`; a worker of `live` without an
  // answer is finished (answered_by), so none.
  std::optional<MembershipBoundary> boundary(const std::vector<int>& live) const;

 private:
  std::int64_t id_;
  std::vector<int> members_;
  std::string reason_;
  std::map<int, StepPosition> answers_;
};

}  // namespace pstrain
