// Pulled weights mapped, not copied (worker/client/pull_pages.h), with the
// real ShmTransport in one process (its memfds and mappings are real): a
// server loop of a real ShardStore whose weights lie in the transport's
// arena (placed at the chunk's offset modulo the page), and a KVClient
// pulling into a page-aligned model buffer.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/math/shard_map.h"
#include "common/transport/shm/shm_transport.h"
#include "common/transport/zmq/zmq_transport.h"
#include "server/shard_store.h"
#include "worker/client/kv_client.h"

using namespace pstrain;

namespace {

constexpr std::int64_t kBias = 100;       // the large chunk starts 400 bytes into a page
constexpr std::int64_t kWeights = 300000;  // 1.2 MB: whole pages and two partial ends

ShardMap make_map() {
  ParamLayout layout;
  layout.add("b", {kBias});
  layout.add("w", {kWeights});
  return ShardMap(layout, 1, std::int64_t{4} << 20);
}

std::int64_t large_chunk(const ShardMap& map) {
  std::int64_t key = 0;
  for (const Chunk& c : map.chunks()) {
    if (c.num_elems > map.chunk(key).num_elems) key = c.id;
  }
  return key;
}

StoreOptions store_options(Transport* arena_of) {
  StoreOptions o;
  o.consistency = ConsistencyOptions{Mode::kAsync, 0};
  o.optimizer.name = "sgd";
  o.optimizer.lr = 0.5;
  o.optimizer.momentum = 0.0;
  if (arena_of != nullptr) o.allocate = [arena_of](std::size_t n) { return arena_of->allocate_send_floats(n); };
  return o;
}

std::vector<float> pattern(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 37) % 1000) / 1000.0f;
  return v;
}

// A server's loop on its own thread: init, push and pull of single chunks.
// `copy_replies`: replies from ordinary memory (a copy), which no transport can map.
struct TestServer {
  Listener& listener;
  ShardStore store;
  std::atomic<bool> stop{false};
  std::atomic<bool> copy_replies{false};
  std::atomic<std::int64_t> in_place{0}, updates{0};
  std::thread thread;

  TestServer(Listener& l, const ShardMap& map, int workers, Transport* arena_of)
      : listener(l), store(map, 0, workers, store_options(arena_of)) {
    thread = std::thread([this] { run(); });
  }
  ~TestServer() {
    stop = true;
    thread.join();
  }
  // The weights the store holds now (read on this thread only while no request is in flight).
  std::vector<float> weights(std::int64_t key) { return store.snapshot(0, key).values(); }

  void run() {
    std::vector<float> scratch;
    while (!stop) {
      std::optional<Envelope> env = listener.receive(std::chrono::milliseconds(20));
      if (!env) continue;
      const Header& h = env->message.header;
      Header r = h;
      r.role = Role::kServer;
      r.sender = 0;
      if (h.type == MsgType::kInit) {
        store.init(h.key, env->message.float_payload(scratch));
        r.type = MsgType::kInitReply;
        listener.send(env->from, r);
      } else if (h.type == MsgType::kPush) {
        r.aux = store.push(h.sender, env->message, scratch).staleness;
        in_place = store.stats().in_place_updates;
        updates = store.stats().updates_applied;
        r.type = MsgType::kPushReply;
        const PeerId from = env->from;
        env.reset();  // the gradient's frame goes
        listener.send(from, r);
      } else if (h.type == MsgType::kPull) {
        reply_pull(env->from, r);
      } else if (h.type == MsgType::kPullChunks) {  // one reply per chunk, as the server's
        for (std::int64_t i = 0; i < h.version; ++i) {
          Header one = chunk_request(h, i, 0);
          one.role = Role::kServer;
          one.sender = 0;
          reply_pull(env->from, one);
        }
      }
    }
  }
  void reply_pull(const PeerId& to, Header r) {
    const WeightsSnapshot snap = store.snapshot(0, r.key, r.step);
    r.type = MsgType::kPullReply;
    r.version = snap.version;
    r.aux = 0;
    if (copy_replies) {
      auto copy = std::make_shared<std::vector<float>>(snap.values());
      listener.send(to, r, Payload::floats(std::span<const float>(*copy), copy));
    } else {
      listener.send(to, r, Payload::floats(snap.weights->values, snap.weights));
    }
  }
};

// Page-aligned memory of its own, as nn::CpuBackend gives the model.
struct ModelBuffer {
  std::size_t bytes;
  float* data;
  explicit ModelBuffer(std::size_t n) : bytes(n * sizeof(float)) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    data = static_cast<float*>(p);
  }
  ~ModelBuffer() { ::munmap(data, bytes); }
  std::span<float> span() { return {data, bytes / sizeof(float)}; }
  std::vector<float> chunk(const Chunk& c) const { return {data + c.offset, data + c.offset + c.num_elems}; }
};

