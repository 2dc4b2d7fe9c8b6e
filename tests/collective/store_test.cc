// The rendezvous stores: in-process (threads) and the scheduler's (a real
// Scheduler on its own thread, workers registered through SchedulerClient):
// set/get, a get parked until the set, timeouts, and size limits checked on
// both sides.
#include <doctest/doctest.h>

#include <functional>
#include <future>
#include <thread>

#include "collective_test_util.h"
#include "common/base/errors.h"
#include "common/transport/transport.h"
#include "common/wire/wire_archive.h"
#include "scheduler/scheduler.h"
#include "worker/collective/scheduler_store.h"
#include "common/transport/zmq/zmq_transport.h"
#include "tests/support/wait.h"

namespace pstrain {
namespace {

using namespace std::chrono_literals;
using testing::thrown_text;

// Two threads' steps are ordered by an event (tests/support/wait.h), not by
// a sleep that a slow machine can outlast.
using pstrain::test::wait_until;

// A scheduler for `workers` workers and no servers, running on a thread.
struct SchedulerThread {
  explicit SchedulerThread(zmq::context_t& ctx, int workers)
      : log("scheduler", LogLevel::kError),
        scheduler(std::make_unique<ZmqTransport>(ctx), SchedulerOptions{0, workers, cluster(), "inproc://store-test-" + std::to_string(next_id++)}, log),
        thread([this] {
          try {
            scheduler.run();
          } catch (const std::exception&) {
            // Tests that end the job abnormally check their workers' errors.
          }
        }) {}
  ~SchedulerThread() { thread.join(); }

  static ClusterConfig cluster() {
    ClusterConfig c;
    c.timeout_ms = 5000;
    c.heartbeat_interval_ms = 100;
    c.heartbeat_timeout_ms = 5000;
    return c;
  }

