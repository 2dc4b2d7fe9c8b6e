// ZmqTransport: the transport interface (common/transport/transport.h) over ZeroMQ.
// One code path for tcp://, ipc:// and inproc:// (inproc peers must share the
// zmq::context_t, so a process's nodes share one ZmqTransport or at least its
// context). Listeners are ROUTER sockets (mandatory routing, never waiting on
// a send), Connections DEALER sockets (EndpointOptions::identity is their
// routing id), with pstrain's socket options (make_socket: queue bounds, frame
// cap, linger, send timeout, CURVE). Thread safety: the transport (the
// context) may be used from any thread; each endpoint belongs to one.
#pragma once

#include <memory>
#include <optional>

#include <zmq.hpp>

#include "common/transport/transport.h"

namespace pstrain {

class ZmqTransport final : public Transport {
 public:
  // Uses `ctx` (not owned; it must outlive the transport and its endpoints).
  explicit ZmqTransport(zmq::context_t& ctx) : ctx_(ctx) {}
  // Owns a context of its own.
  ZmqTransport() : owned_(std::make_unique<zmq::context_t>()), ctx_(*owned_) {}

  std::unique_ptr<Listener> listen(const std::string& address, EndpointOptions options) override;
  std::unique_ptr<Connection> connect(const std::string& address, EndpointOptions options) override;
  std::vector<bool> wait_any(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout) override;
  std::unique_ptr<ZapHandler> authenticate(const SecurityContext* security, Logger& log) override;
  std::string_view kind() const override { return "zmq"; }

  zmq::context_t& context() { return ctx_; }

 private:
  std::unique_ptr<zmq::context_t> owned_;
  zmq::context_t& ctx_;
};

}  // namespace pstrain
