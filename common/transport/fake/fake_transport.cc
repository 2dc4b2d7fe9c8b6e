#include "common/transport/fake/fake_transport.h"

#include <algorithm>

#include "common/base/errors.h"
#include "common/wire/security.h"

namespace pstrain {

using Clock = std::chrono::steady_clock;

struct FakeTransport::Box {
  bool listener = false;
  std::string address;  // listener: where it is bound; connection: where it connects
  PeerId self;          // connection: the id its listener sees
  EndpointOptions options;
  std::deque<Item> inbox;                   // by (at, seq)
  std::map<std::string, int> queued_from;   // per sender (PeerId bytes): messages in inbox
  bool gone = false;                        // a connection that vanished (disconnect)
  std::map<const Box*, Clock::time_point> link_last_at;  // per receiver: a link delivers in order
  struct Held {
    Box* to;
    Item item;
  };
  std::vector<Held> held;
};

namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class FakeBoxHolder {
 public:
  FakeBoxHolder(FakeTransport& net, FakeTransport::Box* box) : net_(net), box_(box) {}
  ~FakeBoxHolder() { net_.unregister(box_); }
  FakeTransport::Box* box() const { return box_; }

 protected:
  FakeTransport& net_;
  FakeTransport::Box* box_;
};

}  // namespace

namespace {
class FakeListenerImpl final : public Listener, public FakeBoxHolder {
 public:
  FakeListenerImpl(FakeTransport& net, FakeTransport::Box* box, const EndpointOptions& options)
      : Listener(net, options), FakeBoxHolder(net, box) {}
  const std::string& address() const override { return box_->address; }

 protected:
  std::optional<Frames> receive_frames(std::chrono::milliseconds timeout) override {
    std::optional<FakeTransport::Item> item = net_.take(box_, timeout);
    if (!item) return std::nullopt;
    return Frames{std::move(item->from), std::move(item->frames), {}, {}};
  }
  void send_frames(const PeerId* to, Buffer head, std::optional<Buffer> body,
                   const Header& header) override {
    std::vector<Buffer> frames;
    frames.push_back(std::move(head));
    if (body) frames.push_back(std::move(*body));
    FakeTransport::Box* peer = net_.find_connection_box(box_, *to);
    if (peer == nullptr) {
      throw TransportError("send of " + std::string(to_string(header.type)) + " (key " + std::to_string(header.key) +
                           "): " + to->name() + " has gone");
    }
    net_.deliver(box_, peer, PeerId(), header, std::move(frames), false);
  }
};

class FakeConnectionImpl final : public Connection, public FakeBoxHolder {
 public:
  FakeConnectionImpl(FakeTransport& net, FakeTransport::Box* box, const EndpointOptions& options)
      : Connection(net, options), FakeBoxHolder(net, box) {}
  void abandon() override {
    std::lock_guard lock(net_.mutex());
    box_->gone = true;
  }

 protected:
  std::optional<Frames> receive_frames(std::chrono::milliseconds timeout) override {
    std::optional<FakeTransport::Item> item = net_.take(box_, timeout);
    if (!item) return std::nullopt;
    return Frames{PeerId(), std::move(item->frames), {}, {}};
  }
  void send_frames(const PeerId* /*to*/, Buffer head, std::optional<Buffer> body,
                   const Header& header) override {
    std::vector<Buffer> frames;
    frames.push_back(std::move(head));
    if (body) frames.push_back(std::move(*body));
    net_.deliver(box_, net_.find_listener_box(box_->address), box_->self, header, std::move(frames), true);
  }
};

}  // namespace

FakeTransport::~FakeTransport() = default;

std::unique_ptr<Listener> FakeTransport::listen(const std::string& address, EndpointOptions options) {
  auto box = new Box;  // owned by the endpoint (unregister deletes it)
  box->listener = true;
  box->options = options;
  std::lock_guard lock(mu_);
  std::string bound = address;
  if (const auto star = bound.find('*'); star != std::string::npos) {
    bound.replace(star, 1, std::to_string(++next_name_));
  }
  if (listeners_.count(bound) != 0) {
    delete box;
    throw TransportError("bind to " + address + ": address already in use");
  }
  box->address = bound;
  listeners_[bound] = box;
  boxes_.push_back(box);
  return std::make_unique<FakeListenerImpl>(*this, box, options);
}