  static inline int next_id = 0;
  Logger log;
  Scheduler scheduler;
  std::thread thread;
};

// "k<i>" (built by appending: GCC 12 warns, -Wrestrict, on "k" + std::string).
std::string key_of(std::size_t i) {
  std::string key = "k";
  key += std::to_string(i);
  return key;
}

// A registered worker's scheduler link, run on its own thread by the test.
void as_worker(zmq::context_t& ctx, const std::string& endpoint, int rank,
               const std::function<void(SchedulerClient&)>& body) {
  SchedulerClient client(std::make_unique<ZmqTransport>(ctx), endpoint, Role::kWorker, SchedulerThread::cluster());
  RegisterRequest req;
  req.requested_rank = rank;
  client.register_node(req);
  body(client);
  client.finish();
}

}  // namespace

TEST_CASE("in-process store: a get waits for the set, and times out naming the key") {
  InProcessStore store;
  auto later = std::async(std::launch::async, [&] { return store.get("addr/1", 5s); });
  REQUIRE(wait_until([&] { return store.waiting() == 1; }, 30s, "the get to wait"));  // before the set
  store.set("addr/1", std::string("\0\1\2", 3));
  CHECK(later.get() == std::string("\0\1\2", 3));
  store.set("addr/1", "replaced");
  CHECK(store.get("addr/1", 0ms) == "replaced");
  CHECK_THROWS_WITH_AS(store.get("addr/2", 30ms), "store get of key 'addr/2': no rank set it within 30 ms",
                       TimeoutError);
  CHECK_THROWS_WITH_AS(store.set("", "v"), "store set: key of 0 bytes, expected 1 to 256", ProtocolError);
  CHECK_THROWS_WITH_AS(store.set("k", std::string(kMaxStoreValueBytes + 1, 'x')),
                       "store set of key 'k': value of 65537 bytes exceeds the 65536-byte limit", ProtocolError);
}

TEST_CASE("in-process store: at most kMaxStoreEntries keys, existing keys can still be replaced") {
  InProcessStore store;
  for (std::size_t i = 0; i < kMaxStoreEntries; ++i) store.set(key_of(i), "v");
  CHECK_THROWS_WITH_AS(store.set("one-more", "v"), "store set of key 'one-more': the store is full (4096 keys)",
                       ProtocolError);
  store.set("k0", "replaced");
  CHECK(store.get("k0", 0ms) == "replaced");
}

TEST_CASE("scheduler store: a get parked before the set is answered by it; values are binary") {
  zmq::context_t ctx;
  SchedulerThread sched(ctx, 2);
  const std::string endpoint = sched.scheduler.endpoint();
  const std::string id(128, '\0');
  std::string got, got_again;
  auto reader = std::async(std::launch::async, [&] {
    as_worker(ctx, endpoint, 1, [&](SchedulerClient& c) {
      SchedulerStore store(c);
      got = store.get("nccl/unique_id", 4s);  // parked at the scheduler until worker 0 sets it
      got_again = store.get("nccl/unique_id", 1ms);
      c.barrier("read");
    });
  });
  as_worker(ctx, endpoint, 0, [&](SchedulerClient& c) {
    SchedulerStore store(c);
    REQUIRE(wait_until([&] { return sched.scheduler.parked_store_gets() == 1; }, 30s,
                       "the get to be parked"));  // parked before the set
    store.set("nccl/unique_id", id);
    c.barrier("read");
  });
  reader.get();
  CHECK(got == id);
  CHECK(got_again == id);
}

TEST_CASE("scheduler store: a get nobody answers ends with the scheduler's reason; bad entries are refused") {
  zmq::context_t ctx;
  SchedulerThread sched(ctx, 1);
  as_worker(ctx, sched.scheduler.endpoint(), 0, [&](SchedulerClient& c) {
    SchedulerStore store(c);
    const std::string err = thrown_text([&] { store.get("gloo/1", 200ms); });
    CHECK(err == "store get of key 'gloo/1': scheduler answered: store get of key 'gloo/1' from worker 0: no node set "
                 "it within 200 ms");
    // Refused by the client before sending...
    CHECK(thrown_text([&] { store.set(std::string(300, 'k'), "v"); }) ==
          "store set of key '" + std::string(300, 'k') + "': key of 300 bytes, expected 1 to 256");
    CHECK(thrown_text([&] { c.store_get("k", 0); }) == "store get of key 'k': timeout_ms must be >= 1, got 0");
    // ...and by the scheduler when a client skips that check.
    Header h;
    h.type = MsgType::kStoreSet;
    h.role = Role::kWorker;
    h.sender = 0;
    h.request_id = 99;
    c.connection().send(h, Payload::bytes(wire_encode(StoreEntry{"k", std::string(70000, 'v')})));
    auto reply = c.connection().receive(5000ms);
    while (reply && reply->message.header.type == MsgType::kHeartbeat) {  // the scheduler's own heartbeats
      reply = c.connection().receive(5000ms);
    }
    REQUIRE(reply.has_value());
    CHECK(reply->message.header.type == MsgType::kError);
    CHECK(reply->message.header.request_id == 99);
    CHECK(reply->message.text_payload() == "store set of key 'k': value of 70000 bytes exceeds the 65536-byte limit");
    store.set("still", "works");
    CHECK(store.get("still", 1s) == "works");
  });
}

TEST_CASE("scheduler store: at most kMaxStoreEntries keys per job") {
  zmq::context_t ctx;
  SchedulerThread sched(ctx, 1);
  as_worker(ctx, sched.scheduler.endpoint(), 0, [&](SchedulerClient& c) {
    for (std::size_t i = 1; i < kMaxStoreEntries; ++i) c.store_set(key_of(i), "v");
    c.store_set("still", "room");
    CHECK(thrown_text([&] { c.store_set("one-more", "v"); }) ==
          "store set of key 'one-more': scheduler answered: store set of key 'one-more': the store is full (4096 keys)");
    c.store_set("k1", "replaced");
    CHECK(c.store_get("k1", 1000) == "replaced");
  });
}

}  // namespace pstrain
