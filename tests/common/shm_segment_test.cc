// common/transport/shm/shm_segment.h: slots handed between two sides, every check of a
// descriptor, and real processes killed with SIGKILL at several points (no
// segment left behind, the survivor gets a clear error, no hang).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/base/errors.h"
#include "common/transport/shm/shm_memfd.h"
#include "common/transport/shm/shm_segment.h"
#include "tests/common/shm_test_util.h"
#include "tests/support/throw_text.h"

using namespace pstrain;
using namespace std::chrono_literals;
using pstrain::test::Child;
using pstrain::test::our_mappings;
using pstrain::test::our_shm_names;

namespace {

ShmOptions small_options(std::string name = "test") {
  ShmOptions options;
  options.slots_per_side = 4;
  options.slot_bytes = 10000;  // rounded up to 12288 (pages)
  options.name = std::move(name);
  return options;
}

void fill(std::span<std::byte> bytes, std::uint8_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
}
bool matches(std::span<const std::byte> bytes, std::uint8_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != static_cast<std::byte>((i * 7 + seed) & 0xff)) return false;
  }
  return true;
}

using pstrain::test::thrown_text;  // tests/support/throw_text.h

template <std::size_t N>
void send_bytes(int fd, const std::array<std::byte, N>& bytes) {
  if (::write(fd, bytes.data(), N) != static_cast<ssize_t>(N)) throw Error("pipe write");
}

}  // namespace

TEST_CASE("shm: descriptors and addresses round-trip and a wrong size is a ProtocolError") {
  const ShmDescriptor d{0x0123456789abcdefULL, 7, 0xfffffff0u, 4096, std::numeric_limits<std::uint64_t>::max()};
  const auto bytes = encode_shm_descriptor(d);
  CHECK(decode_shm_descriptor(bytes) == d);
  CHECK_THROWS_AS(decode_shm_descriptor(std::span(bytes).first(31)), ProtocolError);
  const ShmAddress a{12345, 17, 0xfeedfacecafebeefULL, 1 << 20};
  CHECK(decode_shm_address(encode_shm_address(a)) == a);
  const std::vector<std::byte> long_address(kShmAddressBytes + 1);
  CHECK_THROWS_AS(decode_shm_address(long_address), ProtocolError);
}

TEST_CASE("shm: shm_stream_copy copies every byte, whatever the size and alignment") {
  std::vector<std::byte> from(3 << 20), to(3 << 20);
  fill(from, 11);
  for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{256 * 1024 - 1},
                                 std::size_t{256 * 1024}, std::size_t{(1 << 20) + 13}, std::size_t{(2 << 20) + 63}}) {
    for (const std::size_t shift : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{16}}) {
      std::fill(to.begin(), to.end(), std::byte{0});
      shm_stream_copy(to.data() + shift, from.data() + 3, size);
      CHECK_MESSAGE(std::memcmp(to.data() + shift, from.data() + 3, size) == 0, "size " << size << " shift " << shift);
      CHECK(to[shift + size] == std::byte{0});  // nothing written past the end
      if (shift > 0) CHECK(to[shift - 1] == std::byte{0});  // nor before the start
    }
  }
}

TEST_CASE("shm: bad options are a ConfigError") {
  ShmOptions options = small_options();
  options.slots_per_side = 0;
  CHECK_THROWS_AS(ShmSegment::create(options), ConfigError);
  options = small_options();
  options.slot_bytes = (std::size_t{1} << 30) + 1;
  CHECK_THROWS_AS(ShmSegment::create(options), ConfigError);
  options = small_options("bad/name");
  CHECK_THROWS_AS(ShmSegment::create(options), ConfigError);
  options = small_options();
  options.slots_per_side = 65536;
  options.slot_bytes = std::size_t{1} << 30;  // 128 TiB in all
  CHECK(thrown_text([&] { ShmSegment::create(options); }).find("exceed the cap") != std::string::npos);
}