std::unique_ptr<Connection> FakeTransport::connect(const std::string& address, EndpointOptions options) {
  auto box = new Box;
  box->address = address;
  box->options = options;
  std::lock_guard lock(mu_);
  box->self = PeerId(options.identity.empty() ? "fake-" + std::to_string(++next_name_) : options.identity);
  boxes_.push_back(box);
  return std::make_unique<FakeConnectionImpl>(*this, box, options);
}

void FakeTransport::unregister(Box* box) {
  {
    std::lock_guard lock(mu_);
    if (box->listener) listeners_.erase(box->address);
    std::erase(boxes_, box);
    for (Box* b : boxes_) {
      std::erase_if(b->held, [&](const Box::Held& h) { return h.to == box; });
      b->link_last_at.erase(box);
    }
  }
  cv_.notify_all();
  delete box;
}

std::unique_ptr<ZapHandler> FakeTransport::authenticate(const SecurityContext* security, Logger& /*log*/) {
  if (security != nullptr && security->curve) throw ConfigError("the fake transport has no CURVE (security.curve)");
  return nullptr;
}

std::size_t FakeTransport::add_fault(const FakeFault& fault) {
  std::lock_guard lock(mu_);
  faults_.push_back(fault);
  matched_.push_back(0);
  acted_.push_back(0);
  return faults_.size() - 1;
}

std::int64_t FakeTransport::acted(std::size_t index) const {
  std::lock_guard lock(mu_);
  return acted_.at(index);
}

std::int64_t FakeTransport::lost() const {
  std::lock_guard lock(mu_);
  return lost_;
}

void FakeTransport::disconnect(const std::string& identity) {
  {
    std::lock_guard lock(mu_);
    for (Box* b : boxes_) {
      if (!b->listener && b->self.bytes() == identity) b->gone = true;
    }
  }
  cv_.notify_all();
}

FakeTransport::Box* FakeTransport::find_listener_box(const std::string& address) {
  std::lock_guard lock(mu_);
  const auto it = listeners_.find(address);
  return it == listeners_.end() ? nullptr : it->second;
}

FakeTransport::Box* FakeTransport::find_connection_box(Box* listener, const PeerId& peer) {
  std::lock_guard lock(mu_);
  for (Box* b : boxes_) {
    if (!b->listener && !b->gone && b->address == listener->address && b->self == peer) return b;
  }
  return nullptr;
}

FakeTransport::FaultEffect FakeTransport::fault_effect_locked(const Header& header) {
  FaultEffect effect;
  for (std::size_t i = 0; i < faults_.size(); ++i) {
    const FakeFault& f = faults_[i];
    if ((f.type && *f.type != header.type) || (f.sender_role && *f.sender_role != header.role) ||
        (f.sender && *f.sender != header.sender) || (f.step && *f.step != header.step)) {
      continue;
    }
    const std::int64_t n = ++matched_[i];
    if (f.nth > 0 && n != f.nth) continue;
    if (f.probability < 1.0) {
      const std::uint64_t draw = mix(seed_ ^ mix(i * 0x100000001b3ULL + static_cast<std::uint64_t>(n)));
      if (static_cast<double>(draw >> 11) * 0x1.0p-53 >= f.probability) continue;
    }
    ++acted_[i];
    switch (f.action) {
      case FakeFault::Action::kDrop: effect.drop = true; return effect;
      case FakeFault::Action::kDelay: effect.delay += f.delay; break;
      case FakeFault::Action::kHold: effect.hold = true; break;
      case FakeFault::Action::kDisconnect: effect.disconnect = true; break;
    }
  }
  return effect;
}

