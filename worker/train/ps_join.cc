#include "worker/train/ps_join.h"

#include <charconv>
#include <sstream>
#include <vector>

#include "common/base/errors.h"
#include "common/node/scheduler_client.h"
#include "common/wire/protocol.h"
#include "worker/train/membership_answer.h"
#include "worker/train/metrics.h"

namespace pstrain {

std::optional<JoinStart> parse_join_start(const std::string& text) {
  if (text == "none") return std::nullopt;
  std::istringstream in(text);
  std::vector<std::int64_t> v;
  for (std::string w; in >> w;) {
    std::int64_t x = -1;
    const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), x);
    if (ec != std::errc() || end != w.data() + w.size() || x < 0) v.assign(6, 0);  // refused below
    v.push_back(x);
  }
  if (v.size() != 6 || v[0] < 1 || v[1] > (std::int64_t{1} << 30) || v[2] < 1 || v[5] > 1) {
    throw ProtocolError("join start '" + text.substr(0, 64) +
                        "': expected '<change> <epoch> <from_step> <global_step> <barrier_seq> <0|1>' or 'none'");
  }
  return JoinStart{v[0], static_cast<int>(v[1]), v[2], v[3], v[4], v[5] == 1};
}

std::optional<JoinStart> wait_for_join_start(SchedulerClient& scheduler, int timeout_ms, Logger& log) {
  const std::string key =
      std::string(kJoinStartPrefix) + std::to_string(scheduler.rank()) + "/" + scheduler.token();
  log.info("joined slot " + std::to_string(scheduler.rank()) + ": waiting for the membership change's boundary");
  const std::optional<JoinStart> start = parse_join_start(scheduler.store_get(key, timeout_ms));
  if (start) scheduler.continue_barriers_at(start->barrier_seq);
  return start;
}

void learn_join_segments(SchedulerClient& scheduler, const JoinStart& start, EpochMembers& members, int timeout_ms) {
  for (std::int64_t c = 1; c <= start.change; ++c) {
    const std::string text = scheduler.store_get(std::string(kMembershipPrefix) + std::to_string(c), timeout_ms);
    if (const std::optional<MembershipDecision> d = parse_decision(text)) {
      members.add_segment(d->epoch, d->from_step, d->members, d->reason);
    }
  }
}

std::int64_t learn_decided_segments(SchedulerClient& scheduler, EpochMembers& members) {
  for (std::int64_t c = 1;; ++c) {
    std::string text;
    try {
      text = scheduler.store_get(std::string(kMembershipPrefix) + std::to_string(c), 1);
    } catch (const SchedulerRefusal&) {
      return c - 1;  // not decided (or not announced): the others' next change is announced to this worker too
    }
    if (const std::optional<MembershipDecision> d = parse_decision(text)) {
      members.add_segment(d->epoch, d->from_step, d->members, d->reason);
    }
  }
}

void write_join_record(MetricsWriter& metrics, const JoinStart& start) {
  metrics.write(JsonLine().add("type", "join").add("time_s", metrics.elapsed_s()).add("step", start.global_step)
                    .add("epoch", start.epoch).add("job_s", metrics.job_s()));
}

}  // namespace pstrain
