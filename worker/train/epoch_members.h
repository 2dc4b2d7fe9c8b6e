// Which workers share the training set in an epoch (cluster.on_worker_failure
// = "continue": from the epoch after a drop, the survivors' shards cover the
// whole training set).
//
// The rule: the members of epoch E are the workers the scheduler had not
// dropped when the first worker asked for epoch E (the scheduler answers the
// reserved store key epoch_members_key(E) from its live set once, then
// every later asker gets the same answer; common/node/scheduler_client.h). Every
// live worker therefore shards epoch E the same way, however late it asks:
// the workers are ordered by rank and worker r takes the ShardSampler shard
// of its position among them (W members: position p of W). With no drop the
// members are 0..N-1 and the shards are the ones of a fixed (rank, N) split,
// bit for bit. A drop the scheduler decides after the first ask for epoch E
// (e.g. a worker killed right at the boundary, before the heartbeat timeout)
// leaves its shard of epoch E untrained; epoch E+1 covers it.
//
// The answers so far are kept as a history (a checkpoint stores it, so a
// resumed run shards the epochs it already began the same way); a resumed
// run asks the scheduler only for the epochs after the history.
//
// Elastic membership (docs/architecture.md, "Elastic membership"): an epoch
// is a list of segments, each "from step S of the epoch, members M". The
// first (S = 0) is the answer above; a membership change the scheduler
// announces adds one (add_segment), and worker/train/epoch_split.h splits
// the rest of the epoch's permutation among the new members. An epoch
// without a change has its one segment, as before.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pstrain {

class SchedulerClient;

// The scheduler's store key whose first get is answered with the live workers.
std::string epoch_members_key(int epoch);
// "0,2,3" <-> {0, 2, 3}; parse throws ProtocolError on anything else
// (empty, unsorted, repeated or negative ranks).
std::string format_members(const std::vector<int>& members);
std::vector<int> parse_members(const std::string& text);

// The workers of a history's last segment (flat, as EpochMembers::history):
// those training at a checkpoint's step when it is the checkpoint's
// (history_before). Empty for an empty history; CheckpointError for one not
// of that form.
std::vector<int> last_members(const std::vector<std::int64_t>& history);

// The lowest-ranked worker the scheduler has not dropped, asked now
// (kLiveWorkersKey): the one that completes a PS checkpoint's manifest.
int lowest_live_worker(SchedulerClient& scheduler, int timeout_ms);

// This worker's place in an epoch's split: shard `position` of `replicas`.
// A worker that is not a member (only after --resume of a checkpoint taken
// after a drop, while the epoch in progress finishes) walks the shard of
// position rank % W: the same number of steps as the members, whose samples
// it repeats. ConfigError when members is empty.
struct EpochShard {
  int position = 0;
  int replicas = 1;
  bool member = true;
};
EpochShard epoch_shard(const std::vector<int>& members, int rank);

// From the epoch's step `from_step` (its steps before it, 0 = its start) the
// epoch's remaining samples are split among `members` (ranks ascending).
// `reason`: why the members changed there ("ctl", "join", "retire"; empty
// when not known, e.g. read from a checkpoint): recorded, never compared.
struct EpochSegment {
  std::int64_t from_step = 0;
  std::vector<int> members;
  std::string reason{};
  bool operator==(const EpochSegment& o) const { return from_step == o.from_step && members == o.members; }
};

class EpochMembers {
 public:
  using AskFn = std::function<std::vector<int>(int epoch)>;
  // `ask` gives epoch E's members the first time E is needed (the scheduler
  // in a job; a fixed answer in tests). `history`: the answers of a
  // checkpoint (flat [epoch, count, ranks...]* for each epoch's first
  // segment, and [epoch, -from_step, count, ranks...] for each later one,
  // after its epoch's earlier ones; a checkpoint from before elastic
  // membership has only the first kind; empty for a new run).
  // CheckpointError for a history that is not of that form.
  explicit EpochMembers(AskFn ask, std::vector<std::int64_t> history = {});
  // The workers of `epoch`'s start (its first segment): from the history,
  // else asked once and remembered.
  const std::vector<int>& of(int epoch);
  // Every segment of `epoch` known so far, from_step increasing (asks for
  // the first as of() does).
  const std::vector<EpochSegment>& segments(int epoch);
  // A membership change: from the epoch's step `from_step` (>= 1) `members`
  // (non-empty, ranks ascending) share the rest of `epoch`. Returns false
  // (nothing changes) for the same change heard again; ProtocolError for a
  // change at or before the epoch's last known segment, or no members.
  bool add_segment(int epoch, std::int64_t from_step, std::vector<int> members, std::string reason = "");
  // Everything answered so far, flat as taken by the constructor.
  std::vector<std::int64_t> history() const;
  // The part of history() in effect before step `step` of epoch `epoch`: the
  // segments from earlier steps only (a checkpoint's, taken there). Every
  // worker has heard every change from before a checkpoint's step by then,
  // but a change from that step or later only some (each takes a decision
  // the boundary after it answered): cut there, every worker's part holds
  // the same history, and a resume runs at the membership of that step.
  std::vector<std::int64_t> history_before(int epoch, std::int64_t step) const;

  // Asks the scheduler (epoch_members_key), for a job's workers.
  static AskFn from_scheduler(SchedulerClient& scheduler, int timeout_ms);
  // Every epoch: 0..num_workers-1 (no failure policy, or tests).
  static AskFn all_of(int num_workers);

 private:
  AskFn ask_;
  std::vector<std::vector<EpochSegment>> epochs_;  // index = epoch; empty = not known yet
};

}  // namespace pstrain