void FakeTransport::deliver(Box* sender, Box* to, const PeerId& from, const Header& header,
                            std::vector<Buffer> frames, bool sender_waits) {
  std::unique_lock lock(mu_);
  const auto describe = [&] {
    return "send of " + std::string(to_string(header.type)) + " (key " + std::to_string(header.key) + ")";
  };
  // The listener may have been unregistered meanwhile: look it up again under the lock.
  if (to == nullptr || std::find(boxes_.begin(), boxes_.end(), to) == boxes_.end() || sender->gone || to->gone) {
    ++lost_;  // nobody there (ZeroMQ would queue for a peer that may come; tests want no such waits)
    return;
  }
  const FaultEffect effect = fault_effect_locked(header);
  if (effect.drop) return;
  auto at = Clock::now() + effect.delay;
  const bool disconnect_after = effect.disconnect, hold = effect.hold;
  // Limits: a frame over the receiver's cap is dropped (ZeroMQ drops the peer's connection).
  for (const Buffer& f : frames) {
    if (static_cast<std::int64_t>(f.size()) > to->options.socket.max_message_bytes + 4096) {
      ++lost_;
      return;
    }
  }
  // Bounded queues: a full receive queue makes a connection wait (send timeout) and a listener fail at once.
  const auto room = [&] { return to->queued_from[from.bytes()] < to->options.socket.receive_hwm; };
  if (!room()) {
    if (!sender_waits || !cv_.wait_for(lock, sender->options.socket.send_timeout, [&] {
          return room() || std::find(boxes_.begin(), boxes_.end(), to) == boxes_.end();
        })) {
      throw TransportError(describe() + ": the peer's queue is full (it does not read)");
    }
    if (std::find(boxes_.begin(), boxes_.end(), to) == boxes_.end()) {
      ++lost_;
      return;
    }
  }
  // A copy, as a wire makes: the sender's buffers (zero-copy payloads) are released now.
  Item item;
  item.from = from;
  for (const Buffer& f : frames) item.frames.push_back(Buffer::copy(f.data(), f.size()));
  frames.clear();
  Clock::time_point& last = sender->link_last_at[to];
  item.at = std::max(at, last);
  last = item.at;
  const auto push = [&](Item it) {
    it.seq = next_seq_++;
    ++to->queued_from[it.from.bytes()];
    const auto pos = std::upper_bound(to->inbox.begin(), to->inbox.end(), it, [](const Item& a, const Item& b) {
      return a.at < b.at || (a.at == b.at && a.seq < b.seq);
    });
    to->inbox.insert(pos, std::move(it));
  };
  if (hold) {
    sender->held.push_back(Box::Held{to, std::move(item)});
  } else {
    push(std::move(item));
    // Messages held on this link go after it (the pair arrives swapped).
    for (auto it = sender->held.begin(); it != sender->held.end();) {
      if (it->to != to) {
        ++it;
        continue;
      }
      it->item.at = std::max(it->item.at, last);
      push(std::move(it->item));
      it = sender->held.erase(it);
    }
  }
  if (disconnect_after) sender->gone = true;
  lock.unlock();
  cv_.notify_all();
}

bool FakeTransport::ready_locked(const Box* box, Clock::time_point now) const {
  return !box->gone && !box->inbox.empty() && box->inbox.front().at <= now;
}

std::optional<Clock::time_point> FakeTransport::next_due_locked(const Box* box) const {
  if (box->gone || box->inbox.empty()) return std::nullopt;
  return box->inbox.front().at;
}

std::optional<FakeTransport::Item> FakeTransport::take(Box* box, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  const auto deadline = Clock::now() + timeout;
  while (!ready_locked(box, Clock::now())) {
    const auto now = Clock::now();
    if (now >= deadline) return std::nullopt;
    auto until = deadline;
    if (const auto due = next_due_locked(box)) until = std::min(until, *due);
    cv_.wait_until(lock, until);
  }
  Item item = std::move(box->inbox.front());
  box->inbox.pop_front();
  if (--box->queued_from[item.from.bytes()] <= 0) box->queued_from.erase(item.from.bytes());
  lock.unlock();
  cv_.notify_all();  // a sender may wait for room
  return item;
}

std::vector<bool> FakeTransport::wait_any(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout) {
  std::vector<Box*> boxes;
  for (Endpoint* e : endpoints) {
    auto* holder = dynamic_cast<FakeBoxHolder*>(e);
    if (holder == nullptr) throw TransportError("wait_any: an endpoint that is not the fake transport's");
    boxes.push_back(holder->box());
  }
  std::unique_lock lock(mu_);
  const auto deadline = Clock::now() + timeout;
  std::vector<bool> ready(boxes.size());
  while (true) {
    const auto now = Clock::now();
    bool any = false;
    auto until = deadline;
    for (std::size_t i = 0; i < boxes.size(); ++i) {
      ready[i] = ready_locked(boxes[i], now);
      any = any || ready[i];
      if (const auto due = next_due_locked(boxes[i])) until = std::min(until, *due);
    }
    if (any || now >= deadline) return ready;
    cv_.wait_until(lock, until);
  }
}

}  // namespace pstrain
