// ShmArena (common/transport/shm/shm_segment.h): a process's memory that a
// co-located peer maps read-only, and the descriptors of bodies lying in it.
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "common/base/errors.h"
#include "common/transport/shm/shm_memfd.h"
#include "common/transport/shm/shm_segment.h"

namespace pstrain {

using namespace shm_detail;  // shm_memfd.h

// ---------------------------------------------------------------------------
// ShmArena

namespace {

constexpr std::uint64_t kArenaMagic = 0x314e524152545350ULL;  // "PSTRARN1" read little-endian

struct ArenaHeader {
  std::uint64_t magic;
  std::uint64_t arena_id;
  std::uint64_t bytes;  // after the header page
  std::int32_t creator_pid;
};

}  // namespace

std::unique_ptr<ShmArena> ShmArena::create(std::size_t bytes) {
  if (bytes == 0 || bytes > kMaxTotalBytes - kHeaderBytes) {
    throw ConfigError("shm arena: size must be 1.." + std::to_string(kMaxTotalBytes - kHeaderBytes) + " bytes, got " +
                      std::to_string(bytes));
  }
  std::unique_ptr<ShmArena> a(new ShmArena());
  a->id_ = random_id();
  a->bytes_ = round_up(bytes, page_size());
  a->creator_pid_ = getpid();
  const std::size_t total = kHeaderBytes + a->bytes_;
  a->fd_ = memfd_create("pstrain-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (a->fd_ < 0) throw Error(std::string("shm arena: memfd_create failed: ") + std::strerror(errno));
  if (ftruncate(a->fd_, static_cast<off_t>(total)) != 0) {
    throw Error("shm arena: cannot size it to " + std::to_string(total) + " bytes: " + std::strerror(errno));
  }
  if (fcntl(a->fd_, F_ADD_SEALS, kRequiredSeals & ~unsigned{F_SEAL_SEAL}) != 0) {
    throw Error(std::string("shm arena: cannot seal its size: ") + std::strerror(errno));
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd_, 0);
  if (base == MAP_FAILED) {
    throw Error("shm arena: cannot map " + std::to_string(total) + " bytes: " + std::strerror(errno));
  }
  a->base_ = static_cast<std::byte*>(base);
  ArenaHeader header{kArenaMagic, a->id_, a->bytes_, a->creator_pid_};
  std::memcpy(a->base_, &header, sizeof header);
  // This mapping stays writable; no new one can be (Linux 5.1+), whoever
  // holds a descriptor and however it reopens it: peers only ever read.
  if (fcntl(a->fd_, F_ADD_SEALS, kFutureWriteSeal | F_SEAL_SEAL) != 0 &&
      (errno != EINVAL || fcntl(a->fd_, F_ADD_SEALS, F_SEAL_SEAL) != 0)) {
    throw Error(std::string("shm arena: cannot seal it against writers: ") + std::strerror(errno));
  }
  offer_memfd(a->fd_, a->id_, /*once=*/false, /*read_only=*/true);  // to every peer it is offered to
  return a;
}

std::unique_ptr<ShmArena> ShmArena::attach_read_only(const ShmAddress& address) {
  const std::string what = "shm arena " + hex(address.segment_id) + " of pid " + std::to_string(address.pid);
  OpenedMemfd opened;
  open_creator_memfd(address, what, /*read_only=*/true, kHeaderBytes + 1, opened);
  void* base = mmap(nullptr, address.bytes, PROT_READ, MAP_SHARED, opened.fd, 0);
  if (base == MAP_FAILED) throw Error(what + ": cannot map it: " + std::strerror(errno));
  std::unique_ptr<ShmArena> a(new ShmArena());
  a->base_ = static_cast<std::byte*>(base);
  a->bytes_ = address.bytes - kHeaderBytes;  // what is mapped: the destructor unmaps it whatever happens below
  ArenaHeader header;
  std::memcpy(&header, base, sizeof header);  // one snapshot, never read again
  if (header.magic != kArenaMagic) throw ProtocolError(what + ": not a pstrain arena");
  if (header.arena_id != address.segment_id || header.creator_pid != address.pid ||
      header.bytes != address.bytes - kHeaderBytes) {
    throw ProtocolError(what + ": the arena there is " + hex(header.arena_id) + " of pid " +
                        std::to_string(header.creator_pid) + ", " + std::to_string(header.bytes) +
                        " bytes (descriptor number reused?)");
  }
  a->id_ = header.arena_id;
  a->creator_pid_ = header.creator_pid;
  if (opened.pidfd >= 0 && pidfd_exited(opened.pidfd)) throw TransportError(what + ": the creating process is gone");
  return a;
}

ShmArena::~ShmArena() {
  if (base_ != nullptr) munmap(base_, kHeaderBytes + bytes_);
  if (fd_ >= 0) {
    withdraw_memfd(id_);
    ::close(fd_);
  }
}

bool ShmArena::holds(const void* p, std::size_t n) const {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const auto begin = reinterpret_cast<std::uintptr_t>(data());
  return at >= begin && at - begin <= bytes_ && n <= bytes_ - (at - begin);
}

std::span<const std::byte> ShmArena::range(std::uint64_t offset, std::uint64_t length) const {
  if (offset > bytes_ || length > bytes_ - offset) {
    throw ProtocolError("shm arena " + hex(id_) + ": bytes [" + std::to_string(offset) + ", +" +
                        std::to_string(length) + ") lie outside its " + std::to_string(bytes_) + " bytes");
  }
  return {data() + offset, static_cast<std::size_t>(length)};
}

std::array<std::byte, kShmArenaDescriptorBytes> encode_shm_arena_descriptor(const ShmArenaDescriptor& d) {
  std::array<std::byte, kShmArenaDescriptorBytes> out{};
  put(out.data(), d.arena_id, 8);
  put(out.data() + 8, d.offset, 8);
  put(out.data() + 16, d.length, 8);
  return out;
}

ShmArenaDescriptor decode_shm_arena_descriptor(std::span<const std::byte> bytes) {
  if (bytes.size() != kShmArenaDescriptorBytes) {
    throw ProtocolError("shm arena descriptor: expected " + std::to_string(kShmArenaDescriptorBytes) +
                        " bytes, got " + std::to_string(bytes.size()));
  }
  return ShmArenaDescriptor{get(bytes.data(), 8), get(bytes.data() + 8, 8), get(bytes.data() + 16, 8)};
}

}  // namespace pstrain
