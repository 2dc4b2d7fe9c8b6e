#include "common/transport/shm/shm_segment.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>

#include "common/base/errors.h"
#include "common/base/stream_copy.h"
#include "common/transport/shm/shm_memfd.h"

namespace pstrain {

using namespace shm_detail;  // shm_memfd.h

namespace {

constexpr std::uint64_t kMagic = 0x314d485352545350ULL;  // "PSTRSHM1" read little-endian
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kControlBytes = 128;  // the control block; the slots' state words follow
constexpr std::uint32_t kMaxSlotsPerSide = 65536;
constexpr std::size_t kMaxSlotBytes = std::size_t{1} << 30;

// Slot states (the low 32 bits of a slot's state word).
constexpr std::uint32_t kFree = 0, kWriting = 1, kReady = 2, kReading = 3;

// The control block at offset 0. Constant fields are written once by the
// creator before anyone else can map the segment; the pids and closed flags
// are accessed atomically.
struct ControlBlock {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t slots_per_side;
  std::uint64_t slot_bytes;
  std::uint64_t segment_id;
  std::uint64_t total_bytes;
  std::int32_t creator_pid;
  std::int32_t peer_pid;        // 0 until the peer has attached
  std::uint32_t creator_closed;  // 1 once the creator's side has closed
  std::uint32_t peer_closed;
};
static_assert(sizeof(ControlBlock) <= kControlBytes);

std::uint64_t word(std::uint32_t generation, std::uint32_t state) {
  return (std::uint64_t{generation} << 32) | state;
}
std::uint32_t generation_of(std::uint64_t w) { return static_cast<std::uint32_t>(w >> 32); }
std::uint32_t state_of(std::uint64_t w) { return static_cast<std::uint32_t>(w); }
const char* state_name(std::uint32_t state) {
  switch (state) {
    case kFree: return "free";
    case kWriting: return "being written";
    case kReady: return "published";
    case kReading: return "already opened";
    default: return "in an unknown state";
  }
}

struct Geometry {
  std::size_t slot_bytes = 0, payload_offset = 0, total_bytes = 0;
};
// slots_per_side and slot_bytes already within their caps, so nothing overflows.
Geometry geometry(std::uint32_t slots_per_side, std::size_t slot_bytes) {
  Geometry g;
  g.slot_bytes = round_up(slot_bytes, page_size());
  g.payload_offset = round_up(kControlBytes + 2 * std::size_t{slots_per_side} * sizeof(std::uint64_t), page_size());
  g.total_bytes = g.payload_offset + 2 * std::size_t{slots_per_side} * g.slot_bytes;
  return g;
}

template <typename T>
std::atomic_ref<T> atomic_at(T& field) {
  return std::atomic_ref<T>(field);
}

void pause_briefly() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

std::array<std::byte, kShmDescriptorBytes> encode_shm_descriptor(const ShmDescriptor& d) {
  std::array<std::byte, kShmDescriptorBytes> out{};
  put(out.data(), d.segment_id, 8);
  put(out.data() + 8, d.slot, 4);
  put(out.data() + 12, d.generation, 4);
  put(out.data() + 16, d.offset, 8);
  put(out.data() + 24, d.length, 8);
  return out;
}

ShmDescriptor decode_shm_descriptor(std::span<const std::byte> bytes) {
  if (bytes.size() != kShmDescriptorBytes) {
    throw ProtocolError("shm descriptor: expected " + std::to_string(kShmDescriptorBytes) + " bytes, got " +
                        std::to_string(bytes.size()));
  }
  ShmDescriptor d;
  d.segment_id = get(bytes.data(), 8);
  d.slot = static_cast<std::uint32_t>(get(bytes.data() + 8, 4));
  d.generation = static_cast<std::uint32_t>(get(bytes.data() + 12, 4));
  d.offset = get(bytes.data() + 16, 8);
  d.length = get(bytes.data() + 24, 8);
  return d;
}

std::array<std::byte, kShmAddressBytes> encode_shm_address(const ShmAddress& a) {
  std::array<std::byte, kShmAddressBytes> out{};
  put(out.data(), static_cast<std::uint32_t>(a.pid), 4);
  put(out.data() + 4, static_cast<std::uint32_t>(a.fd), 4);
  put(out.data() + 8, a.segment_id, 8);
  put(out.data() + 16, a.bytes, 8);
  return out;
}

ShmAddress decode_shm_address(std::span<const std::byte> bytes) {
  if (bytes.size() != kShmAddressBytes) {
    throw ProtocolError("shm address: expected " + std::to_string(kShmAddressBytes) + " bytes, got " +
                        std::to_string(bytes.size()));
  }
  ShmAddress a;
  a.pid = static_cast<std::int32_t>(static_cast<std::uint32_t>(get(bytes.data(), 4)));
  a.fd = static_cast<std::int32_t>(static_cast<std::uint32_t>(get(bytes.data() + 4, 4)));
  a.segment_id = get(bytes.data() + 8, 8);
  a.bytes = get(bytes.data() + 16, 8);
  return a;
}

void shm_stream_copy(void* destination, const void* source, std::size_t n) {
  constexpr std::size_t kStreamFrom = 256 * 1024;  // below this a plain copy stays in the caches, which is faster
  if (n >= kStreamFrom) {
    stream_copy(destination, source, n);
  } else {
    std::memcpy(destination, source, n);
  }
}

bool shm_process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno != EPERM) return false;
  // kill() succeeds on a zombie (dead, not yet reaped): look at its state.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const auto paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return true;
  const char state = text[paren + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

std::unique_ptr<ShmSegment> ShmSegment::create(const ShmOptions& options) {
  if (options.slots_per_side < 1 || options.slots_per_side > kMaxSlotsPerSide) {
    throw ConfigError("shm segment: slots_per_side must be 1.." + std::to_string(kMaxSlotsPerSide) + ", got " +
                      std::to_string(options.slots_per_side));
  }
  if (options.slot_bytes < 1 || options.slot_bytes > kMaxSlotBytes) {
    throw ConfigError("shm segment: slot_bytes must be 1.." + std::to_string(kMaxSlotBytes) + ", got " +
                      std::to_string(options.slot_bytes));
  }
  if (options.name.empty() || options.name.size() > 200 ||
      options.name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") !=
          std::string::npos) {
    throw ConfigError("shm segment: name '" + options.name + "' must be 1-200 characters of [A-Za-z0-9_.-]");
  }
  const Geometry g = geometry(options.slots_per_side, options.slot_bytes);
  if (g.total_bytes > kMaxTotalBytes) {
    throw ConfigError("shm segment: " + std::to_string(options.slots_per_side) + " x 2 slots of " +
                      std::to_string(g.slot_bytes) + " bytes exceed the cap of " + std::to_string(kMaxTotalBytes) +
                      " bytes");
  }

  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->side_ = Side::kCreator;
  s->id_ = random_id();
  s->slots_per_side_ = options.slots_per_side;
  s->slot_bytes_ = g.slot_bytes;
  s->payload_offset_ = g.payload_offset;
  s->total_bytes_ = g.total_bytes;
  s->creator_pid_ = getpid();

  const std::string name = "pstrain-" + options.name;
  s->fd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (s->fd_ < 0) throw Error("shm segment " + name + ": memfd_create failed: " + std::strerror(errno));
  if (ftruncate(s->fd_, static_cast<off_t>(g.total_bytes)) != 0) {
    throw Error("shm segment " + name + ": cannot size it to " + std::to_string(g.total_bytes) +
                " bytes: " + std::strerror(errno));
  }
  if (fcntl(s->fd_, F_ADD_SEALS, kRequiredSeals) != 0) {
    throw Error("shm segment " + name + ": cannot seal its size: " + std::strerror(errno));
  }
  void* base = mmap(nullptr, g.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (options.populate ? MAP_POPULATE : 0),
                    s->fd_, 0);
  if (base == MAP_FAILED) {
    throw Error("shm segment " + name + ": cannot map " + std::to_string(g.total_bytes) + " bytes: " +
                std::strerror(errno));
  }
  s->base_ = static_cast<std::byte*>(base);
  // A fresh memfd reads as zeros: every slot is free at generation 0.
  auto* control = reinterpret_cast<ControlBlock*>(s->base_);
  control->magic = kMagic;
  control->version = kVersion;
  control->slots_per_side = s->slots_per_side_;
  control->slot_bytes = s->slot_bytes_;
  control->segment_id = s->id_;
  control->total_bytes = s->total_bytes_;
  control->creator_pid = s->creator_pid_;
  atomic_at(control->peer_pid).store(0, std::memory_order_release);
  offer_memfd(s->fd_, s->id_, /*once=*/true, /*read_only=*/false);  // to its one peer (shm_memfd.h)
  return s;
}

std::unique_ptr<ShmSegment> ShmSegment::attach(const ShmAddress& address, bool populate) {
  const std::string what = "shm segment " + hex(address.segment_id) + " of pid " + std::to_string(address.pid);
  OpenedMemfd opened;
  open_creator_memfd(address, what, /*read_only=*/false, kControlBytes, opened);
  const int fd = opened.fd;
  void* base = mmap(nullptr, address.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  if (base == MAP_FAILED) throw Error(what + ": cannot map it: " + std::strerror(errno));

  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->side_ = Side::kPeer;
  s->base_ = static_cast<std::byte*>(base);
  s->total_bytes_ = address.bytes;  // what is mapped: the destructor unmaps it whatever happens below
  ControlBlock control;
  std::memcpy(&control, base, sizeof control);  // one snapshot; the geometry is never read from shared memory again
  if (control.magic != kMagic || control.version != kVersion) {
    throw ProtocolError(what + ": not a pstrain segment of version " + std::to_string(kVersion));
  }
  if (control.segment_id != address.segment_id || control.creator_pid != address.pid) {
    throw ProtocolError(what + ": the segment there is " + hex(control.segment_id) + " of pid " +
                        std::to_string(control.creator_pid) + " (descriptor number reused?)");
  }
  if (control.slots_per_side < 1 || control.slots_per_side > kMaxSlotsPerSide || control.slot_bytes < 1 ||
      control.slot_bytes > kMaxSlotBytes) {
    throw ProtocolError(what + ": bad geometry (" + std::to_string(control.slots_per_side) + " slots of " +
                        std::to_string(control.slot_bytes) + " bytes)");
  }
  const Geometry g = geometry(control.slots_per_side, control.slot_bytes);
  if (g.slot_bytes != control.slot_bytes || g.total_bytes != address.bytes || control.total_bytes != address.bytes) {
    throw ProtocolError(what + ": its geometry (" + std::to_string(control.slots_per_side) + " x 2 slots of " +
                        std::to_string(control.slot_bytes) + " bytes) does not add up to its size " +
                        std::to_string(address.bytes));
  }
  std::int32_t expected = 0;
  auto* shared = reinterpret_cast<ControlBlock*>(s->base_);
  if (!atomic_at(shared->peer_pid).compare_exchange_strong(expected, getpid(), std::memory_order_acq_rel)) {
    throw ProtocolError(what + ": already attached by pid " + std::to_string(expected));
  }
  s->id_ = control.segment_id;
  s->slots_per_side_ = control.slots_per_side;
  s->slot_bytes_ = g.slot_bytes;
  s->payload_offset_ = g.payload_offset;  // from here on this side has joined (the destructor marks it closed)
  s->creator_pid_ = control.creator_pid;
  if (opened.pidfd >= 0 && pidfd_exited(opened.pidfd)) throw TransportError(what + ": the creating process is gone");
  s->peer_pidfd_ = std::exchange(opened.pidfd, -1);
  s->peer_pidfd_of_ = control.creator_pid;
  return s;
}

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) {
    auto* control = reinterpret_cast<ControlBlock*>(base_);
    if (payload_offset_ != 0) {  // a peer that failed its checks never joined: leave the flags alone
      atomic_at(side_ == Side::kCreator ? control->creator_closed : control->peer_closed)
          .store(1, std::memory_order_release);
    }
    munmap(base_, total_bytes_);
  }
  if (fd_ >= 0) {
    withdraw_memfd(id_);  // not attached yet: no one gets it any more
    ::close(fd_);
  }
  if (peer_pidfd_ >= 0) ::close(peer_pidfd_);
}

pid_t ShmSegment::peer_pid() const {
  if (side_ == Side::kPeer) return creator_pid_;
  return atomic_at(reinterpret_cast<ControlBlock*>(base_)->peer_pid).load(std::memory_order_acquire);
}

ShmSegment::PeerState ShmSegment::peer_state() const {
  auto* control = reinterpret_cast<ControlBlock*>(base_);
  const pid_t pid = peer_pid();
  if (pid == 0) return PeerState::kNotAttached;
  const std::uint32_t closed =
      atomic_at(side_ == Side::kCreator ? control->peer_closed : control->creator_closed).load(std::memory_order_acquire);
  if (closed != 0) return PeerState::kClosed;
  const std::lock_guard<std::mutex> lock(pidfd_mutex_);
  if (peer_pidfd_of_ != pid) {  // creator side: the peer attached (or a new one did) since the last look
    if (peer_pidfd_ >= 0) ::close(peer_pidfd_);
    peer_pidfd_ = open_pidfd(pid);
    peer_pidfd_of_ = pid;
    // It may have exited (and its pid been reused) before the pidfd was
    // opened: the state word's pid and a live process are all there is then.
  }
  if (peer_pidfd_ >= 0) return pidfd_exited(peer_pidfd_) ? PeerState::kGone : PeerState::kAttached;
  return shm_process_alive(pid) ? PeerState::kAttached : PeerState::kGone;
}

std::string ShmSegment::describe() const {
  return "shm segment " + hex(id_) + " (" + (side_ == Side::kCreator ? "created here" : "created by pid " + std::to_string(creator_pid_)) + ")";
}

void ShmSegment::check_peer() const {
  switch (peer_state()) {
    case PeerState::kGone:
      throw TransportError(describe() + ": the peer process (pid " + std::to_string(peer_pid()) + ") is gone");
    case PeerState::kClosed:
      throw TransportError(describe() + ": the peer (pid " + std::to_string(peer_pid()) + ") closed the segment");
    default:
      return;
  }
}

std::uint64_t* ShmSegment::state_word(std::uint32_t slot) const {
  return reinterpret_cast<std::uint64_t*>(base_ + kControlBytes) + slot;
}

std::byte* ShmSegment::slot_data(std::uint32_t slot) const {
  return base_ + payload_offset_ + std::size_t{slot} * slot_bytes_;
}

std::uint32_t ShmSegment::free_slots() const {
  const std::uint32_t first = side_ == Side::kCreator ? 0 : slots_per_side_;
  std::uint32_t count = 0;
  for (std::uint32_t i = 0; i < slots_per_side_; ++i) {
    if (state_of(atomic_at(*state_word(first + i)).load(std::memory_order_relaxed)) == kFree) ++count;
  }
  return count;
}

std::optional<ShmSegment::WriteSlot> ShmSegment::try_acquire() {
  const std::uint32_t first = side_ == Side::kCreator ? 0 : slots_per_side_;
  // The lowest free slot: the few slots a steady stream cycles through stay warm in the caches.
  for (std::uint32_t index = 0; index < slots_per_side_; ++index) {
    auto state = atomic_at(*state_word(first + index));
    std::uint64_t current = state.load(std::memory_order_acquire);
    if (state_of(current) != kFree) continue;
    const std::uint32_t generation = generation_of(current) + 1;
    if (state.compare_exchange_strong(current, word(generation, kWriting), std::memory_order_acq_rel)) {
      return WriteSlot(this, first + index, generation, slot_data(first + index), slot_bytes_);
    }
  }
  return std::nullopt;
}

ShmSegment::WriteSlot ShmSegment::acquire(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next_check = start;
  auto sleep = std::chrono::microseconds(5);
  for (int attempt = 0;; ++attempt) {
    if (auto slot = try_acquire()) return std::move(*slot);
    if (attempt < 200) {
      pause_briefly();
      continue;
    }
    const auto now = Clock::now();
    if (now >= next_check) {
      check_peer();
      next_check = now + std::chrono::milliseconds(1);
    }
    if (now - start >= timeout) {
      throw TimeoutError(describe() + ": no free slot of " + std::to_string(slots_per_side_) + " after " +
                         std::to_string(timeout.count()) + " ms (the peer, pid " + std::to_string(peer_pid()) +
                         ", has not released them)");
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
  }
}

ShmSegment::ReadSlot ShmSegment::open(const ShmDescriptor& d) {
  const std::string what = describe() + ": descriptor of slot " + std::to_string(d.slot) + " generation " +
                           std::to_string(d.generation);
  if (d.segment_id != id_) throw ProtocolError(what + ": it names segment " + hex(d.segment_id));
  const std::uint32_t first = side_ == Side::kCreator ? slots_per_side_ : 0;  // the peer's slots
  if (d.slot < first || d.slot - first >= slots_per_side_) {
    throw ProtocolError(what + ": not a slot the peer writes (those are " + std::to_string(first) + ".." +
                        std::to_string(first + slots_per_side_ - 1) + ")");
  }
  if (d.offset > slot_bytes_ || d.length > slot_bytes_ - d.offset) {
    throw ProtocolError(what + ": bytes at offset " + std::to_string(d.offset) + ", length " +
                        std::to_string(d.length) + " outside the slot's " + std::to_string(slot_bytes_) + " bytes");
  }
  auto state = atomic_at(*state_word(d.slot));
  std::uint64_t expected = word(d.generation, kReady);
  if (!state.compare_exchange_strong(expected, word(d.generation, kReading), std::memory_order_acq_rel)) {
    if (generation_of(expected) != d.generation) {
      throw ProtocolError(what + ": stale, the slot is at generation " + std::to_string(generation_of(expected)));
    }
    throw ProtocolError(what + ": the slot is " + state_name(state_of(expected)) + ", not published");
  }
  return ReadSlot(this, d.slot, d.generation, slot_data(d.slot) + d.offset, static_cast<std::size_t>(d.length));
}

bool ShmSegment::retract(const ShmDescriptor& d) {
  const std::uint32_t first = side_ == Side::kCreator ? 0 : slots_per_side_;  // this side's slots
  if (d.segment_id != id_ || d.slot < first || d.slot - first >= slots_per_side_) return false;
  std::uint64_t expected = word(d.generation, kReady);
  return atomic_at(*state_word(d.slot))
      .compare_exchange_strong(expected, word(d.generation, kFree), std::memory_order_acq_rel);
}

bool ShmSegment::handed_back(const ShmDescriptor& d) const {
  const std::uint32_t first = side_ == Side::kCreator ? 0 : slots_per_side_;
  if (d.segment_id != id_ || d.slot < first || d.slot - first >= slots_per_side_) return false;
  const std::uint64_t now = atomic_at(*state_word(d.slot)).load(std::memory_order_acquire);
  return generation_of(now) != d.generation || state_of(now) == kFree;
}

ShmSegment::WriteSlot::WriteSlot(WriteSlot&& other) noexcept
    : segment_(other.segment_), slot_(other.slot_), generation_(other.generation_), data_(other.data_),
      size_(other.size_) {
  other.segment_ = nullptr;
}

ShmSegment::WriteSlot& ShmSegment::WriteSlot::operator=(WriteSlot&& other) noexcept {
  if (this != &other) {
    WriteSlot old(std::move(*this));  // gives back what this held

    segment_ = other.segment_;
    slot_ = other.slot_;
    generation_ = other.generation_;
    data_ = other.data_;
    size_ = other.size_;
    other.segment_ = nullptr;
  }
  return *this;
}

ShmSegment::WriteSlot::~WriteSlot() {
  if (segment_ == nullptr) return;
  std::uint64_t expected = word(generation_, kWriting);
  (void)atomic_at(*segment_->state_word(slot_))
      .compare_exchange_strong(expected, word(generation_, kFree), std::memory_order_acq_rel);
}

ShmDescriptor ShmSegment::WriteSlot::publish(std::size_t length, std::size_t offset) {
  if (segment_ == nullptr) throw Error("shm: publish of an empty or already published slot");
  if (offset > size_ || length > size_ - offset) {
    throw ConfigError("shm: cannot publish " + std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                      " of a " + std::to_string(size_) + "-byte slot");
  }
  ShmSegment* segment = segment_;
  segment_ = nullptr;
  std::uint64_t expected = word(generation_, kWriting);
  if (!atomic_at(*segment->state_word(slot_))
           .compare_exchange_strong(expected, word(generation_, kReady), std::memory_order_acq_rel)) {
    throw ProtocolError(segment->describe() + ": slot " + std::to_string(slot_) +
                        " was changed by the peer while being written (now generation " +
                        std::to_string(generation_of(expected)) + ", " + state_name(state_of(expected)) + ")");
  }
  return {segment->id_, slot_, generation_, offset, length};
}

ShmSegment::ReadSlot::ReadSlot(ReadSlot&& other) noexcept
    : segment_(other.segment_), slot_(other.slot_), generation_(other.generation_), data_(other.data_),
      size_(other.size_) {
  other.segment_ = nullptr;
}

ShmSegment::ReadSlot& ShmSegment::ReadSlot::operator=(ReadSlot&& other) noexcept {
  if (this != &other) {
    ReadSlot old(std::move(*this));  // gives back what this held

    segment_ = other.segment_;
    slot_ = other.slot_;
    generation_ = other.generation_;
    data_ = other.data_;
    size_ = other.size_;
    other.segment_ = nullptr;
  }
  return *this;
}

ShmSegment::ReadSlot::~ReadSlot() {
  try {
    release();
  } catch (const Error&) {
    // A peer that meddled with the slot's state: nothing to do here.
  }
}

void ShmSegment::ReadSlot::release() {
  if (segment_ == nullptr) return;
  ShmSegment* segment = segment_;
  segment_ = nullptr;
  std::uint64_t expected = word(generation_, kReading);
  if (!atomic_at(*segment->state_word(slot_))
           .compare_exchange_strong(expected, word(generation_, kFree), std::memory_order_acq_rel)) {
    throw ProtocolError(segment->describe() + ": slot " + std::to_string(slot_) +
                        " was changed by the peer while being read (now generation " +
                        std::to_string(generation_of(expected)) + ", " + state_name(state_of(expected)) + ")");
  }
}

}  // namespace pstrain
