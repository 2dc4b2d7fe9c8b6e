// A node's transport from cluster.transport, each with a ZeroMQ context of
// its own: "tcp" and "ipc" are ZmqTransport (common/transport/zmq/), "shm"
// ShmTransport (common/transport/shm/; slots from shm_options_for the job's
// partition size). ConfigError for anything else.
//
// ZeroMQ I/O threads: a context's sockets move their bytes (and, with CURVE,
// encrypt and decrypt them) on its I/O threads, each connection on one of
// them (the least loaded when it is made). One is enough in the clear; with
// CURVE one thread was the bottleneck of a whole node (4-12x slower than
// plain, issue 27), so an encrypting node gets io_threads_for(true): one per
// core up to 4, and its connections to several servers (a worker) or from
// several workers (a server) are encrypted on several cores at once. One
// connection's messages stay on one thread: a single worker-server pair gains
// nothing (docs/benchmarks.md, "CURVE").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/transport/transport.h"

namespace pstrain {

// 1 when not encrypted; else the cores this process may run on, 1..4.
int io_threads_for(bool encrypted);

// `io_threads` (1..64) set on the new context before any socket is made.
std::unique_ptr<Transport> make_transport(const std::string& kind, std::int64_t partition_bytes, int io_threads = 1);

// A ZmqTransport with a context of its own: the scheduler's, an allreduce
// worker's scheduler link (no tensors over it); any tcp://, ipc:// or
// inproc:// address.
std::unique_ptr<Transport> make_zmq_transport();

}  // namespace pstrain
