// When a node takes the scheduler's silence for its own
// (SchedulerClient::check_scheduler_alive, ProcessPulse in
// common/node/scheduler_client.h): only when the whole process was paused
// (stopped, or starved of the CPU), as its heartbeat thread's wake-ups show,
// never because the caller itself was away (a long compute or a blocking
// wait) while the process ran. The pure part with times passed in; then a
// real client over ZeroMQ inproc:// against a scheduler that answers the
// registration and then says nothing.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/base/errors.h"
#include "common/node/scheduler_client.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/wire/wire_archive.h"
#include "tests/support/throw_text.h"
#include "tests/support/wait.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

using TimePoint = ProcessPulse::TimePoint;

TimePoint at(int ms) { return TimePoint{} + std::chrono::hours(1) + milliseconds(ms); }

// A pulse that beat every `interval` ms from `from` to `to` (both included).
void beat_every(ProcessPulse& p, int interval, int from, int to) {
  for (int t = from; t <= to; t += interval) p.beat(at(t));
}

}  // namespace

TEST_CASE("ProcessPulse: regular wake-ups are no pause, whatever the window") {
  ProcessPulse p(milliseconds(100));
  beat_every(p, 100, 0, 5000);
  CHECK_FALSE(p.stalled(at(1000), at(5000)));
  CHECK_FALSE(p.stalled(at(4900), at(5000)));
  CHECK_FALSE(p.stalled(at(0), at(5050)));
  // Late by the slack or less: the machine's jitter, not a pause.
  p.beat(at(5000 + 100 + static_cast<int>(ProcessPulse::kSlack.count())));
  CHECK_FALSE(p.stalled(at(4000), at(5300)));
}

TEST_CASE("ProcessPulse: a pause between two wake-ups covering half the window or more is a stall") {
  ProcessPulse p(milliseconds(100));
  beat_every(p, 100, 0, 1000);
  beat_every(p, 100, 3500, 6100);  // stopped from about 1000 to 3500
  CHECK(p.stalled(at(900), at(3600)));    // 2,500 of 2,700 ms
  CHECK(p.stalled(at(1000), at(6000)));   // exactly half: 2,500 of 5,000
  CHECK_FALSE(p.stalled(at(1000), at(6002)));  // under half
  CHECK_FALSE(p.stalled(at(3500), at(5000)));  // the pause ended before the window
  CHECK(p.stalled(at(3000), at(3600)));   // 500 of 600 ms
}

TEST_CASE("ProcessPulse: a pause still going (no wake-up since) counts up to now") {
  ProcessPulse p(milliseconds(100));
  beat_every(p, 100, 0, 1000);
  // The checking thread runs first after the process is continued: the heartbeat thread has not yet woken.
  CHECK(p.stalled(at(950), at(3000)));
  CHECK_FALSE(p.stalled(at(950), at(1150)));  // the interval + the slack: not yet a pause
  CHECK(p.stalled(at(950), at(1201)));
}

TEST_CASE("ProcessPulse: no evidence before the first wake-up, after stop(), or for an empty window") {
  ProcessPulse p(milliseconds(100));
  CHECK_FALSE(p.stalled(at(0), at(10000)));
  p.beat(at(0));
  CHECK(p.stalled(at(0), at(10000)));
  p.stop();
  CHECK_FALSE(p.stalled(at(0), at(10000)));
  p.beat(at(20000));  // a new heartbeat thread
  CHECK_FALSE(p.stalled(at(20000), at(20000)));
  CHECK_FALSE(p.stalled(at(20050), at(20000)));
}

namespace {

// A scheduler that answers one registration and then never speaks again.
class MuteScheduler {
 public:
  explicit MuteScheduler(Transport& t) : listener_(t.listen("inproc://mute-scheduler", EndpointOptions{})) {}
  const std::string& address() const { return listener_->address(); }
  // Answers the registration (waits for it up to 10 s); true when it did.
  bool answer_registration() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      PeerId from;
      auto env = listener_->receive(milliseconds(100), &from);
      if (!env || env->message.header.type != MsgType::kRegister) continue;
      RegisterReply reply;
      reply.rank = 0;
      reply.num_workers = 1;
      reply.layout.add("w", {4});
      reply.token = std::string(32, 'a');
      Header h;
      h.type = MsgType::kRegisterReply;
      h.role = Role::kScheduler;
      h.request_id = env->message.header.request_id;
      listener_->send(env->from, h, Payload::bytes(wire_encode(reply)));
      return true;
    }
    return false;
  }

 private:
  std::unique_ptr<Listener> listener_;
};

