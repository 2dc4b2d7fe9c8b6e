// The memory budget for unsent replies (common/transport/zmq/zmq_reply_budget.h):
// its accounting and shedding rules on frames held by the test, then a real
// ROUTER listener replying to many peers that never read.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/transport/transport.h"
#include "common/transport/zmq/zmq_reply_budget.h"
#include "common/transport/zmq/zmq_socket.h"
#include "common/transport/zmq/zmq_transport.h"
#include "tests/support/throw_text.h"
#include "tests/support/wait.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kOverhead = ReplyBudget::kMessageOverhead;

Header error_header() {
  Header h;
  h.type = MsgType::kError;
  h.key = 7;
  return h;
}

// A message of `bytes` (header included) to `peer`, or the refusal's text.
std::string admit(ReplyBudget& budget, const std::string& peer, std::int64_t bytes,
                  std::vector<zmq::message_t>& held) {
  try {
    held.push_back(budget.admit(PeerId(peer), Buffer::copy("header"), bytes, error_header()));
    return {};
  } catch (const TransportError& e) {
    return e.what();
  }
}

// "w17": a peer's name (built by appending: GCC 12 warns, wrongly, on "w" + std::to_string).
std::string numbered(const char* prefix, int n) {
  std::string name(prefix);
  name += std::to_string(n);
  return name;
}

}  // namespace

TEST_CASE("reply budget: a message is counted from admit until ZeroMQ frees its header frame") {
  ReplyBudget budget;
  std::vector<zmq::message_t> held;
  CHECK(admit(budget, "a", 1000, held).empty());
  CHECK(admit(budget, "a", 500, held).empty());
  CHECK(admit(budget, "b", 100, held).empty());
  CHECK(budget.unsent_bytes() == 1600 + 3 * kOverhead);
  CHECK(budget.unsent_bytes(PeerId("a")) == 1500 + 2 * kOverhead);
  CHECK(std::string(static_cast<const char*>(held[0].data()), held[0].size()) == "header");
  held.erase(held.begin());  // ZeroMQ is done with the first
  CHECK(budget.unsent_bytes(PeerId("a")) == 500 + kOverhead);
  held.clear();
  CHECK(budget.unsent_bytes() == 0);
  // Tickets are reused: many more messages than one block, none left counted.
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 3000; ++i) REQUIRE(admit(budget, "c", 10, held).empty());
    held.clear();
  }
  CHECK(budget.unsent_bytes() == 0);
  CHECK(budget.shed_messages() == 0);
}

TEST_CASE("reply budget: a connection that is not a member is shed at its own small limit") {
  ReplyBudget budget;
  budget.set_limits(MemoryLimits{0, 4 * kKiB});
  std::vector<zmq::message_t> held;
  // No member list yet: nobody is a stranger.
  CHECK(admit(budget, "stranger", 8 * kKiB, held).empty());
  held.clear();
  budget.set_members({PeerId("wtoken0")});
  CHECK(admit(budget, "stranger", kKiB, held).empty());
  CHECK(admit(budget, "stranger", kKiB, held).empty());
  const std::string refused = admit(budget, "stranger", 2 * kKiB, held);
  CHECK(refused.find("not one of this node's members") != std::string::npos);
  CHECK(refused.find("connection 737472616e676572") != std::string::npos);  // "stranger" in hex
  CHECK(refused.find("reply error (key 7) not sent") == 0);
  CHECK(budget.shed_messages() == 1);
  // The member is not held to it.
  CHECK(admit(budget, "wtoken0", 64 * kKiB, held).empty());
  held.clear();
  CHECK(admit(budget, "stranger", 2 * kKiB, held).empty());  // room again once sent
}

