// What the ZeroMQ-based transports (ZmqTransport, ShmTransport) share: every
// endpoint they make holds one ZeroMQ socket, and wait_any polls those
// sockets. Internal to common/; nodes use common/transport/transport.h.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/transport/zmq/zmq_socket.h"

namespace pstrain {

class ZmqSocketHolder {
 public:
  explicit ZmqSocketHolder(zmq::socket_t socket) : socket_(std::move(socket)) {}
  virtual ~ZmqSocketHolder() = default;
  zmq::socket_t& socket() { return socket_; }

 protected:
  zmq::socket_t socket_;
};

// Sets a DEALER's routing id (EndpointOptions::identity; nothing when empty).
// TransportError naming `address`.
void set_connection_identity(zmq::socket_t& socket, const std::string& identity, const std::string& address);

// Which endpoints (each a ZmqSocketHolder) have a message ready, waiting up
// to `timeout` for one. TransportError for an endpoint of another kind.
std::vector<bool> poll_zmq_endpoints(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout);

}  // namespace pstrain
