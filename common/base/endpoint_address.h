// The one parser of endpoint addresses ("tcp://HOST:PORT", "ipc://PATH",
// "inproc://NAME", "fake://NAME"): what the config checks, where the
// scheduler binds, what a server advertises, which host a worker's
// collective peers dial, what the launcher gives remote nodes. The
// transports take the text as it is (common/transport/transport.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pstrain {

struct EndpointAddress {
  std::string scheme;  // "tcp", "ipc", "inproc", ...: before "://"
  // tcp: the host (may be empty, "*" or a name) and the port as written
  // (digits, "*", or anything else: is_endpoint checks it), split at the
  // last ':' ("tcp://[::1]:5555" -> "[::1]", "5555").
  std::string host;
  std::string port;
  std::string rest;  // everything after "://"

  bool is_tcp() const { return scheme == "tcp"; }
};

// Nullopt unless `text` is SCHEME://REST with a non-empty scheme; a tcp
// address also needs a ':' in REST (its port).
std::optional<EndpointAddress> parse_endpoint(std::string_view text);

// The host of a tcp address with a host, else nullopt (ipc://, no host).
std::optional<std::string> tcp_host(std::string_view text);

// "tcp://" + host + ":" + port.
std::string tcp_endpoint(std::string_view host, std::string_view port);

// What cluster.scheduler and server endpoints may be: "tcp://HOST:PORT"
// (a host, a port 0..65535) or "ipc://PATH" (a path).
bool is_endpoint(std::string_view text);

}  // namespace pstrain
