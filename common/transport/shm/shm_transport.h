// ShmTransport: the transport interface (common/transport/transport.h) with ZeroMQ for
// messages and shared memory for the tensors of a worker and a server on one
// host (cluster.transport = "shm", the default; docs/architecture.md,
// "Shared memory").
//
// Endpoints are ZeroMQ sockets as ZmqTransport's (tcp://, ipc://, inproc://;
// same queue bounds, frame cap, CURVE), and a message that can go through
// shared memory goes as ZmqTransport's would: nothing changes for a peer on
// another host or for the scheduler. What is added:
//   - A Connection made with EndpointOptions::carries_tensors (a worker's KV
//     client to a server) creates a segment (common/transport/shm/shm_segment.h) and sends
//     its address in a hello. The listener attaches to it when it can (same
//     host, same user: from the creator's memfd share, shm_memfd.h) and answers yes or
//     no; until a yes arrives, and after a no, everything goes inline.
//   - Then a body of at least min_bytes that fits a slot is copied into a free
//     slot of the sender's side and only its 32-byte descriptor travels over
//     ZeroMQ. The receiver opens it and hands the bytes up in place (the
//     payload frame points into the slot; the slot is released when the
//     message is dropped). No free slot: the body goes inline, so a send never
//     waits on shared memory and neither side can block the other.
//   - The descriptor is checked (ShmSegment::open: segment, slot, bounds,
//     generation, state) before anything reads the slot; a bad one is a
//     ProtocolError naming the sender, as for frames decode_message refuses,
//     and the message is dropped. The header and payload then go through
//     decode_message like every other transport's. A descriptor from a
//     connection the listener holds no segment for (it said hello to an
//     earlier process at this address: a restarted server) cannot be read:
//     it is dropped, as if lost with that process, and the connection is told
//     no (inline from then on).
//   - A peer that changes a slot's state word while this side writes the slot
//     (it shares the memory) only loses the segment: that body goes inline
//     and the segment is dropped (listener) or no longer used (connection).
//   - Memory from allocate_send_floats() is a block of an arena
//     (common/transport/shm/shm_segment.h, ShmArena) of this process. A body lying wholly
//     in one is not copied at all: the other side reads it in place through
//     its read-only mapping. Per connection an arena is offered once (its
//     address), in either direction, and used after the other side's yes;
//     until then, and after a no, such bodies go through slots or inline.
//       push (connection -> listener): a 24-byte arena descriptor; a
//       worker's gradients, read by the server's update where backward's
//       copy put them. An arena descriptor the listener holds no arena for
//       is dropped and the connection told no, as an orphan slot descriptor.
//       reply (listener -> connection): the arena descriptor and the
//       descriptor of an empty slot of the listener's side; a server's
//       weights, copied by the worker straight into its model, or their
//       whole pages mapped there (map_shared_pages, the reply held
//       meanwhile: worker/client/pull_pages.h). The worker
//       releases the slot with the frame, and only then does the listener
//       let go of the body (the weights' owner), so the server never writes
//       weights a worker still reads; with all its slots unreleased, replies
//       go inline.
//     Every arena descriptor is checked against the receiver's own copy of
//     the arena's size.
//   - A hello carries the host's boot id and the process's pid namespace;
//     the listener attaches only with both equal, only to a pstrain memfd
//     (common/transport/shm/shm_segment.h), only up to twice this job's segment size, and
//     a new hello from a connection replaces its old segment.
// Messages of the shared-memory layer start with an 8-byte tag frame
// ("PSTRSHM" + kind), which no header frame can be:
//   hello   [tag 'H', address (24 bytes) + the sender's boot id]
//   yes     [tag 'A']            no  [tag 'R', reason]
//   data    [tag 'D', header, descriptor (32 bytes)]
//   arena offer [tag 'G', address (24 bytes)]
//   arena yes   [tag 'B', arena id (8 bytes)]   arena no [tag 'N', arena id (8 bytes) + reason]
//   arena data  [tag 'P', header, arena descriptor (24 bytes)]          (to a listener)
//   arena reply [tag 'W', header, slot descriptor, arena descriptor]  (to a connection)
// Nothing is left behind by a killed process: segments are memfds
// (common/transport/shm/shm_segment.h); a listener drops a segment once its peer's process
// is gone or its connection is replaced by a new hello.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/transport/shm/shm_segment.h"
#include "common/transport/transport.h"

namespace zmq {
class context_t;  // cppzmq's; only the .cc files of this folder need it whole
}  // namespace zmq

