#include <cerrno>
#include "common/transport/zmq/zmq_transport.h"

#include "common/base/errors.h"
#include "common/transport/zmq/zmq_curve.h"
#include "common/transport/zmq/zmq_endpoint.h"
#include "common/transport/zmq/zmq_reply_budget.h"
#include "common/transport/zmq/zmq_socket.h"

namespace pstrain {

namespace {

class ZmqListener final : public BudgetedListener, public ZmqSocketHolder {
 public:
  ZmqListener(Transport& transport, zmq::context_t& ctx, const std::string& address, EndpointOptions options)
      : BudgetedListener(transport, options), ZmqSocketHolder(make_socket(ctx, zmq::socket_type::router, options.socket)) {
    address_ = bind_socket(socket_, address);
  }
  const std::string& address() const override { return address_; }

 protected:
  std::optional<Frames> receive_frames(std::chrono::milliseconds timeout) override {
    std::optional<RawFrames> got = receive_frames_raw(socket_, timeout, /*routed=*/true);
    if (!got) return std::nullopt;
    Frames f;
    f.from = PeerId(got->frames.front().to_string());
    got->frames.erase(got->frames.begin());
    f.user_id = std::move(got->user_id);
    f.frames = std::move(got->frames);
    return f;
  }
  void send_frames(const PeerId* to, Buffer head, std::optional<Buffer> body, const Header& header) override {
    const zmq::message_t id(to->bytes().data(), to->bytes().size());
    zmq::message_t first = admit_reply(*to, std::move(head), body, header);  // counted until sent
    send_frames_raw(socket_, &id, std::move(first), to_optional_message(std::move(body)), header);
  }

 private:
  std::string address_;
};

class ZmqConnection final : public Connection, public ZmqSocketHolder {
 public:
  ZmqConnection(Transport& transport, zmq::context_t& ctx, const std::string& address, EndpointOptions options)
      : Connection(transport, options), ZmqSocketHolder(make_socket(ctx, zmq::socket_type::dealer, options.socket)) {
    set_connection_identity(socket_, options.identity, address);
    connect_socket(socket_, address);
  }
  void abandon() override {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.close();
  }

 protected:
  std::optional<Frames> receive_frames(std::chrono::milliseconds timeout) override {
    std::optional<RawFrames> got = receive_frames_raw(socket_, timeout);
    if (!got) return std::nullopt;
    Frames f;
    f.user_id = std::move(got->user_id);
    f.frames = std::move(got->frames);
    return f;
  }
  void send_frames(const PeerId* /*to*/, Buffer head, std::optional<Buffer> body, const Header& header) override {
    send_frames_raw(socket_, nullptr, to_message(std::move(head)), to_optional_message(std::move(body)), header);
  }
};

}  // namespace

std::unique_ptr<Listener> ZmqTransport::listen(const std::string& address, EndpointOptions options) {
  return std::make_unique<ZmqListener>(*this, ctx_, address, std::move(options));
}

std::unique_ptr<Connection> ZmqTransport::connect(const std::string& address, EndpointOptions options) {
  return std::make_unique<ZmqConnection>(*this, ctx_, address, std::move(options));
}

void set_connection_identity(zmq::socket_t& socket, const std::string& identity, const std::string& address) {
  if (identity.empty()) return;
  try {
    socket.set(zmq::sockopt::routing_id, identity);
  } catch (const zmq::error_t& e) {
    throw TransportError("connection identity for " + address + ": " + e.what());
  }
}

std::vector<bool> poll_zmq_endpoints(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout) {
  std::vector<zmq::pollitem_t> items;
  items.reserve(endpoints.size());
  for (Endpoint* e : endpoints) {
    auto* holder = dynamic_cast<ZmqSocketHolder*>(e);
    if (holder == nullptr) throw TransportError("wait_any: an endpoint that is not ZeroMQ's");
    items.push_back({holder->socket().handle(), 0, ZMQ_POLLIN, 0});
  }
  // A signal's EINTR (a wait resumed by SIGCONT, zmq_socket.cc) waits again for the time left.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (std::chrono::milliseconds left = timeout;;) {
    try {
      zmq::poll(items.data(), items.size(), left);
      break;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw TransportError(std::string("poll: ") + e.what());
    }
    left = std::max(std::chrono::milliseconds(0),
                    std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
  }
  std::vector<bool> ready(endpoints.size());
  for (std::size_t i = 0; i < items.size(); ++i) ready[i] = (items[i].revents & ZMQ_POLLIN) != 0;
  return ready;
}

std::vector<bool> ZmqTransport::wait_any(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout) {
  return poll_zmq_endpoints(endpoints, timeout);
}

std::unique_ptr<ZapHandler> ZmqTransport::authenticate(const SecurityContext* security, Logger& log) {
  return start_zap_handler(ctx_, security, log);
}

}  // namespace pstrain
