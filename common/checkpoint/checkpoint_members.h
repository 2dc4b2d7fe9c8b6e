// Which workers a resume starts (docs/architecture.md, "Checkpoints and
// resume", and "Elastic membership"): a checkpoint taken after a grow or a
// shrink resumes at the membership it was taken with. Pure: the manifest and
// the config in, the ranks or the reason out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint.h"
#include "common/config/config.h"

namespace pstrain {

// The worker ranks (ascending) that resume checkpoint `m` in a job with
// `cluster`. A fixed-size job (not is_elastic) and a manifest without a
// membership record (older builds; allreduce) resume workers
// 0..cluster.workers-1, as before. An elastic job with a record resumes its
// members: after a shrink 4 -> 3 ranks 0-2, after a join into rank 3 while
// rank 2 was retired 0, 1 and 3. CheckpointError with the reason when that
// cannot be done: a member at or past the job's slots (max(cluster.workers,
// cluster.max_workers)), an incomplete record (members not ascending and
// distinct, a member without its worker part), or members below
// cluster.min_workers.
std::vector<int> resume_members(const CheckpointManifest& m, const ClusterConfig& cluster);

// The membership changes a part's membership history holds (its
// "epoch_members", flat [epoch, count, ranks...] or [epoch, -from_step,
// count, ranks...]): its segments that begin within an epoch, which a resumed
// scheduler numbers 1..n in its store (a resumed worker has heard them all).
// CheckpointError for a history not of that form.
std::int64_t history_changes(const std::vector<std::int64_t>& history);

}  // namespace pstrain
