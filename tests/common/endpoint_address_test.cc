// The endpoint parser (common/base/endpoint_address.h) every caller shares.
#include <doctest/doctest.h>

#include "common/base/endpoint_address.h"

using namespace pstrain;

TEST_CASE("endpoint addresses: scheme, host and port") {
  const auto a = parse_endpoint("tcp://node7:41234");
  REQUIRE(a);
  CHECK(a->scheme == "tcp");
  CHECK(a->host == "node7");
  CHECK(a->port == "41234");
  const auto v6 = parse_endpoint("tcp://[::1]:5555");
  REQUIRE(v6);
  CHECK(v6->host == "[::1]");
  CHECK(v6->port == "5555");
  const auto ipc = parse_endpoint("ipc:///tmp/x:y");
  REQUIRE(ipc);
  CHECK(ipc->scheme == "ipc");
  CHECK(ipc->rest == "/tmp/x:y");
  CHECK(ipc->host.empty());
  CHECK(!parse_endpoint("tcp://nohost"));  // no port
  CHECK(!parse_endpoint("node7:41234"));
  CHECK(!parse_endpoint("://x"));
}

TEST_CASE("endpoint addresses: what the config accepts") {
  CHECK(is_endpoint("tcp://127.0.0.1:0"));
  CHECK(is_endpoint("tcp://h:65535"));
  CHECK(is_endpoint("ipc:///tmp/s"));
  CHECK(!is_endpoint("ipc://"));
  CHECK(!is_endpoint("tcp://:5555"));
  CHECK(!is_endpoint("tcp://h:65536"));
  CHECK(!is_endpoint("tcp://h:*"));
  CHECK(!is_endpoint("tcp://h:"));
  CHECK(!is_endpoint("inproc://x"));
}

TEST_CASE("endpoint addresses: a tcp host, and one put back together") {
  CHECK(tcp_host("tcp://10.0.0.5:7000") == std::optional<std::string>("10.0.0.5"));
  CHECK(!tcp_host("ipc:///tmp/s"));
  CHECK(!tcp_host("tcp://:7000"));
  CHECK(tcp_endpoint("node7", "41234") == "tcp://node7:41234");
}