KVClientOptions client_options(int rank) {
  KVClientOptions o;
  o.worker_rank = rank;
  o.token = "t" + std::to_string(rank);
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// Pulls until chunk `key` arrives mapped (the first reply from a new arena
// offers it and goes through a slot); at most 5 pulls.
void pull_until_mapped(KVClient& kv, std::span<float> flat, std::int64_t key, std::int64_t step) {
  for (int i = 0; i < 5 && !kv.pull_pages().mapped(key); ++i) kv.wait(kv.pull(flat, step));
  REQUIRE(kv.pull_pages().mapped(key));
}

}  // namespace

TEST_CASE("pull pages: a large chunk's pages are mapped, held until its push, then updated in place and mapped once") {
  zmq::context_t ctx;
  ShmTransport t(ctx, shm_options_for(std::int64_t{4} << 20));
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  const ShardMap map = make_map();
  const std::int64_t key = large_chunk(map);
  const Chunk& c = map.chunk(key);
  REQUIRE(c.num_elems == kWeights);
  TestServer server(*listener, map, 1, &t);
  ShardStore reference(map, 0, 1, store_options(nullptr));  // the same updates in ordinary memory

  const std::vector<float> init = pattern(static_cast<std::size_t>(map.total_elems()), 1.0f);
  KVClient kv(t, map, {listener->address()}, client_options(0));
  kv.wait(kv.init(init));
  for (const Chunk& each : map.chunks()) {
    reference.init(each.id, std::span<const float>(init).subspan(static_cast<std::size_t>(each.offset),
                                                                 static_cast<std::size_t>(each.num_elems)));
  }
  ModelBuffer model(static_cast<std::size_t>(map.total_elems()));
  kv.map_pulls_into(model.span());
  pull_until_mapped(kv, model.span(), key, 0);
  CHECK(kv.pull_pages().held(key));
  CHECK(std::vector<float>(model.data, model.data + map.total_elems()) == init);
  const std::int64_t maps = kv.pull_pages().maps();
  CHECK(maps == 1);

  // The push lets the reply go first: the server finds it handed back and updates in the pages the model maps.
  const std::vector<float> grad = pattern(static_cast<std::size_t>(map.total_elems()), 0.25f);
  const std::int64_t in_place_before = server.in_place;
  kv.wait(kv.push(grad, 0, 0.5, std::vector<std::int64_t>{key}));
  CHECK_FALSE(kv.pull_pages().held(key));
  CHECK(server.in_place == in_place_before + 1);
  (void)reference.push(0, key, 0, std::span<const float>(grad).subspan(static_cast<std::size_t>(c.offset),
                                                                     static_cast<std::size_t>(c.num_elems)), 0.5);
  const std::vector<float> updated = reference.snapshot(0, key).values();
  REQUIRE(updated != model.chunk(c));  // the two partial pages are the worker's copies: old until the next reply
  // The whole pages are the server's own: they show its update without a pull (a copy would not).
  const std::size_t head = (4096 - static_cast<std::size_t>(c.offset) * 4 % 4096) % 4096 / 4;
  CHECK(model.data[c.offset + head] == updated[head]);
  CHECK(model.data[c.offset + c.num_elems / 2] == updated[static_cast<std::size_t>(c.num_elems / 2)]);
  CHECK(model.data[c.offset + head - 1] == init[static_cast<std::size_t>(c.offset) + head - 1]);

  // The next reply lies in the same pages: nothing is mapped again, and the chunk holds the update.
  kv.wait(kv.pull(model.span(), 1));
  CHECK(model.chunk(c) == updated);
  CHECK(kv.pull_pages().held(key));
  CHECK(kv.pull_pages().maps() == maps);
  CHECK_FALSE(kv.pull_pages().mapped(0));  // the 100 biases: too small, copied

  // Made private again, as it is: writable, and the server's weights do not change with it.
  kv.map_pulls_into({});
  CHECK_FALSE(kv.pull_pages().mapped(key));
  CHECK(model.chunk(c) == updated);
  model.data[c.offset + c.num_elems / 2] = 12345.0f;
  CHECK(server.weights(key) == updated);
}

