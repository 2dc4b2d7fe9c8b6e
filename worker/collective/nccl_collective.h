// The NCCL collective: CUDA device memory of this rank's GPU, operations
// enqueued on the collective's own non-blocking stream (so they overlap the
// compute stream), ncclAvg for the mean, the unique id handed out through a
// RendezvousStore by rank 0. The communicator is non-blocking: init and
// every wait are bounded by options.timeout, and a failure or timeout
// aborts it (ncclCommAbort) instead of hanging. Compiled only when NCCL is
// found (PSTRAIN_HAVE_NCCL).
#pragma once

#include <memory>

#include "worker/collective/collective_factory.h"

namespace pstrain {

std::unique_ptr<Collective> make_nccl_collective(const CollectiveOptions& options, RendezvousStore& store);

}  // namespace pstrain