TEST_CASE("shm: slots go both ways, in place, and are reused") {
  auto creator = ShmSegment::create(small_options());
  CHECK(creator->slot_bytes() == 12288);
  CHECK(creator->peer_state() == ShmSegment::PeerState::kNotAttached);
  auto peer = ShmSegment::attach(creator->address());
  CHECK(peer->id() == creator->id());
  CHECK(peer->slot_bytes() == creator->slot_bytes());
  CHECK(creator->peer_pid() == getpid());
  CHECK(creator->peer_state() == ShmSegment::PeerState::kAttached);

  for (int round = 0; round < 10; ++round) {  // more rounds than slots: slots are reused
    auto push = peer->acquire(1s);
    CHECK(push.slot() >= 4);  // the peer writes slots 4..7
    fill(push.bytes().subspan(100, 5000), static_cast<std::uint8_t>(round));
    const ShmDescriptor sent = push.publish(5000, 100);
    const ShmDescriptor received = decode_shm_descriptor(encode_shm_descriptor(sent));
    {
      auto in = creator->open(received);
      CHECK(in.bytes().size() == 5000);
      CHECK(matches(in.bytes(), static_cast<std::uint8_t>(round)));
      push.bytes()[100] = std::byte{0xAB};  // in place: the reader sees the writer's memory, not a copy
      CHECK(in.bytes()[0] == std::byte{0xAB});
    }
    auto reply = creator->acquire(1s);
    CHECK(reply.slot() < 4);
    fill(reply.bytes(), static_cast<std::uint8_t>(round + 100));
    auto out = peer->open(reply.publish(creator->slot_bytes()));
    CHECK(matches(out.bytes(), static_cast<std::uint8_t>(round + 100)));
    out.release();
  }
  CHECK(creator->free_slots() == 4);
  CHECK(peer->free_slots() == 4);

  // A slot taken but never published goes back when dropped.
  { auto abandoned = peer->acquire(1s); CHECK(peer->free_slots() == 3); }
  CHECK(peer->free_slots() == 4);

  peer.reset();
  CHECK(creator->peer_state() == ShmSegment::PeerState::kClosed);
  CHECK(thrown_text([&] { creator->check_peer(); }).find("closed the segment") != std::string::npos);
}

TEST_CASE("shm: a hostile or corrupt descriptor is a ProtocolError, never a read out of bounds") {
  auto creator = ShmSegment::create(small_options());
  auto peer = ShmSegment::attach(creator->address());
  auto slot = peer->acquire(1s);
  const ShmDescriptor good = slot.publish(64);

  auto rejects = [&](ShmDescriptor d, const std::string& why) {
    const std::string what = thrown_text([&] {
      try {
        creator->open(d);
      } catch (const ProtocolError&) {
        throw;
      } catch (const std::exception& e) {
        FAIL("not a ProtocolError: " << e.what());
      }
    });
    CHECK_MESSAGE(what.find(why) != std::string::npos, what);
  };
  ShmDescriptor d = good;
  d.segment_id ^= 1;
  rejects(d, "it names segment");
  d = good;
  d.slot = 0;  // the creator's own slot
  rejects(d, "not a slot the peer writes");
  d.slot = 8;  // past the last slot
  rejects(d, "not a slot the peer writes");
  d.slot = std::numeric_limits<std::uint32_t>::max();
  rejects(d, "not a slot the peer writes");
  d = good;
  d.length = creator->slot_bytes() + 1;
  rejects(d, "outside the slot");
  d = good;
  d.offset = 1;
  d.length = creator->slot_bytes();
  rejects(d, "outside the slot");
  d = good;
  d.offset = std::numeric_limits<std::uint64_t>::max();  // offset + length overflows
  d.length = 2;
  rejects(d, "outside the slot");
  d = good;
  d.generation += 1;
  rejects(d, "stale");
  d = good;
  d.slot = good.slot + 1;  // free, never published
  d.generation = 0;
  rejects(d, "free, not published");

  // The good one opens once; again while open, or after release (replay), it is refused.
  {
    auto in = creator->open(good);
    rejects(good, "already opened");
  }
  rejects(good, "free, not published");
  // After the writer took the slot again, the old descriptor is stale.
  std::vector<ShmSegment::WriteSlot> taken;
  while (auto s = peer->try_acquire()) taken.push_back(std::move(*s));
  CHECK(taken.size() == 4);
  rejects(good, "stale");
  // A slot being written is not readable under its new generation either.
  ShmDescriptor writing = good;
  writing.generation = good.generation + 1;
  rejects(writing, "being written");
}

