#include "common/transport/make_transport.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include <zmq.hpp>

#include "common/base/errors.h"
#include "common/transport/shm/shm_transport.h"
#include "common/transport/zmq/zmq_transport.h"

namespace pstrain {

int io_threads_for(bool encrypted) {
  if (!encrypted) return 1;
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) cores = CPU_COUNT(&allowed);  // taskset, cgroup cpusets
  return std::clamp(cores, 1, 4);
}

std::unique_ptr<Transport> make_transport(const std::string& kind, std::int64_t partition_bytes, int io_threads) {
  if (io_threads < 1 || io_threads > 64) {
    throw ConfigError("ZeroMQ I/O threads must be 1..64, got " + std::to_string(io_threads));
  }
  if (kind == "tcp" || kind == "ipc") {
    auto t = std::make_unique<ZmqTransport>();
    t->context().set(zmq::ctxopt::io_threads, io_threads);  // before its first socket
    return t;
  }
  if (kind == "shm") {
    auto t = std::make_unique<ShmTransport>(shm_options_for(partition_bytes));
    t->context().set(zmq::ctxopt::io_threads, io_threads);
    return t;
  }
  throw ConfigError("unknown transport '" + kind + "' (tcp, ipc or shm)");
}

std::unique_ptr<Transport> make_zmq_transport() { return std::make_unique<ZmqTransport>(); }

}  // namespace pstrain
