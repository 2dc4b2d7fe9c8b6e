#include "common/base/endpoint_address.h"

#include <charconv>

namespace pstrain {

std::optional<EndpointAddress> parse_endpoint(std::string_view text) {
  const auto sep = text.find("://");
  if (sep == std::string_view::npos || sep == 0) return std::nullopt;
  EndpointAddress a;
  a.scheme = std::string(text.substr(0, sep));
  a.rest = std::string(text.substr(sep + 3));
  if (a.is_tcp()) {
    const auto colon = a.rest.rfind(':');
    if (colon == std::string::npos) return std::nullopt;
    a.host = a.rest.substr(0, colon);
    a.port = a.rest.substr(colon + 1);
  }
  return a;
}

std::optional<std::string> tcp_host(std::string_view text) {
  const std::optional<EndpointAddress> a = parse_endpoint(text);
  if (!a || !a->is_tcp() || a->host.empty()) return std::nullopt;
  return a->host;
}

std::string tcp_endpoint(std::string_view host, std::string_view port) {
  return "tcp://" + std::string(host) + ":" + std::string(port);
}

bool is_endpoint(std::string_view text) {
  const std::optional<EndpointAddress> a = parse_endpoint(text);
  if (!a) return false;
  if (a->scheme == "ipc") return !a->rest.empty();
  if (!a->is_tcp() || a->host.empty()) return false;
  int value = -1;
  const std::string& port = a->port;
  const auto res = std::from_chars(port.data(), port.data() + port.size(), value);
  return res.ec == std::errc{} && res.ptr == port.data() + port.size() && value >= 0 && value <= 65535;
}

}  // namespace pstrain
