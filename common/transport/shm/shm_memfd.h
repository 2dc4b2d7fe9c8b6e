// What a segment (ShmSegment) and an arena (ShmArena) share: memfd limits
// and seals, little-endian fields, ids, and opening a creator's memfd
// through /proc after checking it is one of ours. Internal to
// common/transport/shm/ (shm_segment.cc, shm_arena.cc).
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/transport/shm/shm_segment.h"

namespace pstrain::shm_detail {

inline constexpr std::uint64_t kMaxTotalBytes = std::uint64_t{64} << 30;
inline constexpr unsigned kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

std::size_t page_size();
inline std::size_t round_up(std::size_t value, std::size_t to) { return (value + to - 1) / to * to; }
// 16 hex digits.
std::string hex(std::uint64_t value);
// `bytes` bytes of `value`, little-endian, and back.
void put(std::byte* out, std::uint64_t value, int bytes);
std::uint64_t get(const std::byte* in, int bytes);
// A random non-zero id (Error when getrandom fails).
std::uint64_t random_id();

// A pidfd for `pid` (Linux 5.3+), or -1.
int open_pidfd(pid_t pid);
// A pidfd turns readable once its process has exited (zombie or reaped).
bool pidfd_exited(int pidfd);

// A descriptor and pidfd closed unless released.
struct OpenedMemfd {
  int fd = -1;
  int pidfd = -1;
  OpenedMemfd() = default;
  OpenedMemfd(const OpenedMemfd&) = delete;
  OpenedMemfd& operator=(const OpenedMemfd&) = delete;
  ~OpenedMemfd() {
    if (fd >= 0) ::close(fd);
    if (pidfd >= 0) ::close(pidfd);
  }
};

// Opens the memfd `address` names in its creator's process, after checking
// that it is one of ours (a pstrain memfd, sealed against resizing, shmem)
// of exactly address.bytes (at least min_bytes, at most 64 GiB), with a
// pidfd pinning that process. ProtocolError / TransportError as attach says.
void open_creator_memfd(const ShmAddress& address, const std::string& what, bool read_only, std::uint64_t min_bytes,
                        OpenedMemfd& out);

}  // namespace pstrain::shm_detail
