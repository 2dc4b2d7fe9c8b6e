// The memfd share (common/transport/shm/shm_memfd.h): segments and arenas
// handed to their peers over a unix socket (SCM_RIGHTS), so that a creator
// can be non-dumpable (its /proc/<pid>/fd closed to other processes of its
// user) and still be attached to.
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/base/errors.h"
#include "common/transport/shm/shm_memfd.h"

namespace pstrain::shm_detail {

namespace {

constexpr std::size_t kRequestBytes = 16;  // id (8, little-endian), fd number (4), reserved (4)
constexpr std::size_t kMaxAnswerBytes = 256;
constexpr char kGiven = 'Y', kRefused = 'N';

sockaddr_un share_address(pid_t pid, socklen_t& length) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = memfd_share_name(pid);
  std::memcpy(a.sun_path, name.data(), name.size());  // abstract: starts with NUL, not NUL-terminated
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  return a;
}

void set_timeout(int socket, int option, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(socket, SOL_SOCKET, option, &tv, sizeof tv);
}

// One per process (a forked child gets a share of its own on its first
// offer: threads do not survive fork). Never destroyed: its thread serves
// until the process exits.
class MemfdShare {
 public:
  static MemfdShare& of_this_process() {
    static std::mutex mutex;
    static MemfdShare* share = nullptr;
    const std::lock_guard<std::mutex> lock(mutex);
    if (share == nullptr || share->pid_ != getpid()) share = new MemfdShare();  // a forked child's: the parent's is left
    return *share;
  }

  void offer(int fd, std::uint64_t id, bool once, bool read_only) {
    start();
    // A descriptor of the share's own, so that the creator closing its fd
    // never leaves a number here that a later open could reuse.
    const int own = read_only ? ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC)
                              : ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) throw Error("shm memfd share: cannot keep a descriptor of memfd " + hex(id) + ": " + std::strerror(errno));
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto old = offers_.find(id);
    if (old != offers_.end()) ::close(old->second.fd);
    offers_[id] = Offer{own, fd, once};
  }

  void withdraw(std::uint64_t id) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = offers_.find(id);
    if (it == offers_.end()) return;
    ::close(it->second.fd);
    offers_.erase(it);
  }

 private:
  struct Offer {
    int fd = -1;         // the share's own descriptor
    int number = -1;     // the creator's descriptor number (what an address names)
    bool once = false;
  };

  MemfdShare() : pid_(getpid()) {}

  // Binds the socket and starts the thread, once. Error when it cannot.
  void start() {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (listening_ >= 0) return;
    const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) throw Error(std::string("shm memfd share: socket failed: ") + std::strerror(errno));
    socklen_t length = 0;
    const sockaddr_un a = share_address(pid_, length);
    if (::bind(s, reinterpret_cast<const sockaddr*>(&a), length) != 0 || ::listen(s, 64) != 0) {
      const int e = errno;
      ::close(s);
      throw Error("shm memfd share: cannot serve @" + memfd_share_name(pid_).substr(1) + ": " + std::strerror(e) +
                  (e == EADDRINUSE ? " (another process took this process's name)" : ""));
    }
    listening_ = s;
    std::thread([this, s] { serve(s); }).detach();
  }

  void serve(int s) {
    while (true) {
      const int c = ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
          if (errno != EINTR && errno != ECONNABORTED) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        return;
      }
      set_timeout(c, SO_RCVTIMEO, 1000);  // an asker that says nothing holds the share 1 s at most
      set_timeout(c, SO_SNDTIMEO, 1000);
      answer(c);
      ::close(c);
    }
  }

  // One request on connection `c`: the descriptor, or no with the reason.
  void answer(int c) {
    std::byte request[kRequestBytes];
    if (::recv(c, request, sizeof request, 0) != static_cast<ssize_t>(sizeof request)) return;
    ucred peer{};
    socklen_t peer_length = sizeof peer;
    if (::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &peer, &peer_length) != 0 || peer.uid != ::geteuid()) {
      refuse(c, "the asker is not of this process's user");
      return;
    }
    const std::uint64_t id = get(request, 8);
    const auto number = static_cast<std::int32_t>(static_cast<std::uint32_t>(get(request + 8, 4)));
    int given = -1;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      const auto it = offers_.find(id);
      if (it == offers_.end() || it->second.number != number) {
        // Same words whether the id is wrong or the memfd was handed out: no oracle for guessing ids.
        refuse(c, "no memfd " + hex(id) + " at descriptor " + std::to_string(number) +
                      " on offer here (never offered, withdrawn, or its one peer has it already)");
        return;
      }
      given = it->second.fd;
      if (it->second.once) offers_.erase(it);  // the share's descriptor goes once sent (closed below)
      else given = ::fcntl(given, F_DUPFD_CLOEXEC, 0);
    }
    if (given < 0) {
      refuse(c, std::string("cannot duplicate the descriptor: ") + std::strerror(errno));
      return;
    }
    char yes = kGiven;
    iovec io{&yes, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr m{};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &given, sizeof(int));
    (void)::sendmsg(c, &m, MSG_NOSIGNAL);
    ::close(given);
  }

  static void refuse(int c, const std::string& reason) {
    std::string answer(1, kRefused);
    answer.append(reason, 0, kMaxAnswerBytes - 1);
    (void)::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
  }

  const pid_t pid_;
  std::mutex mutex_;
  int listening_ = -1;
  std::map<std::uint64_t, Offer> offers_;
};

}  // namespace

