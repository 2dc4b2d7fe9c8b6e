// Shared-memory segments between two processes on one host: the data path of
// the "shm" transport (ZeroMQ carries only headers and these descriptors).
//
// One segment per connection (a worker and a server). It is an anonymous
// memfd, not a name in /dev/shm: nothing can be left behind by a killed
// process, because the kernel frees the memory once the last descriptor and
// mapping of it are gone, whoever dies and however.
//   - The creator makes it (memfd_create), sizes it, seals its size
//     (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL: no one can shrink it under a
//     mapping, so no access can raise SIGBUS), writes the control block and
//     puts it on offer, once, in its memfd share (shm_memfd.h: a unix socket
//     that hands it out by SCM_RIGHTS to whoever names its random id first).
//     Its ShmAddress (pid, fd number, segment id, size) travels to the peer
//     over ZeroMQ.
//   - The peer receives it from the creator's share (same user, the socket
//     checked to be the creator's; a non-dumpable creator's /proc/<pid>/fd is
//     closed to it, as to every other process of the user), checks the seals, the
//     size, the magic and the segment id against the address, maps it and
//     records its pid in the control block. The creator must stay alive until
//     then (if it died, attach raises TransportError).
// Layout: a control block (magic, version, geometry, both pids, closed flags),
// one 64-bit state word per slot, then 2 x slots_per_side payload slots, each
// slot_bytes (rounded up to whole pages). Slots [0, n) are written by the
// creator, [n, 2n) by the peer; each side only ever reads the other side's.
//
// A slot's life (its state word holds generation << 32 | state):
//   writer: acquire()  free -> writing, generation + 1; fill bytes() in place;
//           publish(length) writing -> ready: returns the descriptor to send
//   reader: open(descriptor) ready -> reading, after checking it (below);
//           read bytes() in place; release (or the ReadSlot's destructor)
//           reading -> free, and the writer may take it again.
// Every transition is a compare-and-swap on the expected generation, so a
// replayed, stale or forged descriptor cannot claim a slot twice.
//
// What open() checks (each failure a ProtocolError saying which and why,
// never a read out of bounds): the segment id is this segment's; the slot
// index exists and is one the peer writes; offset + length lie inside the
// slot (no overflow); the generation is the slot's current one; the slot is
// published and not yet opened. Bounds come from this process's own copy of
// the geometry, checked once at attach, never re-read from shared memory,
// which the peer can write at any time. The bytes themselves can still change
// under a reader while it reads them (the peer shares the memory): a consumer
// that must check values before using them (the finite check of a gradient)
// should check and use them in one pass, or copy first.
//
// Waiting: acquire() waits for a free slot with a short spin then sleeps of at
// most 1 ms, and raises TransportError as soon as the peer's process is gone
// or has closed its side, TimeoutError after its timeout: never a hang.
// Threads: acquire/open/release may be called from several threads of one
// process; a WriteSlot or ReadSlot belongs to one thread and must not outlive
// its segment.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

namespace pstrain {

// Where a slot's published bytes are: what travels in a message over ZeroMQ
// instead of the bytes. `offset` and `length` are relative to the slot's start.
struct ShmDescriptor {
  std::uint64_t segment_id = 0;
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  bool operator==(const ShmDescriptor&) const = default;
};
inline constexpr std::size_t kShmDescriptorBytes = 32;
// Little-endian, fixed size. decode throws ProtocolError on a wrong size.
std::array<std::byte, kShmDescriptorBytes> encode_shm_descriptor(const ShmDescriptor& descriptor);
ShmDescriptor decode_shm_descriptor(std::span<const std::byte> bytes);

// How the peer finds a segment: sent once, when the connection is set up.
struct ShmAddress {
  std::int32_t pid = 0;  // the creator's process
  std::int32_t fd = -1;  // the memfd's descriptor number in that process
  std::uint64_t segment_id = 0;
  std::uint64_t bytes = 0;  // the whole segment's size
  bool operator==(const ShmAddress&) const = default;
};
inline constexpr std::size_t kShmAddressBytes = 24;
std::array<std::byte, kShmAddressBytes> encode_shm_address(const ShmAddress& address);
ShmAddress decode_shm_address(std::span<const std::byte> bytes);

struct ShmOptions {
  std::uint32_t slots_per_side = 16;    // in-flight messages each way (1..65536)
  std::size_t slot_bytes = 1 << 20;     // the largest message (rounded up to pages; at most 1 GiB)
  std::string name = "seg";             // shown as memfd:pstrain-<name> in /proc/<pid>/maps; [A-Za-z0-9_.-], <= 200
  bool populate = true;                 // fault every page in at create/attach, not in the first rounds
};

// Copies `n` bytes for another process to read: with non-temporal (streaming)
// stores on x86-64 when `n` is large, so filling a slot does not evict the
// writer's caches nor read the slot's old contents first; plain memcpy
// otherwise. The stores are ordered before a following publish().
void shm_stream_copy(void* destination, const void* source, std::size_t n);

// True when `pid` names a live process (not a zombie) of this host.
bool shm_process_alive(pid_t pid);

class ShmSegment {
 public:
  enum class Side : std::uint8_t { kCreator, kPeer };
  enum class PeerState : std::uint8_t { kNotAttached, kAttached, kClosed, kGone };

