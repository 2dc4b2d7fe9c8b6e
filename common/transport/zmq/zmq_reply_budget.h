// A node's memory budget for the replies its Listener has handed ZeroMQ and
// ZeroMQ has not sent yet, in bytes, across all its connections
// (docs/architecture.md, "Memory budget and floods"). ZeroMQ's own bound
// (send_hwm) counts whole messages per connection, so without this a peer
// that sends requests and never reads its replies, over many connections,
// grows the node by send_hwm x connections x reply size.
//
// Every message a ZeroMQ-based Listener (ZmqTransport's, ShmTransport's)
// sends goes through admit(): its header frame becomes a zero-copy ZeroMQ
// frame whose bytes live in a pooled ticket, and ZeroMQ's free callback
// (run on its I/O thread once the frame has been written to the socket, or
// dropped with a connection that went away) gives the message's bytes back.
// The tickets come from a pool that grows in blocks and is reused, so a send
// costs no more heap allocations than before (ZeroMQ's own frame record is
// the one it made for the copied header).
//
// Who is shed (admit throws TransportError, never waits):
//   - a connection that is not one of the node's members (set_members: the
//     server's workers; add_member: the scheduler's registered nodes), once
//     it holds stranger_bytes of unsent replies;
//   - with the connections of its kind over their budget, a connection
//     holding more than its share (that budget over the connections of its
//     kind holding unsent replies): the slowest readers first; a connection
//     under its share still gets its reply, so the total stays under twice
//     the budget, which is also a hard stop. The kinds: with
//     strangers_bytes set, the strangers share that pool and the members
//     budget_bytes (a stranger's flood never sheds a member's reply: the
//     strangers are shed first); without it, every connection shares
//     budget_bytes. The whole never exceeds unsent_bound(limits).
// A message's bytes are its frames' plus kMessageOverhead (ZeroMQ's records
// of it). take_drained() says when to hand freed memory back to the OS
// (give_back_memory: malloc_trim with glibc).
//
// Thread safety: admit, set_limits, set_members and the counters belong to
// the Listener's thread; the free callbacks may run on any thread and touch
// only atomics and the pool (a lock-free list of tickets given back). A frame may outlive the
// budget object (ZeroMQ may still be flushing it after the socket closed):
// the shared state lives until the last ticket is back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <zmq.hpp>

#include "common/transport/transport.h"

namespace pstrain {

class ReplyBudget {
 public:
  // ZeroMQ's records of one queued message (its frame records in the pipe,
  // the routing id frame), counted with the message's bytes.
  static constexpr std::int64_t kMessageOverhead = 256;
  // take_drained: unsent bytes must have reached this before a give-back.
  static constexpr std::int64_t kGiveBackPeak = std::int64_t{16} << 20;

  ReplyBudget();
  ~ReplyBudget();
  ReplyBudget(const ReplyBudget&) = delete;
  ReplyBudget& operator=(const ReplyBudget&) = delete;

  void set_limits(const MemoryLimits& limits);
  const MemoryLimits& limits() const;
  // From now on the connections in `members` are the node's own; every other
  // one is a stranger (stranger_bytes). Until called, every connection is a member.
  void set_members(const std::vector<PeerId>& members);
  // Adds one member (every connection not added is a stranger from now on).
  void add_member(const PeerId& member);

  // The header frame of a message of `message_bytes` (header and body) to
  // `to`, counted until ZeroMQ frees the frame. TransportError naming the
  // connection, the limit and why, when the message is shed.
  zmq::message_t admit(const PeerId& to, Buffer head, std::int64_t message_bytes, const Header& header);

  std::int64_t unsent_bytes() const;
  std::int64_t unsent_bytes(const PeerId& peer) const;
  std::int64_t strangers_unsent_bytes() const;  // the part of unsent_bytes() queued to strangers
  std::int64_t unsent_limit() const;            // unsent_bound(limits()); any thread
  std::int64_t shed_messages() const;
  // Per-peer accounts made so far (a peer's account, once made, is kept while
  // the node's peers stay; forgotten idle only when their number has doubled).
  std::int64_t accounts_made() const;
  // Tickets (header frames' records) made so far, in blocks: reused once given back.
  std::int64_t tickets_made() const;
  // True once each time the unsent bytes, after reaching kGiveBackPeak, have
  // fallen below an eighth of their peak.
  bool take_drained();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// A ZeroMQ-based Listener with a ReplyBudget: the Listener's memory calls,
// and admit_reply for its send_frames (the header frame, counted with the body).
class BudgetedListener : public Listener {
 public:
  using Listener::Listener;
  void set_memory_limits(const MemoryLimits& limits) override { budget_.set_limits(limits); }
  void set_members(const std::vector<PeerId>& members) override { budget_.set_members(members); }
  void add_member(const PeerId& member) override { budget_.add_member(member); }
  std::int64_t unsent_bytes() const override { return budget_.unsent_bytes(); }
  std::int64_t unsent_limit() const override { return budget_.unsent_limit(); }
  std::int64_t shed_replies() const override { return budget_.shed_messages(); }
  bool give_back_memory() override;

 protected:
  zmq::message_t admit_reply(const PeerId& to, Buffer head, const std::optional<Buffer>& body, const Header& header) {
    const auto bytes = static_cast<std::int64_t>(head.size() + (body ? body->size() : 0));
    return budget_.admit(to, std::move(head), bytes, header);
  }

 private:
  ReplyBudget budget_;
};

// Hands the memory the process's allocator holds free back to the OS
// (glibc: malloc_trim(0), every arena); false where there is no such call.
bool give_back_freed_memory();

}  // namespace pstrain
