// Ports a launch will bind, checked before anything starts: a scheduler or
// server port that another process holds fails the launch (and `--check`)
// with a config error naming the key, before the run directory changes.
#pragma once

#include <string>
#include <vector>

#include "common/config/config.h"

namespace pstrain::launcher {

// Why a TCP listener cannot bind `host`:`port` on this machine now ("" when
// it can). `host` "*" or "0.0.0.0" means every interface. The probe binds as
// ZeroMQ does (SO_REUSEADDR, so a port left in TIME_WAIT is free) and closes
// at once. A host name is resolved (IPv4); one that does not resolve is not
// this function's to judge ("").
std::string tcp_bind_problem(const std::string& host, int port);

// One port a launch on this machine will bind: for `key`, at `host`:`port`.
struct PlannedPort {
  std::string key;   // "cluster.scheduler", "cluster.server_port"
  std::string host;  // as it will be bound
  int port = 0;
  std::string who;   // "the scheduler", "server 1"
};

// The fixed ports (not 0) that the scheduler and the servers started on this
// machine will bind: the scheduler's tcp endpoint; server r at
// cluster.server_port + r (127.0.0.1 when every server is local, every
// interface on the hosts of cluster.server_hosts that are this machine).
std::vector<PlannedPort> planned_ports(const RunConfig& config);

}  // namespace pstrain::launcher