TEST_CASE("shm: attach checks the address against the segment") {
  auto creator = ShmSegment::create(small_options());
  ShmAddress a = creator->address();

  // Not on offer (its share hands out only what it offered, by id and descriptor number).
  ShmAddress wrong = a;
  wrong.segment_id ^= 1;
  CHECK(thrown_text([&] { ShmSegment::attach(wrong); }).find("on offer here") != std::string::npos);
  wrong = a;
  wrong.fd = 0x7fff;
  CHECK_THROWS_AS(ShmSegment::attach(wrong), TransportError);
  wrong = a;
  wrong.pid = 0;
  CHECK_THROWS_AS(ShmSegment::attach(wrong), ProtocolError);
  wrong = a;
  wrong.bytes = std::uint64_t{1} << 40;
  CHECK_THROWS_AS(ShmSegment::attach(wrong), ProtocolError);
  {
    auto other = ShmSegment::create(small_options());  // handed out by this failed attach: never again
    ShmAddress bigger = other->address();
    bigger.bytes += 4096;
    CHECK(thrown_text([&] { ShmSegment::attach(bigger); }).find("its size is") != std::string::npos);
    CHECK(thrown_text([&] { ShmSegment::attach(other->address()); }).find("on offer here") != std::string::npos);
  }

  // Whatever a share sends is checked: a plain file is not one of our memfds.
  const std::string path = "/tmp/pstrain-shm-test-" + std::to_string(getpid());
  const int file = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE(file >= 0);
  REQUIRE(ftruncate(file, static_cast<off_t>(a.bytes)) == 0);
  wrong = a;
  wrong.fd = file;
  wrong.segment_id = 0x1234;
  shm_detail::offer_memfd(file, wrong.segment_id, true, false);
  CHECK(thrown_text([&] { ShmSegment::attach(wrong); }).find("not a pstrain memfd") != std::string::npos);
  ::close(file);
  std::filesystem::remove(path);
  // A memfd with our name but no seals (anyone could shrink it under a mapping).
  const int unsealed = memfd_create("pstrain-unsealed", MFD_CLOEXEC);
  REQUIRE(unsealed >= 0);
  REQUIRE(ftruncate(unsealed, static_cast<off_t>(a.bytes)) == 0);
  wrong.fd = unsealed;
  wrong.segment_id = 0x5678;
  shm_detail::offer_memfd(unsealed, wrong.segment_id, true, false);
  CHECK(thrown_text([&] { ShmSegment::attach(wrong); }).find("not a memfd sealed") != std::string::npos);
  ::close(unsealed);

  // The failed attaches left the segment unclaimed; the first real one wins, a
  // second is refused: the segment is handed out once, to its one peer.
  CHECK(creator->peer_state() == ShmSegment::PeerState::kNotAttached);
  auto peer = ShmSegment::attach(a);
  CHECK(thrown_text([&] { ShmSegment::attach(a); }).find("its one peer has it already") != std::string::npos);
  CHECK(creator->peer_state() == ShmSegment::PeerState::kAttached);  // the refused one did not mark it closed
}

TEST_CASE("shm: a segment reaches its peer only from its creator's share") {
  // A process that took the creator's share name first (to hand out a memfd
  // of its own) is refused: the socket must be served by the creator's pid.
  Child creator([&](int to_parent) {
    auto segment = ShmSegment::create(small_options("squatted"));
    send_bytes(to_parent, encode_shm_address(segment->address()));
    pause();
  });
  ShmAddress address = decode_shm_address(creator.read(kShmAddressBytes));
  {
    auto peer = ShmSegment::attach(address);  // the creator's own share: fine
    CHECK(peer->peer_state() == ShmSegment::PeerState::kAttached);
  }
  creator.kill_and_reap();
  // The name of a live process whose share this test takes: this one's child, made to wait.
  Child victim([&](int to_parent) {
    const char ready = 'r';
    if (::write(to_parent, &ready, 1) != 1) throw Error("pipe");
    pause();
  });
  (void)victim.read(1);
  const int squatter = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  REQUIRE(squatter >= 0);
  sockaddr_un name{};
  name.sun_family = AF_UNIX;
  const std::string abstract = shm_detail::memfd_share_name(victim.pid);
  std::memcpy(name.sun_path, abstract.data(), abstract.size());
  REQUIRE(::bind(squatter, reinterpret_cast<const sockaddr*>(&name),
                 static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + abstract.size())) == 0);
  REQUIRE(::listen(squatter, 4) == 0);
  address.pid = victim.pid;
  const std::string what = thrown_text([&] { ShmSegment::attach(address); });
  CHECK_MESSAGE(what.find("not by the creator") != std::string::npos, what);
  ::close(squatter);
}

TEST_CASE("shm: a writer out of slots times out while the peer lives") {
  auto creator = ShmSegment::create(small_options());
  auto peer = ShmSegment::attach(creator->address());
  std::vector<ShmDescriptor> in_flight;
  for (int i = 0; i < 4; ++i) in_flight.push_back(creator->acquire(1s).publish(1));
  CHECK_FALSE(creator->try_acquire().has_value());
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(creator->acquire(50ms), TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < 10s);  // its 50 ms, with a margin for a loaded machine
  // The reader releasing one lets a waiting writer through.
  std::thread reader([&] {
    std::this_thread::sleep_for(20ms);
    peer->open(in_flight[2]).release();
  });
  CHECK(creator->acquire(5s).slot() == in_flight[2].slot);
  reader.join();
}