TEST_CASE("reply budget: over the budget the slowest readers are shed, the others still get replies") {
  ReplyBudget budget;
  budget.set_limits(MemoryLimits{1024 * kKiB, 0});
  std::vector<zmq::message_t> held;
  // "slow" holds 900 KiB it does not read.
  for (int i = 0; i < 9; ++i) REQUIRE(admit(budget, "slow", 100 * kKiB, held).empty());
  // Over the budget now, but "fast" holds nothing: under its share (half).
  CHECK(admit(budget, "fast", 200 * kKiB, held).empty());
  CHECK(budget.unsent_bytes() > 1024 * kKiB);
  // "slow" is over its share: shed, naming the budget and why.
  const std::string refused = admit(budget, "slow", 10 * kKiB, held);
  CHECK(refused.find("memory budget for unsent replies (1.0 MiB, cluster.memory_budget_mb) is full") !=
        std::string::npos);
  CHECK(refused.find("it reads too slowly") != std::string::npos);
  // A third reader with nothing queued still gets one within its share.
  CHECK(admit(budget, "third", 100 * kKiB, held).empty());
  // Twice the budget is a hard stop, whatever the share.
  CHECK_FALSE(admit(budget, "fourth", 1024 * kKiB, held).empty());
  CHECK(budget.unsent_bytes() <= 2 * 1024 * kKiB);
}

TEST_CASE("reply budget: strangers share a pool of their own and are shed before any member") {
  ReplyBudget budget;
  // Members 1 MiB, each stranger 64 KiB, all strangers together 256 KiB.
  const MemoryLimits limits{1024 * kKiB, 64 * kKiB, 256 * kKiB};
  budget.set_limits(limits);
  CHECK(budget.unsent_limit() == 2 * (1024 + 256) * kKiB);
  CHECK(unsent_bound(limits) == budget.unsent_limit());
  budget.add_member(PeerId("node"));  // every other connection is a stranger from now on
  std::vector<zmq::message_t> held;
  // 16 strangers that never read: 60 KiB each would be 960 KiB; the pool
  // stops them at twice 256 KiB, each under its share first.
  int refused = 0;
  std::string why;
  for (int s = 0; s < 16; ++s) {
    why = admit(budget, "stranger" + std::to_string(s), 60 * kKiB - kOverhead, held);
    refused += why.empty() ? 0 : 1;
  }
  CHECK(refused > 0);
  CHECK(budget.strangers_unsent_bytes() <= 2 * 256 * kKiB);
  CHECK(why.find("connections that are not this node's members (0.2 MiB") != std::string::npos);
  // A member still gets its replies, up to its own budget: the strangers' bytes do not count against it.
  for (int i = 0; i < 10; ++i) REQUIRE(admit(budget, "node", 100 * kKiB - kOverhead, held).empty());
  CHECK(budget.unsent_bytes() - budget.strangers_unsent_bytes() == 1000 * kKiB);
  CHECK(budget.unsent_bytes() <= budget.unsent_limit());
  // A second member added later is one too.
  budget.add_member(PeerId("late"));
  CHECK(admit(budget, "late", 200 * kKiB, held).empty());
  // Everything sent (or dropped with the connections): back to zero, each part.
  held.clear();
  CHECK(budget.unsent_bytes() == 0);
  CHECK(budget.strangers_unsent_bytes() == 0);
}

TEST_CASE("reply budget: take_drained fires once after a large peak has drained") {
  ReplyBudget budget;
  std::vector<zmq::message_t> held;
  CHECK(admit(budget, "a", ReplyBudget::kGiveBackPeak / 2, held).empty());
  held.clear();
  CHECK_FALSE(budget.take_drained());  // the peak was too small to bother
  CHECK(admit(budget, "a", ReplyBudget::kGiveBackPeak, held).empty());
  CHECK_FALSE(budget.take_drained());  // still queued
  held.clear();
  CHECK(budget.take_drained());
  CHECK_FALSE(budget.take_drained());
}