  class WriteSlot;
  class ReadSlot;

  // Throws Error when the system refuses (memfd, size, mmap) and ConfigError
  // on bad options.
  static std::unique_ptr<ShmSegment> create(const ShmOptions& options);
  // Throws ProtocolError when the address or segment does not check out and
  // TransportError when the creator is gone or its descriptor cannot be opened.
  static std::unique_ptr<ShmSegment> attach(const ShmAddress& address, bool populate = true);

  ~ShmSegment();  // marks this side closed, unmaps, closes the descriptor
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  ShmAddress address() const { return {creator_pid_, side_ == Side::kCreator ? fd_ : -1, id_, total_bytes_}; }
  Side side() const { return side_; }
  std::uint64_t id() const { return id_; }
  std::uint32_t slots_per_side() const { return slots_per_side_; }
  std::size_t slot_bytes() const { return slot_bytes_; }
  std::size_t total_bytes() const { return total_bytes_; }
  pid_t peer_pid() const;

  // A free slot of this side, or nothing when all are in flight.
  std::optional<WriteSlot> try_acquire();
  // Waits for a free slot; TransportError when the peer is gone or closed,
  // TimeoutError after `timeout`.
  WriteSlot acquire(std::chrono::milliseconds timeout);
  // Validates `descriptor` (see above) and claims its slot. ProtocolError.
  ReadSlot open(const ShmDescriptor& descriptor);
  // Takes back a slot this side published whose descriptor never reached the
  // peer (its send failed): published -> free. False when the descriptor is
  // not one of this side's published slots (the peer opened it already).
  bool retract(const ShmDescriptor& descriptor);
  // Whether the peer is done with a slot this side published: it released
  // it (free again) or it has been taken again since (a newer generation).
  // False while it is published or being read, and for a descriptor that is
  // not one of this side's slots.
  bool handed_back(const ShmDescriptor& descriptor) const;

  PeerState peer_state() const;
  // Throws TransportError naming the peer when it is gone or has closed.
  void check_peer() const;
  // Slots of this side not in flight (diagnostics, tests).
  std::uint32_t free_slots() const;

  class WriteSlot {
   public:
    WriteSlot(WriteSlot&& other) noexcept;
    WriteSlot& operator=(WriteSlot&& other) noexcept;
    ~WriteSlot();  // not published: the slot goes back to free
    std::span<std::byte> bytes() const { return {data_, size_}; }
    std::uint32_t slot() const { return slot_; }
    // Hands bytes [offset, offset + length) to the peer: returns the
    // descriptor to send. The WriteSlot is empty afterwards. Throws
    // ConfigError on bounds, ProtocolError if the peer changed the slot's state.
    ShmDescriptor publish(std::size_t length, std::size_t offset = 0);

   private:
    friend class ShmSegment;
    WriteSlot(ShmSegment* segment, std::uint32_t slot, std::uint32_t generation, std::byte* data, std::size_t size)
        : segment_(segment), slot_(slot), generation_(generation), data_(data), size_(size) {}
    ShmSegment* segment_ = nullptr;
    std::uint32_t slot_ = 0, generation_ = 0;
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
  };

  class ReadSlot {
   public:
    ReadSlot(ReadSlot&& other) noexcept;
    ReadSlot& operator=(ReadSlot&& other) noexcept;
    ~ReadSlot();  // releases (errors ignored: use release() to see them)
    std::span<const std::byte> bytes() const { return {data_, size_}; }
    // The slot back to its writer. Throws ProtocolError if the peer changed
    // its state meanwhile. The ReadSlot is empty afterwards.
    void release();