std::string memfd_share_name(pid_t pid) { return std::string(1, '\0') + "pstrain-memfd-" + std::to_string(pid); }

void offer_memfd(int fd, std::uint64_t id, bool once, bool read_only) {
  MemfdShare::of_this_process().offer(fd, id, once, read_only);
}

void withdraw_memfd(std::uint64_t id) { MemfdShare::of_this_process().withdraw(id); }

int receive_memfd(const ShmAddress& address, const std::string& what) {
  const std::string where = "the memfd share of pid " + std::to_string(address.pid);
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) throw TransportError(what + ": socket failed: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{s};
  set_timeout(s, SO_RCVTIMEO, 5000);
  set_timeout(s, SO_SNDTIMEO, 5000);
  socklen_t length = 0;
  const sockaddr_un a = share_address(address.pid, length);
  if (::connect(s, reinterpret_cast<const sockaddr*>(&a), length) != 0) {
    throw TransportError(what + ": cannot reach " + where + ": " + std::strerror(errno) +
                         " (the creator is gone or offers nothing)");
  }
  // The socket must be the creator's: a process of the user could have
  // taken that name first, to hand out a memfd of its own.
  ucred peer{};
  socklen_t peer_length = sizeof peer;
  if (::getsockopt(s, SOL_SOCKET, SO_PEERCRED, &peer, &peer_length) != 0 || peer.pid != address.pid ||
      peer.uid != ::geteuid()) {
    throw ProtocolError(what + ": " + where + " is served by pid " + std::to_string(peer.pid) + " uid " +
                        std::to_string(peer.uid) + ", not by the creator");
  }
  std::byte request[kRequestBytes] = {};
  put(request, address.segment_id, 8);
  put(request + 8, static_cast<std::uint32_t>(address.fd), 4);
  if (::send(s, request, sizeof request, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof request)) {
    throw TransportError(what + ": cannot ask " + where + ": " + std::strerror(errno));
  }
  char answer[kMaxAnswerBytes] = {};
  iovec io{answer, sizeof answer};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(s, &m, MSG_CMSG_CLOEXEC);
  int fd = -1;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&m); cm != nullptr; cm = CMSG_NXTHDR(&m, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(&fd, CMSG_DATA(cm), sizeof(int));
    }
  }
  if (n == 1 && answer[0] == kGiven && fd >= 0 && (m.msg_flags & MSG_CTRUNC) == 0) return fd;
  if (fd >= 0) ::close(fd);
  if (n > 1 && answer[0] == kRefused) {
    throw TransportError(what + ": " + where + " says " + std::string(answer + 1, static_cast<std::size_t>(n - 1)));
  }
  throw TransportError(what + ": no answer from " + where +
                       (n < 0 ? std::string(": ") + std::strerror(errno) : std::string(" (it closed)")));
}

}  // namespace pstrain::shm_detail