TEST_CASE("a listener's unsent replies to many peers that never read stay within its memory budget") {
  ZmqTransport transport;
  EndpointOptions lo;
  lo.socket.send_hwm = kServerSendHwm;  // as a server's: the budget, not the HWM, is what stops it
  std::unique_ptr<Listener> listener = transport.listen("tcp://127.0.0.1:*", lo);
  constexpr std::int64_t kBudget = std::int64_t{4} << 20;
  listener->set_memory_limits(MemoryLimits{kBudget, 0});

  constexpr int kPeers = 8;
  std::vector<zmq::socket_t> peers;
  std::vector<PeerId> ids;
  for (int p = 0; p < kPeers; ++p) {
    SocketOptions so;
    so.receive_hwm = 1;  // what they do not read stays at the listener's side
    peers.push_back(make_socket(transport.context(), zmq::socket_type::dealer, so));
    peers.back().set(zmq::sockopt::rcvbuf, 4096);  // little room in the kernel either
    connect_socket(peers.back(), listener->address());
    Header hello;
    hello.type = MsgType::kPull;
    send_message(peers.back(), nullptr, hello);
    const auto env = listener->receive(milliseconds(5000));
    REQUIRE(env.has_value());
    ids.push_back(env->from);
  }
  // 64 KiB replies, round robin, until every peer has been refused.
  const std::string body(64 * kKiB, 'x');
  std::vector<bool> refused(kPeers, false);
  int sends = 0;
  std::string error;
  for (int round = 0; round < 2000 && std::count(refused.begin(), refused.end(), false) > 0; ++round) {
    for (int p = 0; p < kPeers; ++p) {
      try {
        listener->send(ids[p], error_header(), Payload::bytes(body));
        ++sends;
      } catch (const TransportError& e) {
        refused[p] = true;
        error = e.what();
      }
      CHECK(listener->unsent_bytes() <= 2 * kBudget);
    }
  }
  MESSAGE(sends << " replies sent before every peer was shed; last refusal: " << error);
  CHECK(std::count(refused.begin(), refused.end(), true) == kPeers);
  CHECK(error.find("memory budget for unsent replies") != std::string::npos);
  CHECK(listener->shed_replies() > 0);
  // Gone peers: ZeroMQ drops their queues (when the listener's socket is
  // used: its loop's receive) and the bytes come back.
  peers.clear();
  CHECK(pstrain::test::wait_until(
      [&] {
        listener->receive(milliseconds(0));
        return listener->unsent_bytes() == 0;
      },
      std::chrono::seconds(30),
                                         "the closed peers' unsent replies to be freed"));
}

TEST_CASE("reply budget: a node's steady peers keep their accounts and tickets over many releases") {
  // A scheduler's barriers: every release sends one reply to each of 1,024
  // workers, which free their frames. Their accounts are made once (not
  // forgotten and made again every few thousand sends) and the tickets of one
  // release are reused by the next.
  ReplyBudget budget;
  std::vector<zmq::message_t> held;
  constexpr int kPeers = 1024;
  for (int release = 0; release < 12; ++release) {
    for (int p = 0; p < kPeers; ++p) REQUIRE(admit(budget, numbered("w", p), 64, held).empty());
    held.clear();
  }
  CHECK(budget.unsent_bytes() == 0);
  CHECK(budget.accounts_made() == kPeers);
  CHECK(budget.tickets_made() == 1024);
  // Peers that come and go: the idle ones are forgotten, the map stays bounded.
  for (int p = 0; p < 20000; ++p) {
    REQUIRE(admit(budget, numbered("gone", p), 64, held).empty());
    held.clear();
  }
  CHECK(budget.accounts_made() == kPeers + 20000);
  CHECK(budget.unsent_bytes() == 0);
}

TEST_CASE("reply budget: frames freed on many threads while the listener admits are all counted back") {
  // ZeroMQ frees a header frame on whichever thread drops it (over inproc: the
  // receiver's). 8 threads free what the listener's thread admits meanwhile.
  ReplyBudget budget;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::vector<std::vector<zmq::message_t>> batches(kThreads);
  std::vector<std::thread> freers;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      batches[t].push_back(budget.admit(PeerId(numbered("p", t)), Buffer::copy("h"), 10, error_header()));
    }
  }
  CHECK(budget.unsent_bytes() == kThreads * kPerThread * (10 + kOverhead));
  for (int t = 0; t < kThreads; ++t) {
    freers.emplace_back([&, t] {
      for (auto& m : batches[t]) m = zmq::message_t();
    });
  }
  std::vector<zmq::message_t> mine;  // admitted while the others free: tickets taken as they come back
  for (int i = 0; i < kThreads * kPerThread; ++i) {
    mine.push_back(budget.admit(PeerId("me"), Buffer::copy("h"), 10, error_header()));
    if (mine.size() == 512) mine.clear();
  }
  for (auto& f : freers) f.join();
  mine.clear();
  CHECK(budget.unsent_bytes() == 0);
  CHECK(budget.unsent_bytes(PeerId("p0")) == 0);
  CHECK(budget.tickets_made() <= kThreads * kPerThread + 1024);
}
