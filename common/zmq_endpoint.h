// What the ZeroMQ-based transports (ZmqTransport, ShmTransport) share: every
// endpoint they make holds one ZeroMQ socket, and wait_any polls those
// sockets. Internal to common/; nodes use common/transport.h.
#pragma once

#include <chrono>
#include <span>
#include <vector>

#include <zmq.hpp>

#include "common/transport.h"

namespace pstrain {

class ZmqSocketHolder {
 public:
  explicit ZmqSocketHolder(zmq::socket_t socket) : socket_(std::move(socket)) {}
  virtual ~ZmqSocketHolder() = default;
  zmq::socket_t& socket() { return socket_; }

 protected:
  zmq::socket_t socket_;
};

// Which endpoints (each a ZmqSocketHolder) have a message ready, waiting up
// to `timeout` for one. TransportError for an endpoint of another kind.
std::vector<bool> poll_zmq_endpoints(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout);

}  // namespace pstrain
