// FakeTransport: the transport interface (common/transport/transport.h) in memory, in
// one process, for tests: a whole cluster (scheduler, servers, workers as
// threads) shares one FakeTransport, the way inproc peers share a context.
// Addresses are names ("fake://server-*": a '*' becomes a number). Messages
// are copied into the receiver's frames (as a wire would) and checked by the
// same decode_message as every transport. The limits hold as for ZeroMQ:
// receive queues bounded per link (a Connection's send waits up to its send
// timeout, a Listener's send to a full or vanished peer raises
// TransportError at once), frames over max_message_bytes are dropped.
// No CURVE: authenticate() refuses security with curve on.
//
// The fault plan (add_fault) acts on messages as they are sent, matched by
// their header (type, sender role and rank) and direction; deterministic
// from the seed: a probability is drawn from (seed, rule, how many messages
// the rule has matched), not from the threads' interleaving.
//   drop        the message is lost;
//   delay       it arrives `delay` later (later messages on other links pass it;
//               on its own link it keeps its place: a link delivers in order);
//   hold        it is held back until the next message on the same link has
//               been delivered, then delivered (the two arrive swapped);
//   disconnect  it is delivered, then its sender's connection vanishes (a
//               peer gone mid-request: replies to it raise TransportError).
// Thread-safe: one mutex for the whole network; endpoints belong to a thread each.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/transport/transport.h"

namespace pstrain {

struct FakeFault {
  enum class Action { kDrop, kDelay, kHold, kDisconnect };
  Action action = Action::kDrop;
  // Which messages (unset: any).
  std::optional<MsgType> type;
  std::optional<Role> sender_role;    // header.role
  std::optional<std::int32_t> sender; // header.sender
  std::optional<std::int64_t> step;   // header.step
  // The nth matching message only (1-based); 0: every match.
  int nth = 0;
  double probability = 1.0;
  std::chrono::milliseconds delay{0};  // kDelay
};

class FakeTransport final : public Transport {
 public:
  explicit FakeTransport(std::uint64_t seed = 1) : seed_(seed) {}
  ~FakeTransport() override;

  std::unique_ptr<Listener> listen(const std::string& address, EndpointOptions options) override;
  std::unique_ptr<Connection> connect(const std::string& address, EndpointOptions options) override;
  std::vector<bool> wait_any(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout) override;
  std::unique_ptr<ZapHandler> authenticate(const SecurityContext* security, Logger& log) override;
  std::string_view kind() const override { return "fake"; }

  // Adds a rule; returns its index (for matched()).
  std::size_t add_fault(const FakeFault& fault);
  // How many messages rule `index` has acted on.
  std::int64_t acted(std::size_t index) const;
  // Every connection whose identity is `identity` vanishes now.
  void disconnect(const std::string& identity);
  // Messages dropped because of their size or a vanished receiver.
  std::int64_t lost() const;

  // Implementation (the endpoints' side).
  struct Item {
    PeerId from;
    std::vector<Buffer> frames;
    std::chrono::steady_clock::time_point at;
    std::uint64_t seq = 0;
  };
  struct Box;  // one endpoint's inbox
  void deliver(Box* sender_box, Box* to, const PeerId& from, const Header& header, std::vector<Buffer> frames,
               bool sender_waits);
  std::optional<Item> take(Box* box, std::chrono::milliseconds timeout);
  Box* find_listener_box(const std::string& address);
  Box* find_connection_box(Box* listener, const PeerId& peer);
  void unregister(Box* box);
  std::mutex& mutex() { return mu_; }

 private:
  // What the fault plan does to a message with `header` (counting the rules' matches).
  struct FaultEffect {
    bool drop = false, hold = false, disconnect = false;
    std::chrono::milliseconds delay{0};
  };
  FaultEffect fault_effect_locked(const Header& header);
  bool ready_locked(const Box* box, std::chrono::steady_clock::time_point now) const;
  std::optional<std::chrono::steady_clock::time_point> next_due_locked(const Box* box) const;

  std::uint64_t seed_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<FakeFault> faults_;
  std::vector<std::int64_t> matched_;  // per rule: messages matched so far
  std::vector<std::int64_t> acted_;    // per rule: messages acted on
  std::map<std::string, Box*> listeners_;  // address -> its inbox
  std::vector<Box*> boxes_;                // every live endpoint's inbox
  std::uint64_t next_seq_ = 0;
  std::uint64_t next_name_ = 0;
  std::int64_t lost_ = 0;
};

}  // namespace pstrain
