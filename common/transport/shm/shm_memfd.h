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
// No new writable mapping nor write(2), existing mappings untouched (Linux
// 5.1+; older kernels refuse it with EINVAL): an arena's, added once its
// creator has mapped it (and F_SEAL_SEAL only then: it forbids new seals).
#ifdef F_SEAL_FUTURE_WRITE
inline constexpr unsigned kFutureWriteSeal = F_SEAL_FUTURE_WRITE;
#else
inline constexpr unsigned kFutureWriteSeal = 0x0010;
#endif

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

// Receives the memfd `address` names from its creator's process (below:
// SCM_RIGHTS from the creator's memfd share, never /proc/<pid>/fd, which a
// non-dumpable creator closes to every other process of its user), after
// checking that it is one of ours (a pstrain memfd, sealed against resizing,
// shmem) of exactly address.bytes (at least min_bytes, at most 64 GiB), with
// a pidfd pinning that process. ProtocolError / TransportError as attach says.
void open_creator_memfd(const ShmAddress& address, const std::string& what, bool read_only, std::uint64_t min_bytes,
                        OpenedMemfd& out);

// The memfd share (shm_memfd_share.cc): how a segment or an arena reaches
// its peer. Every process that creates one serves a unix socket in the
// abstract namespace, "pstrain-memfd-<pid>" (SOCK_SEQPACKET, one thread,
// started with the first offer). A peer connects, checks with SO_PEERCRED
// that the socket is served by the creator's pid and its own uid (a process
// that took the name first is refused), and asks for (id, fd number) as its
// address says; the share answers with the descriptor (SCM_RIGHTS) when that
// memfd is on offer, else no with the reason. The 64-bit random id is the
// capability: it travels only to the intended peer (the hello, the arena
// offer), so another process of the user that cannot read the creator's
// memory (non-dumpable: /proc/<pid>/fd, /mem and ptrace closed to it) cannot
// ask for it. A segment is handed out once (its one peer: a second asker,
// even with the id, gets no); an arena to every asker, as a read-only
// descriptor of a memfd sealed against new writable mappings
// (F_SEAL_FUTURE_WRITE), so no receiver can write it, even by reopening.
//
// Puts `fd` (a memfd, named by `id`) on offer: the share keeps a descriptor
// of its own (a read-only reopening when `read_only`) until withdrawn or,
// with `once`, handed out. Error when the share cannot start (no socket).
void offer_memfd(int fd, std::uint64_t id, bool once, bool read_only);
// Takes the offer of `id` back (nothing if there is none).
void withdraw_memfd(std::uint64_t id);
// Asks `address.pid`'s share for (address.segment_id, address.fd): the
// descriptor received, owned by the caller. TransportError when the share
// cannot be reached or says no (not on offer: never offered, withdrawn or
// handed out already), ProtocolError when someone other than the creator
// answers.
int receive_memfd(const ShmAddress& address, const std::string& what);
// The share's socket name for `pid` (abstract: a leading NUL).
std::string memfd_share_name(pid_t pid);

}  // namespace pstrain::shm_detail
