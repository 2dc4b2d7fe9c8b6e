#include "common/transport/shm/shm_memfd.h"

#include <poll.h>
#include <linux/magic.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "common/base/errors.h"

namespace pstrain::shm_detail {

std::size_t page_size() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<std::size_t>(page) : 4096;
}

std::string hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

void put(std::byte* out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
}
std::uint64_t get(const std::byte* in, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= std::uint64_t{std::to_integer<std::uint8_t>(in[i])} << (8 * i);
  return value;
}

std::uint64_t random_id() {
  std::uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof id, 0) != static_cast<ssize_t>(sizeof id)) {
      throw Error(std::string("shm segment: getrandom failed: ") + std::strerror(errno));
    }
  }
  return id;
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  if (pid <= 0) return -1;
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) return -1;
  ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  return static_cast<int>(fd);
#else
  (void)pid;
  return -1;
#endif
}

bool pidfd_exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

// Receives the memfd `address` names from its creator's memfd share, after
// checking that it is one of ours (a pstrain memfd, sealed against resizing,
// shmem) of exactly address.bytes (at least min_bytes, at most 64 GiB), with
// a pidfd pinning that process. ProtocolError / TransportError as attach says.
void open_creator_memfd(const ShmAddress& address, const std::string& what, bool read_only, std::uint64_t min_bytes,
                        OpenedMemfd& out) {
  if (address.pid <= 0 || address.fd < 0 || address.segment_id == 0) {
    throw ProtocolError(what + ": bad address (pid " + std::to_string(address.pid) + ", fd " +
                        std::to_string(address.fd) + ")");
  }
  if (address.bytes < min_bytes || address.bytes > kMaxTotalBytes) {
    throw ProtocolError(what + ": size " + std::to_string(address.bytes) + " outside " + std::to_string(min_bytes) +
                        ".." + std::to_string(kMaxTotalBytes));
  }
  if (!shm_process_alive(address.pid)) throw TransportError(what + ": the creating process is gone");
  // Pin the process first: if it is still alive once the descriptor below is
  // received, the share that sent it was that process's (its pid cannot have
  // been reused meanwhile), and the pidfd tells when exactly it is gone.
  out.pidfd = open_pidfd(address.pid);
  out.fd = receive_memfd(address, what);
  // Only ever map one of our memfds, whatever the share sent.
  const std::string path = "/proc/self/fd/" + std::to_string(out.fd);
  char target[256] = {};
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
  if (n < 0) throw TransportError(what + ": cannot read " + path + ": " + std::strerror(errno));
  if (std::string_view(target, static_cast<std::size_t>(n)).rfind("/memfd:pstrain-", 0) != 0) {
    throw ProtocolError(what + ": what pid " + std::to_string(address.pid) + " sent is not a pstrain memfd (it is " +
                        std::string(target, static_cast<std::size_t>(n)) + ")");
  }
  if (read_only) {
    // Map it read-only whatever the share sent: a descriptor of our own, read-only.
    const int ro = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ro < 0) throw TransportError(what + ": cannot reopen it read-only: " + std::strerror(errno));
    ::close(out.fd);
    out.fd = ro;
  } else if ((fcntl(out.fd, F_GETFL) & O_ACCMODE) != O_RDWR) {
    throw ProtocolError(what + ": pid " + std::to_string(address.pid) + " sent it read-only");
  }
  const int seals = fcntl(out.fd, F_GET_SEALS);
  if (seals < 0 || (static_cast<unsigned>(seals) & kRequiredSeals) != kRequiredSeals) {
    throw ProtocolError(what + ": it is not a memfd sealed against resizing");
  }
  struct statfs fs {};
  if (fstatfs(out.fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {  // not hugetlbfs: its pages can run out (SIGBUS)
    throw ProtocolError(what + ": it is not an ordinary (shmem) memfd");
  }
  struct stat st {};
  if (fstat(out.fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != address.bytes) {
    throw ProtocolError(what + ": its size is " + std::to_string(st.st_size) + " bytes, the address says " +
                        std::to_string(address.bytes));
  }
}

}  // namespace pstrain::shm_detail