TEST_CASE("pull pages: a reply the worker holds makes another worker's update go out of place; the next reply is mapped anew") {
  zmq::context_t ctx;
  ShmTransport t(ctx, shm_options_for(std::int64_t{4} << 20));
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  const ShardMap map = make_map();
  const std::int64_t key = large_chunk(map);
  const Chunk& c = map.chunk(key);
  TestServer server(*listener, map, 2, &t);
  const std::vector<float> init = pattern(static_cast<std::size_t>(map.total_elems()), 1.0f);
  KVClient kv0(t, map, {listener->address()}, client_options(0));
  KVClient kv1(t, map, {listener->address()}, client_options(1));
  kv0.wait(kv0.init(init));
  ModelBuffer model(static_cast<std::size_t>(map.total_elems()));
  kv0.map_pulls_into(model.span());
  pull_until_mapped(kv0, model.span(), key, 0);
  const std::vector<float> before = model.chunk(c);
  const std::int64_t maps = kv0.pull_pages().maps();

  // Worker 1 pushes while worker 0 holds its reply: the server writes a spare, worker 0's pages stay.
  const std::vector<float> grad = pattern(static_cast<std::size_t>(map.total_elems()), 0.25f);
  const std::int64_t in_place_before = server.in_place, updates_before = server.updates;
  kv1.wait(kv1.push(grad, 0, 0.5, std::vector<std::int64_t>{key}));
  CHECK(server.updates == updates_before + 1);
  CHECK(server.in_place == in_place_before);
  CHECK(model.chunk(c) == before);

  kv0.wait(kv0.pull(model.span(), 1, std::vector<std::int64_t>{key}));
  const std::vector<float> updated = server.weights(key);
  CHECK(updated != before);
  CHECK(model.chunk(c) == updated);
  CHECK(kv0.pull_pages().maps() == maps + 1);  // the spare's pages
  kv0.map_pulls_into({});
}

TEST_CASE("pull pages: a reply that cannot be mapped puts private memory back and is copied; over tcp all are copied") {
  zmq::context_t ctx;
  ShmTransport t(ctx, shm_options_for(std::int64_t{4} << 20));
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  const ShardMap map = make_map();
  const std::int64_t key = large_chunk(map);
  const Chunk& c = map.chunk(key);
  TestServer server(*listener, map, 1, &t);
  const std::vector<float> init = pattern(static_cast<std::size_t>(map.total_elems()), 1.0f);
  KVClient kv(t, map, {listener->address()}, client_options(0));
  kv.wait(kv.init(init));
  ModelBuffer model(static_cast<std::size_t>(map.total_elems()));
  kv.map_pulls_into(model.span());
  pull_until_mapped(kv, model.span(), key, 0);
  const std::vector<float> grad = pattern(static_cast<std::size_t>(map.total_elems()), 0.25f);
  kv.wait(kv.push(grad, 0, 0.5, std::vector<std::int64_t>{key}));

  // A copy in the server's ordinary memory goes through a slot: not the server's weights' pages.
  server.copy_replies = true;
  kv.wait(kv.pull(model.span(), 1, std::vector<std::int64_t>{key}));
  CHECK_FALSE(kv.pull_pages().mapped(key));
  CHECK_FALSE(kv.pull_pages().held(key));
  const std::vector<float> updated = server.weights(key);
  CHECK(model.chunk(c) == updated);
  model.data[c.offset + c.num_elems / 2] = -7.0f;  // private: writable, the server's unchanged
  CHECK(server.weights(key) == updated);

  // Mapped again once the replies are the arena's.
  server.copy_replies = false;
  kv.wait(kv.pull(model.span(), 1, std::vector<std::int64_t>{key}));
  CHECK(kv.pull_pages().mapped(key));
  CHECK(model.chunk(c) == updated);
  kv.map_pulls_into({});

  // Over tcp: every reply copied, into the same kind of buffer.
  ZmqTransport z(ctx);
  std::unique_ptr<Listener> tcp_listener = z.listen("tcp://127.0.0.1:*", EndpointOptions{});
  TestServer tcp_server(*tcp_listener, map, 1, &z);
  KVClient tcp(z, map, {tcp_listener->address()}, client_options(0));
  tcp.wait(tcp.init(init));
  ModelBuffer tcp_model(static_cast<std::size_t>(map.total_elems()));
  tcp.map_pulls_into(tcp_model.span());
  tcp.wait(tcp.pull(tcp_model.span(), 0));
  tcp.wait(tcp.pull(tcp_model.span(), 0));
  CHECK_FALSE(tcp.pull_pages().mapped(key));
  CHECK(tcp.pull_pages().taken() == 0);
  CHECK(std::vector<float>(tcp_model.data, tcp_model.data + map.total_elems()) == init);
}

TEST_CASE("pull pages: a buffer not on a page or of another size is refused, naming why") {
  zmq::context_t ctx;
  ZmqTransport z(ctx);
  const ShardMap map = make_map();
  PullPages pages(z, map);
  ModelBuffer model(static_cast<std::size_t>(map.total_elems()) + 1);
  CHECK_THROWS_WITH_AS(pages.set_buffer(model.span().subspan(1)), "pull pages: the buffer does not start on a page",
                       ConfigError);
  CHECK_THROWS_AS(pages.set_buffer(model.span()), ConfigError);
  pages.set_buffer(model.span().first(static_cast<std::size_t>(map.total_elems())));
  CHECK(pages.covers(large_chunk(map), model.data + map.chunk(large_chunk(map)).offset));
}
