#include "scheduler/membership_change.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <sstream>

#include "common/base/errors.h"
#include "common/wire/protocol.h"

namespace pstrain {

StepPosition parse_step_position(const std::string& text) {
  if (text == "end") return StepPosition{0, 0, true};
  std::istringstream in(text);
  StepPosition p;
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  const auto number = [](const std::string& w, std::int64_t& out) {
    const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), out);
    return ec == std::errc() && end == w.data() + w.size() && out >= 0;
  };
  std::int64_t epoch = 0;
  const bool ok = (words.size() == 2 || words.size() == 3) && number(words[0], epoch) && number(words[1], p.step) &&
                  epoch <= std::numeric_limits<int>::max() && (words.size() == 2 || number(words[2], p.global));
  if (!ok) {
    throw ProtocolError("membership answer '" + text.substr(0, 64) +
                        "': expected '<epoch> <step> [<global step>]' (the next step this worker runs) or 'end'");
  }
  p.epoch = static_cast<int>(epoch);
  return p;
}

std::optional<MembershipBoundary> choose_boundary(const std::vector<StepPosition>& answers) {
  std::optional<MembershipBoundary> b;
  for (const StepPosition& p : answers) {
    if (p.end) return std::nullopt;  // it trained its shards to the end under the split it had
    if (!b || p.epoch > b->epoch || (p.epoch == b->epoch && p.step > b->from_step)) {
      b = MembershipBoundary{p.epoch, p.step, p.global};
    }
  }
  if (b && b->from_step < 1) {  // an epoch's step 0 is its first segment: one step later
    b->from_step = 1;
    if (b->global_step >= 0) b->global_step += 1;
  }
  return b;
}

std::string format_decision(const std::optional<MembershipBoundary>& boundary, const std::vector<int>& members,
                            const std::string& reason) {
  if (!boundary) return "none";
  std::string text = std::to_string(boundary->epoch) + " " + std::to_string(boundary->from_step) + " ";
  for (std::size_t i = 0; i < members.size(); ++i) text += (i > 0 ? "," : "") + std::to_string(members[i]);
  return reason.empty() ? text : text + " " + reason;
}

void MembershipChange::add_member(int rank) {
  if (std::find(members_.begin(), members_.end(), rank) != members_.end()) return;
  members_.insert(std::upper_bound(members_.begin(), members_.end(), rank), rank);
}

void MembershipChange::remove_member(int rank) { std::erase(members_, rank); }

std::string MembershipChange::report_key(int rank) const {
  return std::string(kMembershipPrefix) + std::to_string(id_) + "/" + std::to_string(rank);
}

std::string MembershipChange::decision_key() const { return std::string(kMembershipPrefix) + std::to_string(id_); }

void MembershipChange::answer(int rank, const std::string& key, const std::string& value) {
  if (key != report_key(rank)) {
    throw ProtocolError("store set of key '" + key.substr(0, 80) + "' by worker " + std::to_string(rank) +
                        ": under '" + std::string(kMembershipPrefix) + "' a worker sets only its answer to the pending "
                        "change, '" + report_key(rank) + "'");
  }
  answers_[rank] = parse_step_position(value);
}

bool MembershipChange::answered_by(const std::vector<int>& live, const std::vector<int>& finished) const {
  return std::all_of(live.begin(), live.end(), [&](int r) {
    return answers_.count(r) != 0 || std::find(finished.begin(), finished.end(), r) != finished.end();
  });
}

std::optional<MembershipBoundary> MembershipChange::boundary(const std::vector<int>& live) const {
  std::vector<StepPosition> answers;
  for (const int r : live) {
    const auto it = answers_.find(r);
    answers.push_back(it != answers_.end() ? it->second : StepPosition{0, 0, true});  // finished: no step left
  }
  return choose_boundary(answers);
}

}  // namespace pstrain