namespace pstrain {

struct ShmTransportOptions {
  ShmOptions segment;                 // each connection's segment: slots per side, slot size
  std::size_t min_bytes = 64 * 1024;  // smaller bodies travel inline (a copy there is cheaper than a slot)
  std::size_t max_segments = 1024;    // per listener: more peers get "no" (they go inline)
};

// Slots sized for a job whose tensors travel in chunks of at most
// `partition_bytes` (ps.partition_bytes): one slot per chunk, as many as fit
// in 64 MiB a side (at least 8, at most 256). Pages are touched only as
// slots are used, and stay resident while the segment lives: up to 128 MiB
// per worker-server pair on one host after a burst that fills every slot.
ShmTransportOptions shm_options_for(std::int64_t partition_bytes);

class ShmTransport final : public Transport {
 public:
  // Uses `ctx` (not owned; it must outlive the transport and its endpoints).
  ShmTransport(zmq::context_t& ctx, ShmTransportOptions options);
  // Owns a context of its own.
  explicit ShmTransport(ShmTransportOptions options);
  ~ShmTransport() override;

  std::unique_ptr<Listener> listen(const std::string& address, EndpointOptions options) override;
  std::unique_ptr<Connection> connect(const std::string& address, EndpointOptions options) override;
  std::vector<bool> wait_any(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout) override;
  std::unique_ptr<ZapHandler> authenticate(const SecurityContext* security, Logger& log) override;
  std::string_view kind() const override { return "shm"; }
  // A block of an arena (see above): this process's arenas are a pool of at
  // most 8 memfds (64 MiB, then twice the last, or the block's size), blocks
  // page aligned, given back to the pool when their owner goes. Ordinary
  // memory when the pool is used up or the system refuses a memfd.
  SendFloats allocate_send_floats(std::size_t count) override;
  // A pull reply lying in the server's arena (a 'W' reply, held while its
  // frame lives): that arena's id; the pages stay unchanged while the frame
  // is held (the server updates out of place then). Else 0.
  std::uint64_t shared_pages_of(Buffer& frame) const override;
  // Such a reply's pages mapped a second time, read-only, at `dest` (mremap
  // of the read-only mapping with old size 0: the same shared pages).
  bool map_shared_pages(Buffer& frame, std::size_t offset, void* dest, std::size_t bytes) override;
  // The live arena of this transport holding [data, data + bytes) whole, or null.
  std::shared_ptr<ShmArena> arena_holding(const void* data, std::size_t bytes) const;

  // What this process's endpoints moved (tests, benchmarks).
  struct Stats {
    std::uint64_t shm_bodies = 0;     // bodies sent through a slot
    std::uint64_t inline_bodies = 0;  // bodies sent over ZeroMQ (small, no segment, no free slot)
    std::uint64_t no_free_slot = 0;   // of those, sent inline because every slot was in flight
    std::uint64_t accepted = 0;       // hellos this process's listeners said yes to
    std::uint64_t refused = 0;        // hellos they said no to
    std::uint64_t orphan_descriptors = 0;  // descriptors from connections with no segment here: dropped, told no
    std::uint64_t meddled = 0;        // slots whose state the peer changed while this side wrote them
    std::uint64_t noes_heard = 0;     // no answers this process's connections got (then inline)
    std::uint64_t arena_bodies = 0;   // bodies sent as arena descriptors (read in place, never copied)
    std::uint64_t arenas_accepted = 0;  // arena offers this process's listeners said yes to
    std::uint64_t arenas_refused = 0;   // and no to
    std::uint64_t arena_bodies_read = 0;  // bodies this process's listeners read in place in a peer's arena
  };
  Stats stats() const;

  const ShmTransportOptions& options() const { return options_; }
  zmq::context_t& context() { return ctx_; }  // its options (I/O threads) may be set before the first endpoint
  const std::string& boot_id() const { return boot_id_; }

  // Internal (the endpoints count through these).
  struct Counters {
    std::atomic<std::uint64_t> shm_bodies{0}, inline_bodies{0}, no_free_slot{0}, accepted{0}, refused{0},
        orphan_descriptors{0}, meddled{0}, noes_heard{0}, arena_bodies{0}, arenas_accepted{0}, arenas_refused{0},
        arena_bodies_read{0};
  };
  Counters& counters() { return counters_; }

 private:
  std::unique_ptr<zmq::context_t> owned_;
  zmq::context_t& ctx_;
  ShmTransportOptions options_;
  std::string boot_id_;  // this host's boot: a hello from another is refused at once
  Counters counters_;
  std::shared_ptr<class ShmArenaPool> pool_;  // allocate_send_floats' arenas (shared with the blocks it gave out)
};

}  // namespace pstrain