   private:
    friend class ShmSegment;
    ReadSlot(ShmSegment* segment, std::uint32_t slot, std::uint32_t generation, const std::byte* data, std::size_t size)
        : segment_(segment), slot_(slot), generation_(generation), data_(data), size_(size) {}
    ShmSegment* segment_ = nullptr;
    std::uint32_t slot_ = 0, generation_ = 0;
    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
  };

 private:
  ShmSegment() = default;
  std::uint64_t* state_word(std::uint32_t slot) const;
  std::byte* slot_data(std::uint32_t slot) const;
  std::string describe() const;

  Side side_ = Side::kCreator;
  int fd_ = -1;
  std::byte* base_ = nullptr;
  // This process's copy of the geometry: every bound is checked against it.
  std::uint64_t id_ = 0;
  std::uint32_t slots_per_side_ = 0;
  std::size_t slot_bytes_ = 0, payload_offset_ = 0, total_bytes_ = 0;
  pid_t creator_pid_ = 0;
  // The peer's process, watched through a pidfd (a pid can be reused once
  // its process is gone; a pidfd names that one process): opened at attach
  // (peer side), or when the peer is first seen (creator side). -1: none
  // (no pidfd on this kernel): kill(pid, 0) instead.
  mutable std::mutex pidfd_mutex_;  // peer_state() may run on several threads
  mutable int peer_pidfd_ = -1;
  mutable pid_t peer_pidfd_of_ = 0;  // the pid it was opened for
};

// Memory a process sends tensors from (a worker's gradients), readable in
// place by co-located peers: the "arena" of the shm transport
// (common/transport/shm/shm_transport.h). Unlike a segment's slots it has no state words:
// its owner writes it as its own memory, and a peer reads bodies lying in it
// only when told to by a message, while the owner keeps them unchanged
// until that message's reply (the contract of Payload's zero-copy sends).
//   - The creator makes a memfd ("pstrain-arena"), sizes it, seals its size
//     and writes a header page (magic, id, size, pid); the rest is the
//     memory, page aligned, zeroed.
//   - A peer receives it read-only from the creator's memfd share (which
//     hands an arena to every asker naming its id; the memfd is sealed with
//     F_SEAL_FUTURE_WRITE once the creator has mapped it, so no one else can
//     ever map it writable or write it) after the same checks as a
//     segment's attach (same user, a pstrain memfd, sealed, shmem, the size
//     and id the address says) and maps it read-only: it can never write the
//     owner's memory. Bounds come from its own copy of the size.
// A killed process leaves nothing behind, as for segments.
class ShmArena {
 public:
  static constexpr std::size_t kHeaderBytes = 4096;
  // Throws ConfigError for 0 or more than 64 GiB, Error when the system refuses.
  static std::unique_ptr<ShmArena> create(std::size_t bytes);
  // Read-only. ProtocolError when the address or memfd does not check out,
  // TransportError when the creator is gone.
  static std::unique_ptr<ShmArena> attach_read_only(const ShmAddress& address);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  // The memfd's address (creator side; bytes is the whole memfd's size).
  ShmAddress address() const { return {creator_pid_, fd_, id_, kHeaderBytes + bytes_}; }
  std::uint64_t id() const { return id_; }
  std::size_t size() const { return bytes_; }
  // The memory (creator: writable; peer: mapped read-only).
  std::byte* data() const { return base_ + kHeaderBytes; }
  // Whether [p, p + n) lies inside data().
  bool holds(const void* p, std::size_t n) const;
  // [offset, offset + length) inside data(), or a ProtocolError saying why not.
  std::span<const std::byte> range(std::uint64_t offset, std::uint64_t length) const;

 private:
  ShmArena() = default;
  int fd_ = -1;
  std::byte* base_ = nullptr;
  std::uint64_t id_ = 0;
  std::size_t bytes_ = 0;  // after the header
  pid_t creator_pid_ = 0;
};

// Where a body lies in its sender's arena: what a data message of the arena
// kind carries instead of the bytes (24 bytes, little-endian).
struct ShmArenaDescriptor {
  std::uint64_t arena_id = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  bool operator==(const ShmArenaDescriptor&) const = default;
};
inline constexpr std::size_t kShmArenaDescriptorBytes = 24;
std::array<std::byte, kShmArenaDescriptorBytes> encode_shm_arena_descriptor(const ShmArenaDescriptor& descriptor);
ShmArenaDescriptor decode_shm_arena_descriptor(std::span<const std::byte> bytes);

}  // namespace pstrain
