#include "common/transport/make_transport.h"

#include "common/base/errors.h"
#include "common/transport/shm/shm_transport.h"
#include "common/transport/zmq/zmq_transport.h"

namespace pstrain {

std::unique_ptr<Transport> make_transport(const std::string& kind, std::int64_t partition_bytes) {
  if (kind == "tcp" || kind == "ipc") return std::make_unique<ZmqTransport>();
  if (kind == "shm") return std::make_unique<ShmTransport>(shm_options_for(partition_bytes));
  throw ConfigError("unknown transport '" + kind + "' (tcp, ipc or shm)");
}

std::unique_ptr<Transport> make_zmq_transport() { return std::make_unique<ZmqTransport>(); }

}  // namespace pstrain
