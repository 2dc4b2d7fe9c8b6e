#include "tools/launcher/port_check.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tools/launcher/remote.h"

namespace pstrain::launcher {

std::string tcp_bind_problem(const std::string& host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (host == "*" || host == "0.0.0.0") {
    address.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return "";
    address.sin_addr = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
    freeaddrinfo(found);
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  std::string problem;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) problem = std::strerror(errno);
  close(fd);
  return problem;
}

std::vector<PlannedPort> planned_ports(const RunConfig& config) {
  std::vector<PlannedPort> ports;
  const std::string& endpoint = config.cluster.scheduler;
  const auto colon = endpoint.rfind(':');
  if (endpoint.rfind("tcp://", 0) == 0 && colon != std::string::npos && colon > 6) {
    const int port = std::atoi(endpoint.c_str() + colon + 1);
    if (port > 0) ports.push_back({"cluster.scheduler", endpoint.substr(6, colon - 6), port, "the scheduler"});
  }
  if (config.mode == Mode::kAllreduce || config.cluster.server_port <= 0 || config.cluster.transport == "ipc") {
    return ports;
  }
  const auto& hosts = config.cluster.server_hosts;
  for (int r = 0; r < config.cluster.num_servers; ++r) {
    const bool local_only = hosts.empty();
    if (!local_only && !is_this_machine(hosts.at(static_cast<std::size_t>(r)))) continue;
    ports.push_back({"cluster.server_port", local_only ? "127.0.0.1" : "*", config.cluster.server_port + r,
                     "server " + std::to_string(r)});
  }
  return ports;
}

}  // namespace pstrain::launcher
