// A push's frames hold the owner of the memory they point into
// (KVClient::push's keep_alive) until the transport lets go of them: a worker
// that unwinds past its pushes (told to exit after it was dropped, a
// failure) frees its gradients while frames may still be queued. Seen once
// in CI and reproduced here: a woken, dropped worker died of SIGSEGV in
// ZeroMQ's I/O thread, copying a queued push from an arena already unmapped.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "common/math/shard_map.h"
#include "common/transport/zmq/zmq_transport.h"
#include "worker/client/kv_client.h"

using namespace pstrain;

TEST_CASE("a push's frames hold its memory's owner: alive while a frame is, whoever else let go") {
  // Over inproc://, ZeroMQ hands the sent message itself to the receiver: what the
  // server holds is the push's frame.
  zmq::context_t ctx;
  ZmqTransport transport(ctx);
  std::unique_ptr<Listener> server = transport.listen("inproc://kv-keep-alive", EndpointOptions{});
  ParamLayout layout;
  layout.add("w", {8});
  layout.add("b", {4});
  const ShardMap map(layout, 1, 1 << 20);
  auto owner = std::make_shared<std::vector<float>>(12, 0.25f);
  const std::weak_ptr<std::vector<float>> watch = owner;
  const float* data = owner->data();
  std::vector<Envelope> received;
  {
    KVClient kv(transport, map, {server->address()}, KVClientOptions{});
    (void)kv.push(std::span<const float>(*owner), 0, 0.1, {}, owner);
    owner.reset();  // as a worker unwinding past its step frees its gradients
    for (int i = 0; i < 2; ++i) {
      std::optional<Envelope> env = server->receive(std::chrono::milliseconds(5000));
      REQUIRE(env.has_value());
      CHECK(env->message.header.type == MsgType::kPush);
      received.push_back(std::move(*env));
    }
  }  // the client, and its record of the pushes, gone
  REQUIRE(received.size() == 2);
  // The frames are the pushed memory itself (zero-copy), and they alone keep it.
  CHECK(reinterpret_cast<const float*>(received[0].message.payload.data()) == data);
  CHECK_FALSE(watch.expired());
  received.clear();
  CHECK(watch.expired());
}