TEST_CASE("shm: across processes, data arrives and the child's exit closes its side") {
  auto creator = ShmSegment::create(small_options("cross"));
  auto out = creator->acquire(1s);
  fill(out.bytes(), 42);
  const ShmDescriptor sent = out.publish(creator->slot_bytes());
  const ShmAddress address = creator->address();
  Child child([&](int to_parent) {
    auto peer = ShmSegment::attach(address);
    {
      auto in = peer->open(sent);
      if (!matches(in.bytes(), 42)) throw Error("wrong bytes");
    }
    auto reply = peer->acquire(1s);
    fill(reply.bytes(), 7);
    send_bytes(to_parent, encode_shm_descriptor(reply.publish(1000, 12)));
  });
  const auto reply = decode_shm_descriptor(child.read(kShmDescriptorBytes));
  CHECK(child.wait_exit() == 0);
  auto in = creator->open(reply);  // the child has exited: its bytes are still here
  CHECK(in.bytes().size() == 1000);
  CHECK(in.bytes()[0] == static_cast<std::byte>((12 * 7 + 7) & 0xff));  // published at offset 12
  CHECK(creator->peer_state() == ShmSegment::PeerState::kClosed);
  CHECK(creator->free_slots() == 4);  // the child opened and released ours
}

TEST_CASE("shm: a creator killed before the peer maps leaves nothing, and the peer gets a clear error") {
  const int mappings_before = our_mappings();
  Child child([&](int to_parent) {
    auto segment = ShmSegment::create(small_options("killed-early"));
    send_bytes(to_parent, encode_shm_address(segment->address()));
    pause();
  });
  const ShmAddress address = decode_shm_address(child.read(kShmAddressBytes));
  child.kill_and_reap();
  const std::string what = thrown_text([&] { ShmSegment::attach(address); });
  CHECK_MESSAGE(what.find("creating process is gone") != std::string::npos, what);
  CHECK(our_shm_names() == 0);
  CHECK(our_mappings() == mappings_before);
}

TEST_CASE("shm: a creator killed while mapped: the peer sees it gone, waits end, nothing is left") {
  Child child([&](int to_parent) {
    auto segment = ShmSegment::create(small_options("killed-mapped"));
    send_bytes(to_parent, encode_shm_address(segment->address()));
    pause();
  });
  const ShmAddress address = decode_shm_address(child.read(kShmAddressBytes));
  {
    auto peer = ShmSegment::attach(address);
    CHECK(peer->peer_state() == ShmSegment::PeerState::kAttached);
    // Every slot sent to the child, which never releases them: a writer waits for one...
    for (int i = 0; i < 4; ++i) (void)peer->acquire(1s).publish(8);
    std::string waited;
    std::chrono::steady_clock::time_point killed;
    std::thread writer([&] { waited = thrown_text([&] { peer->acquire(60s); }); });
    std::this_thread::sleep_for(100ms);
    // ...and is woken with an error soon after the child is killed, not after its 60 s.
    killed = std::chrono::steady_clock::now();
    child.kill_and_reap();
    writer.join();
    CHECK(std::chrono::steady_clock::now() - killed < 5s);
    CHECK_MESSAGE(waited.find("is gone") != std::string::npos, waited);
    CHECK(peer->peer_state() == ShmSegment::PeerState::kGone);
    CHECK(thrown_text([&] { peer->check_peer(); }).find("is gone") != std::string::npos);
    CHECK(our_mappings() == 1);  // the survivor's own mapping keeps the memory until it lets go
  }
  CHECK(our_mappings() == 0);
  CHECK(our_shm_names() == 0);
}

