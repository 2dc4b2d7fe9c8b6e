// common/transport/make_transport.h: the ZeroMQ I/O threads a node's context
// gets (1 in the clear, one per allowed core up to 4 with CURVE), set on the
// context before its first socket, and a bad count refused.
#include <doctest/doctest.h>

#include <sched.h>

#include <algorithm>
#include <memory>

#include <zmq.hpp>

#include "common/base/errors.h"
#include "common/transport/make_transport.h"
#include "common/transport/shm/shm_transport.h"
#include "common/transport/zmq/zmq_transport.h"

using namespace pstrain;

TEST_CASE("make_transport: I/O threads per core under curve, one in the clear, on every transport kind") {
  CHECK(io_threads_for(false) == 1);
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  CHECK(io_threads_for(true) == std::clamp(CPU_COUNT(&allowed), 1, 4));

  std::unique_ptr<Transport> tcp = make_transport("tcp", 0, 3);
  auto* zmq_transport = dynamic_cast<ZmqTransport*>(tcp.get());
  REQUIRE(zmq_transport != nullptr);
  CHECK(zmq_transport->context().get(zmq::ctxopt::io_threads) == 3);
  std::unique_ptr<Transport> shm = make_transport("shm", 1 << 20, 2);
  auto* shm_transport = dynamic_cast<ShmTransport*>(shm.get());
  REQUIRE(shm_transport != nullptr);
  CHECK(shm_transport->context().get(zmq::ctxopt::io_threads) == 2);
  CHECK(dynamic_cast<ZmqTransport&>(*make_transport("ipc", 0)).context().get(zmq::ctxopt::io_threads) == 1);

  CHECK_THROWS_AS(make_transport("tcp", 0, 0), ConfigError);
  CHECK_THROWS_AS(make_transport("tcp", 0, 65), ConfigError);
  CHECK_THROWS_AS(make_transport("udp", 0, 1), ConfigError);
}
