#include "common/transport/zmq/zmq_curve.h"

#include <cerrno>

#include "common/base/errors.h"

namespace pstrain {
namespace {
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
}  // namespace

void apply_curve(const SecurityContext& security, zmq::socket_t& socket, bool binding) {
  if (!security.curve) return;
  const CurveKeyPair& bind = security.bind;
  const CurveKeyPair& client = security.client;
  const std::string& server_public_z85 = security.server_public_z85;
  try {
    if (binding) {
      if (bind.secret_z85.empty()) throw TransportError("a CURVE server socket needs the bind keypair (bind.key)");
      socket.set(zmq::sockopt::zap_domain, "pstrain");
      socket.set(zmq::sockopt::curve_server, 1);
      socket.set(zmq::sockopt::curve_secretkey, bind.secret_z85);
    } else {
      if (client.secret_z85.empty() || server_public_z85.empty()) {
        throw TransportError("a CURVE client socket needs its keypair and bind.pub");
      }
      socket.set(zmq::sockopt::curve_serverkey, server_public_z85);
      socket.set(zmq::sockopt::curve_publickey, client.public_z85);
      socket.set(zmq::sockopt::curve_secretkey, client.secret_z85);
    }
  } catch (const zmq::error_t& e) {
    throw TransportError(std::string("setting CURVE keys on a socket: ") + e.what());
  }
}

ZmqZapHandler::ZmqZapHandler(zmq::context_t& ctx, const std::vector<AllowedClient>& allowed, Logger& log)
    : socket_(ctx, zmq::socket_type::rep), log_(log) {
  for (const AllowedClient& a : allowed) {
    const std::string key = curve_key_bytes(a.public_z85);
    if (key.empty()) throw ConfigError("security: the allowed " + a.name + " key is not a Z85 CURVE key");
    allowed_.emplace_back(key, a.name);
  }
  socket_.set(zmq::sockopt::linger, 0);
  try {
    socket_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError(std::string("ZAP handler: bind ") + kZapEndpoint + ": " + e.what() +
                         " (one CURVE binding node per zmq context)");
  }
  thread_ = std::thread([this] { serve(); });
}

ZmqZapHandler::~ZmqZapHandler() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

void ZmqZapHandler::serve() {
  // Refusals are logged per client address, a few per minute (PeerWarnings).
  PeerWarnings warnings(log_);
  try {
    while (!stop_.load(std::memory_order_acquire)) {
      std::vector<zmq::message_t> frames = next_request();
      if (!frames.empty()) answer(frames, warnings);
    }
  } catch (const zmq::error_t& e) {
    // The context is closing; nothing left to authenticate.
    if (e.num() != ETERM) log_.error(std::string("ZAP handler stopped: ") + e.what());
  }
}

std::vector<zmq::message_t> ZmqZapHandler::next_request() {
  std::vector<zmq::message_t> frames;
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  try {
    if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) return frames;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return frames;  // a signal (SIGCONT after SIGSTOP) ended the wait: wait again
    throw;
  }
  while (true) {
    zmq::message_t frame;
    try {
      if (!socket_.recv(frame, zmq::recv_flags::none)) break;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // the request's frames are here: take the rest
      throw;
    }
    const bool more = frame.more();
    frames.push_back(std::move(frame));
    if (!more) break;
  }
  return frames;
}

void ZmqZapHandler::answer(const std::vector<zmq::message_t>& frames, PeerWarnings& warnings) {
  // version, request id, domain, address, identity, mechanism, credentials...
  const auto text = [&frames](std::size_t i) { return i < frames.size() ? frames[i].to_string() : std::string(); };
  std::string user;
  bool ok = false;
  if (frames.size() >= 7 && text(0) == "1.0" && text(5) == "CURVE") {
    for (const auto& [key, name] : allowed_) {
      if (text(6) == key) {
        ok = true;
        user = name;
        break;
      }
    }
  }
  const std::string address = text(3);
  if (ok) {
    accepted_.fetch_add(1, std::memory_order_relaxed);
  } else {
    refused_.fetch_add(1, std::memory_order_relaxed);
    warnings.warn("address " + address,
                  "refused a connection from " + address + " (mechanism " + text(5) + "): its key is not one of the job's");
  }
  const std::string reply[] = {"1.0", text(1), ok ? "200" : "400", ok ? "OK" : "key not allowed", user, ""};
  for (std::size_t i = 0; i < std::size(reply); ++i) {
    const auto flags = i + 1 < std::size(reply) ? zmq::send_flags::sndmore : zmq::send_flags::none;
    while (true) {
      try {
        socket_.send(zmq::buffer(reply[i]), flags);
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
  }
}

std::unique_ptr<ZapHandler> start_zap_handler(zmq::context_t& ctx, const SecurityContext* security, Logger& log) {
  if (security == nullptr || !security->curve) return nullptr;
  return std::make_unique<ZmqZapHandler>(ctx, security->allowed, log);
}

}  // namespace pstrain
