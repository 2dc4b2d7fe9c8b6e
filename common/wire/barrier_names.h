// The names of the scheduler barriers that mean something to the scheduler
// itself (a barrier's name is the text payload of its kBarrier,
// docs/protocol.md). Every other name only labels a barrier in the logs.
#pragma once

#include <string_view>

namespace pstrain {

// A parameter-server worker's last barrier (worker/train/ps_worker.cc): every
// push of every worker has been applied. A worker's `done` ends its part of
// the job only once it has passed this barrier; a `done` before it is an
// early one, and any barrier the worker has not entered can no longer
// complete with it (scheduler/barriers.h).
inline constexpr std::string_view kFinalBarrier = "training done";

}  // namespace pstrain
