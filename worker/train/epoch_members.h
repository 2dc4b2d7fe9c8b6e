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

class EpochMembers {
 public:
  using AskFn = std::function<std::vector<int>(int epoch)>;
  // `ask` gives epoch E's members the first time E is needed (the scheduler
  // in a job; a fixed answer in tests). `history`: the answers of a
  // checkpoint (flat [epoch, count, ranks...]*; empty for a new run).
  explicit EpochMembers(AskFn ask, std::vector<std::int64_t> history = {});
  // The workers of `epoch`: from the history, else asked once and remembered.
  const std::vector<int>& of(int epoch);
  // Everything answered so far, flat as taken by the constructor.
  std::vector<std::int64_t> history() const;

  // Asks the scheduler (epoch_members_key), for a job's workers.
  static AskFn from_scheduler(SchedulerClient& scheduler, int timeout_ms);
  // Every epoch: 0..num_workers-1 (no failure policy, or tests).
  static AskFn all_of(int num_workers);

 private:
  AskFn ask_;
  std::vector<std::vector<int>> epochs_;  // index = epoch; empty = not known yet
};

}  // namespace pstrain
