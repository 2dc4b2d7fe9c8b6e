// A parameter-server worker that joins a running elastic job (--join;
// docs/architecture.md, "Elastic membership"). Its registration took a
// vacant slot and started a membership change; once the live workers have
// answered and every server has admitted it from the boundary, the
// scheduler sets its start key (kJoinStartPrefix): the change, the boundary
// (epoch E, its step s, the job's step S) and the number of its next
// barrier. It then learns the epochs' segments as every other worker has
// them (each epoch's first members, every change's decision up to its own),
// pulls the weights of step S (sync: those after step S-1 was applied) and
// trains from step S: its first push is of step S, its clock (async, ssp)
// counts from there, and the rest of epoch E is split among the new members.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/base/log.h"
#include "worker/train/epoch_members.h"

namespace pstrain {

class SchedulerClient;
class MetricsWriter;

// The value of a joiner's start key.
struct JoinStart {
  std::int64_t change = 0;
  int epoch = 0;
  std::int64_t from_step = 1;    // within the epoch
  std::int64_t global_step = 0;  // the job's step
  std::int64_t barrier_seq = 0;  // its next barrier's number
  bool take_checkpoint = true;   // it takes the barrier of a checkpoint at its first step (the others have not finished it)
};

// "<change> <epoch> <from_step> <global_step> <barrier_seq> <0|1>" -> JoinStart;
// "none" -> nullopt (the join was abandoned: no step was left); anything
// else is a ProtocolError naming the text.
std::optional<JoinStart> parse_join_start(const std::string& text);

// Waits (at most timeout_ms) for this joiner's start key; on a start its
// barriers continue at the others' next number.
std::optional<JoinStart> wait_for_join_start(SchedulerClient& scheduler, int timeout_ms, Logger& log);

// Adds to `members` every change decided up to the joiner's own (the
// decisions kept in the scheduler's store), so that its epochs are split as
// every other worker's.
void learn_join_segments(SchedulerClient& scheduler, const JoinStart& start, EpochMembers& members, int timeout_ms);

// A --rejoin in an elastic job (cluster.max_workers above cluster.workers):
// adds to `members` every change decided so far, reading the decisions
// 1, 2, ... until one is not set (that get is refused at once; the
// scheduler's log says so); returns how many there were. Its epochs are then
// split as the others' (a restarted joiner, or a rank restarted after a grow).
std::int64_t learn_decided_segments(SchedulerClient& scheduler, EpochMembers& members);

// The metrics record {"type": "join", "time_s", "step", "epoch", "job_s"}:
// this process joined the job at `step` (read by the summary).
void write_join_record(MetricsWriter& metrics, const JoinStart& start);

}  // namespace pstrain