TEST_CASE("shm: a peer killed mid-write or holding slots: the creator gets clear errors, nothing is left") {
  {
    auto creator = ShmSegment::create(small_options("killed-peer"));
    for (int i = 0; i < 4; ++i) {  // every slot of ours in flight to the child
      auto s = creator->acquire(1s);
      fill(s.bytes(), 1);
      (void)s.publish(s.bytes().size());
    }
    const ShmAddress address = creator->address();
    Child child([&](int to_parent) {
      auto peer = ShmSegment::attach(address);
      ShmDescriptor first{peer->id(), 0, 1, 0, 16};
      auto held = peer->open(first);  // holds one of the creator's slots, never releases it
      auto half = peer->acquire(1s);
      fill(half.bytes().first(half.bytes().size() / 2), 3);  // killed halfway through its write
      send_bytes(to_parent, encode_shm_descriptor({peer->id(), half.slot(), 1, 0, half.bytes().size()}));
      pause();
    });
    const ShmDescriptor unfinished = decode_shm_descriptor(child.read(kShmDescriptorBytes));
    CHECK(creator->peer_state() == ShmSegment::PeerState::kAttached);
    child.kill_and_reap();
    CHECK(creator->peer_state() == ShmSegment::PeerState::kGone);
    // The slot the child was writing never reaches the creator.
    const std::string what = thrown_text([&] { creator->open(unfinished); });
    CHECK_MESSAGE(what.find("being written, not published") != std::string::npos, what);
    CHECK(creator->free_slots() == 0);
    const auto start = std::chrono::steady_clock::now();
    const std::string waited = thrown_text([&] { creator->acquire(60s); });
    CHECK_MESSAGE(waited.find("is gone") != std::string::npos, waited);
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }
  CHECK(our_mappings() == 0);
  CHECK(our_shm_names() == 0);
}

namespace {

// A process given `pid` (a pid that was just freed), made by asking the
// kernel for the next pid after pid - 1 (root: /proc/sys/kernel/ns_last_pid);
// null, with the reason in `why`, where that cannot be done or another
// process took the pid first.
std::unique_ptr<Child> child_with_pid(pid_t pid, std::string& why) {
  const char* kLastPid = "/proc/sys/kernel/ns_last_pid";
  pid_t before = 0;
  std::ifstream(kLastPid) >> before;
  std::ofstream last(kLastPid);
  if (before <= 0 || !last || !(last << pid - 1 << std::flush)) {
    why = "cannot write /proc/sys/kernel/ns_last_pid (not root, or not in the pid namespace's owner)";
    return nullptr;
  }
  auto child = std::make_unique<Child>([](int) { pause(); });
  // Back to where the kernel was, so that the processes of tests running
  // beside this one do not get recently freed pids either.
  std::ofstream(kLastPid) << std::max(before, child->pid) << std::flush;
  if (child->pid != pid) {
    why = "another process took pid " + std::to_string(pid) + " first (got " + std::to_string(child->pid) + ")";
    return nullptr;
  }
  return child;
}

}  // namespace

// A killed peer's pid given to another process: kill(pid, 0) would say the
// peer lives on (the listener would keep its segment). The pidfd taken at
// attach, or when the peer was first seen, names the process itself.
TEST_CASE("shm: a dead peer stays gone when its pid is reused (both sides)") {
  SUBCASE("peer side: the creator killed, its pid reused") {
    auto creator = std::make_unique<Child>([&](int to_parent) {
      auto segment = ShmSegment::create(small_options("pid-reuse-creator"));
      send_bytes(to_parent, encode_shm_address(segment->address()));
      pause();
    });
    const ShmAddress address = decode_shm_address(creator->read(kShmAddressBytes));
    auto peer = ShmSegment::attach(address);
    CHECK(peer->peer_state() == ShmSegment::PeerState::kAttached);
    const pid_t old_pid = creator->pid;
    creator->kill_and_reap();
    CHECK(peer->peer_state() == ShmSegment::PeerState::kGone);
    std::string why;
    const auto impostor = child_with_pid(old_pid, why);
    if (!impostor) {
      MESSAGE("pid reuse not tested on this side: " << why);
      return;
    }
    CHECK(shm_process_alive(old_pid));  // what kill(pid, 0) sees: a live process at that pid
    CHECK(peer->peer_state() == ShmSegment::PeerState::kGone);
  }
  SUBCASE("creator side: the peer killed, its pid reused") {
    auto segment = ShmSegment::create(small_options("pid-reuse-peer"));
    const auto address = encode_shm_address(segment->address());
    auto attacher = std::make_unique<Child>([&](int to_parent) {
      auto peer = ShmSegment::attach(decode_shm_address(address));
      send_bytes(to_parent, std::array<std::byte, 1>{std::byte{1}});
      pause();
    });
    (void)attacher->read(1);
    CHECK(segment->peer_state() == ShmSegment::PeerState::kAttached);
    const pid_t old_pid = attacher->pid;
    attacher->kill_and_reap();
    std::string why;
    const auto impostor = child_with_pid(old_pid, why);
    if (!impostor) {
      MESSAGE("pid reuse not tested on this side: " << why);
      return;
    }
    CHECK(shm_process_alive(old_pid));
    CHECK(segment->peer_state() == ShmSegment::PeerState::kGone);
  }
  CHECK(our_shm_names() == 0);
}