ClusterConfig silence_config() {
  ClusterConfig c;
  c.timeout_ms = 20000;
  c.heartbeat_interval_ms = 50;
  c.heartbeat_timeout_ms = 1000;
  return c;
}

// Registers `client` with `mute` (the scheduler answers from its own thread).
void register_with(SchedulerClient& client, MuteScheduler& mute) {
  bool answered = false;
  std::thread scheduler([&] { answered = mute.answer_registration(); });
  RegisterRequest req;
  req.requested_rank = 0;
  req.host = "test";
  try {
    client.register_node(req);
  } catch (...) {
    scheduler.join();
    throw;
  }
  scheduler.join();
  REQUIRE(answered);
}

void sleep_ms(long ms) {  // async-signal-safe (a forked child's)
  timespec t{ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&t, &t) != 0) {
  }
}

}  // namespace

TEST_CASE("a caller away longer than the heartbeat timeout while its process ran: the scheduler's silence ends it") {
  // The caller sleeps (a long compute on a GPU, a blocking read) with its process idle but running:
  // before, the process's low CPU took that gap for the process's own silence and the dead
  // scheduler got another heartbeat timeout, again at every such gap.
  ZmqTransport transport;
  MuteScheduler mute(transport);
  SchedulerClient client(transport, mute.address(), Role::kWorker, silence_config());
  register_with(client, mute);
  CHECK_NOTHROW(client.check_scheduler_alive());
  std::this_thread::sleep_for(milliseconds(2500));  // the caller's absence: the length is the point
  const std::string what = test::thrown_text([&] { client.check_scheduler_alive(); });
  CHECK(what.find("sent nothing for") != std::string::npos);
  CHECK(what.find("cluster.heartbeat_timeout_ms = 1000") != std::string::npos);
}

TEST_CASE("a process stopped (SIGSTOP) longer than the heartbeat timeout: its own silence, not the scheduler's") {
  ZmqTransport transport;
  MuteScheduler mute(transport);
  SchedulerClient client(transport, mute.address(), Role::kWorker, silence_config());
  register_with(client, mute);
  CHECK_NOTHROW(client.check_scheduler_alive());
  const pid_t parent = getpid();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // stops this whole test process for 2.5 s, then continues it
    kill(parent, SIGSTOP);
    sleep_ms(2500);
    kill(parent, SIGCONT);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);  // returns once the child has continued this process
  // The window starts again: the scheduler gets its chance to speak.
  CHECK_NOTHROW(client.check_scheduler_alive());
  // It says nothing: checks every 50 ms (no long gap) end once the timeout has passed again.
  std::string what;
  CHECK(test::wait_until([&] {
    what = test::thrown_text([&] { client.check_scheduler_alive(); });
    return !what.empty();
  }, std::chrono::seconds(30), "the scheduler's silence noticed after the stop"));
  CHECK(what.find("sent nothing for") != std::string::npos);
}

// Stopped just after a check: the gap between that check and the next is under the timeout, the
// silence since the scheduler last spoke past it, and the pause over half of it. Before, only a gap
// between two checks of the whole timeout was excused, and a worker stopped past the heartbeat
// timeout and woken before the launcher fenced it exited blaming the scheduler ("it is gone, so is
// the job") instead of hearing that it was dropped (tests/integration/sweep_faults_test.cc).
TEST_CASE("a process stopped just after a check, its silence past the timeout: its own silence, not the scheduler's") {
  ZmqTransport transport;
  MuteScheduler mute(transport);
  SchedulerClient client(transport, mute.address(), Role::kWorker, silence_config());
  register_with(client, mute);
  // Checks while the silence grows towards the timeout (1 s): the last one just before the stop.
  const auto registered = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - registered < milliseconds(500)) {
    CHECK_NOTHROW(client.check_scheduler_alive());
    std::this_thread::sleep_for(milliseconds(10));
  }
  const pid_t parent = getpid();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // stops this whole test process for 900 ms (under the gap rule's 1 s), then continues it
    kill(parent, SIGSTOP);
    sleep_ms(900);
    kill(parent, SIGCONT);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  // Silent 1.4 s or more (past the timeout), paused 0.9 s of it: the window starts again.
  REQUIRE(std::chrono::steady_clock::now() - registered > milliseconds(1000));
  CHECK_NOTHROW(client.check_scheduler_alive());
  // The scheduler still says nothing: its silence is noticed once the timeout has passed again.
  std::string what;
  CHECK(test::wait_until([&] {
    what = test::thrown_text([&] { client.check_scheduler_alive(); });
    return !what.empty();
  }, std::chrono::seconds(30), "the scheduler's silence noticed after the stop"));
  CHECK(what.find("sent nothing for") != std::string::npos);
}
