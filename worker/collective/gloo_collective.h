// The Gloo collective: host memory over TCP (gloo::transport::tcp), the
// ring allreduce, rendezvous of the peers' addresses through a
// RendezvousStore. Operations run in order on one communication thread
// (CommThread), so start_allreduce_mean() returns at once and the caller
// computes meanwhile. Compiled only when Gloo is found (PSTRAIN_HAVE_GLOO).
#pragma once

#include <memory>

#include "worker/collective/collective_factory.h"

namespace pstrain {

std::unique_ptr<Collective> make_gloo_collective(const CollectiveOptions& options, RendezvousStore& store);

}  // namespace pstrain
