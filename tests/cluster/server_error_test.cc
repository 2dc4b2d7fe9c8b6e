// Typed outcomes at the worker: a server's error status reaches the worker
// as a ServerError carrying the status and the server's rank (or as
// AbortedError when the server is ending the job), not as text only.
#include <doctest/doctest.h>

#include <limits>

#include "common/base/errors.h"
#include "common/wire/protocol.h"
#include "tools/cluster/local_cluster.h"
#include "worker/client/kv_client.h"
#include "common/transport/zmq/zmq_transport.h"

using namespace pstrain;

TEST_CASE("a server's error status reaches the worker as a typed ServerError") {
  LocalClusterOptions o;
  o.num_servers = 2;
  o.num_workers = 1;
  o.optimizer.momentum = 0.0;
  o.partition_bytes = 64;  // 16 floats a chunk: both servers hold some
  o.cluster.timeout_ms = 5000;
  o.log_level = LogLevel::kError;
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  ParamLayout layout;
  layout.add("w", {64});
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(), layout);
  std::vector<float> params(64, 1.0f);
  session.broadcast_initial(params);
  const ShardMap& map = session.shard_map();
  REQUIRE(map.num_servers() == 2);
  std::int64_t key_on_1 = -1;
  for (const Chunk& c : map.chunks()) {
    if (c.server == 1 && key_on_1 < 0) key_on_1 = c.id;
  }
  REQUIRE(key_on_1 >= 0);

  // A NaN gradient for a chunk of server 1: rejected, by server 1.
  std::vector<float> grad(64, 0.0f);
  grad[static_cast<std::size_t>(map.chunk(key_on_1).offset)] = std::numeric_limits<float>::quiet_NaN();
  const std::int64_t keys[] = {key_on_1};
  try {
    session.kv().wait(session.kv().push(grad, 0, 0.1, keys));
    FAIL("expected a ServerError");
  } catch (const ServerError& e) {
    CHECK(e.status() == Status::kRejected);
    CHECK(e.server() == 1);
    CHECK(std::string(e.what()).find("non-finite") != std::string::npos);
    CHECK(std::string(e.what()).find("[rejected]") != std::string::npos);
  }
  // A sync push ahead of the chunk's version: rejected as well, and still a
  // TransportError for code that only asks whether the request failed.
  std::vector<float> good(64, 1.0f);
  CHECK_THROWS_AS(session.kv().wait(session.kv().push(good, 5, 0.1, keys)), TransportError);
  // The servers go on: a good push and pull.
  session.kv().wait(session.kv().push(good, 0, 0.5));
  session.kv().wait(session.kv().pull(params, 1));
  for (float x : params) CHECK(x == 0.5f);
  session.finish();
  cluster.join();
}

TEST_CASE("what each error status means at the worker") {
  auto outcome = [](Status s) -> std::string {
    try {
      throw_server_error(s, 3, "server 3: text");
    } catch (const AbortedError&) {
      return "aborted";
    } catch (const ServerError& e) {
      CHECK(e.server() == 3);
      CHECK(e.status() == s);
      return "server error";
    } catch (const ProtocolError&) {
      return "protocol";
    }
    return "none";
  };
  CHECK(outcome(Status::kRejected) == "server error");
  CHECK(outcome(Status::kNotOwner) == "server error");
  CHECK(outcome(Status::kBadRequest) == "server error");
  CHECK(outcome(Status::kAborted) == "aborted");
  CHECK(outcome(Status::kOk) == "protocol");
}
