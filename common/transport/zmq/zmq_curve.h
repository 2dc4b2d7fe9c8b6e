// CURVE over ZeroMQ (the keys and who is admitted: common/wire/security.h):
// the socket options that make a socket a CURVE server or client, and the
// ZAP handler that answers a context's handshakes. Used by the ZeroMQ-based
// transports (make_socket, Transport::authenticate) and by tests that play
// CURVE peers.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "common/base/log.h"
#include "common/wire/security.h"

namespace pstrain {

// Sets the CURVE options on a socket before it binds (`binding`: CURVE
// server) or connects (CURVE client). Nothing when curve is off.
void apply_curve(const SecurityContext& security, zmq::socket_t& socket, bool binding);

// The ZAP handler (ZeroMQ RFC 27) of one zmq context: a REP socket bound to
// inproc://zeromq.zap.01, served on a thread this object owns, answering
// 200 for CURVE clients whose public key is in the allowed list and 400 to
// everyone else (the handshake then fails and the peer gets nothing). Must
// be constructed before the node's CURVE server socket binds and destroyed
// before the context (declare it before that socket). Only one per context:
// a second one throws TransportError.
class ZmqZapHandler final : public ZapHandler {
 public:
  ZmqZapHandler(zmq::context_t& ctx, const std::vector<AllowedClient>& allowed, Logger& log);
  ~ZmqZapHandler() override;
  ZmqZapHandler(const ZmqZapHandler&) = delete;
  ZmqZapHandler& operator=(const ZmqZapHandler&) = delete;

  std::int64_t accepted() const override { return accepted_.load(std::memory_order_relaxed); }
  std::int64_t refused() const override { return refused_.load(std::memory_order_relaxed); }

 private:
  void serve();
  std::vector<zmq::message_t> next_request();  // none if nothing came within 100 ms
  void answer(const std::vector<zmq::message_t>& frames, PeerWarnings& warnings);

  zmq::socket_t socket_;
  std::vector<std::pair<std::string, std::string>> allowed_;  // (32-byte binary key, name)
  Logger& log_;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> accepted_{0};
  std::atomic<std::int64_t> refused_{0};
  std::thread thread_;
};

// A ZapHandler for a binding node when `security` has curve on, else null.
std::unique_ptr<ZapHandler> start_zap_handler(zmq::context_t& ctx, const SecurityContext* security, Logger& log);

}  // namespace pstrain
