// A wait that a signal interrupts is not a failed wait (common/transport/zmq/zmq_socket.cc):
// on Linux a blocking receive resumed by SIGCONT after SIGSTOP fails with EINTR even when the
// process handles no signal, and before the fix a node threw "receive: Interrupted system call"
// and died of it (the cluster_sequence fuzzer found it: libFuzzer's alarm interrupts every wait).
// Here a handler without SA_RESTART interrupts the waiting thread, which is what the kernel does
// to the wait that SIGCONT resumes.
#include <doctest/doctest.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "common/transport/zmq/zmq_socket.h"
#include "tests/support/wait.h"

using namespace pstrain;
using pstrain::test::wait_until;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {
std::atomic<int> g_interrupts{0};
void count_interrupt(int) { g_interrupts.fetch_add(1); }

// SIGUSR2 handled without SA_RESTART for the scope's life: blocking calls interrupted by it fail with EINTR.
class InterruptingSignal {
 public:
  InterruptingSignal() {
    struct sigaction action {};
    action.sa_handler = count_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;
    sigaction(SIGUSR2, &action, &old_);
  }
  ~InterruptingSignal() { sigaction(SIGUSR2, &old_, nullptr); }
  InterruptingSignal(const InterruptingSignal&) = delete;
  InterruptingSignal& operator=(const InterruptingSignal&) = delete;

 private:
  struct sigaction old_ {};
};
}  // namespace

TEST_CASE("a receive interrupted by a signal goes on waiting and gets the message that comes later") {
  InterruptingSignal signal_scope;
  zmq::context_t ctx;
  zmq::socket_t router = make_socket(ctx, zmq::socket_type::router, SocketOptions{});
  const std::string ep = bind_socket(router, "tcp://127.0.0.1:*");
  zmq::socket_t dealer = make_socket(ctx, zmq::socket_type::dealer, SocketOptions{});
  connect_socket(dealer, ep);

  std::atomic<bool> waiting{false};
  std::optional<ZmqEnvelope> got;
  std::string error;
  std::thread receiver([&] {
    waiting.store(true);
    try {
      got = receive_message(router, true, milliseconds(20000), DecodeLimits{});
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  REQUIRE(wait_until([&] { return waiting.load(); }, std::chrono::seconds(10), "the receiving thread to start"));
  // Interrupt the wait several times (a signal that arrives before the receive blocks is
  // harmless: the next one finds it blocked), then send.
  const int before = g_interrupts.load();
  for (int i = 0; i < 5; ++i) {
    pthread_kill(receiver.native_handle(), SIGUSR2);
    std::this_thread::sleep_for(milliseconds(50));
  }
  CHECK(g_interrupts.load() - before == 5);
  Header hello;
  hello.type = MsgType::kHeartbeat;
  hello.sender = 7;
  send_message(dealer, nullptr, hello);
  receiver.join();
  CHECK(error.empty());
  REQUIRE(got.has_value());
  CHECK(got->message.header.type == MsgType::kHeartbeat);
  CHECK(got->message.header.sender == 7);
}

TEST_CASE("an interrupted receive with nothing to get still ends at its timeout") {
  InterruptingSignal signal_scope;
  zmq::context_t ctx;
  zmq::socket_t router = make_socket(ctx, zmq::socket_type::router, SocketOptions{});
  bind_socket(router, "tcp://127.0.0.1:*");
  std::atomic<bool> waiting{false};
  std::optional<ZmqEnvelope> got;
  std::string error;
  Clock::duration took{};
  std::thread receiver([&] {
    waiting.store(true);
    const auto start = Clock::now();
    try {
      got = receive_message(router, true, milliseconds(600), DecodeLimits{});
    } catch (const std::exception& e) {
      error = e.what();
    }
    took = Clock::now() - start;
  });
  REQUIRE(wait_until([&] { return waiting.load(); }, std::chrono::seconds(10), "the receiving thread to start"));
  std::this_thread::sleep_for(milliseconds(100));
  pthread_kill(receiver.native_handle(), SIGUSR2);
  receiver.join();
  CHECK(error.empty());
  CHECK_FALSE(got.has_value());
  // Not restarted from zero after the interruption, and not cut short by it: the wait's own
  // 600 ms (with room for a loaded machine above it).
  CHECK(took >= milliseconds(590));
  CHECK(took < milliseconds(5000));
}
