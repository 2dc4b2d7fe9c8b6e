// A node's transport from cluster.transport, each with a ZeroMQ context of
// its own: "tcp" and "ipc" are ZmqTransport (common/transport/zmq/), "shm"
// ShmTransport (common/transport/shm/; slots from shm_options_for the job's
// partition size). ConfigError for anything else.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/transport/transport.h"

namespace pstrain {

std::unique_ptr<Transport> make_transport(const std::string& kind, std::int64_t partition_bytes);

// A ZmqTransport with a context of its own: the scheduler's, an allreduce
// worker's scheduler link (no tensors over it); any tcp://, ipc:// or
// inproc:// address.
std::unique_ptr<Transport> make_zmq_transport();

}  // namespace pstrain
