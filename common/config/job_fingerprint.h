// What every node of one job must agree on, as a string the scheduler
// compares at registration (catches nodes started from different configs).
#pragma once

#include <cstdint>
#include <string>

#include "common/config/config.h"

namespace pstrain {

inline std::string job_fingerprint(Mode mode, std::int64_t partition_bytes, int num_servers, int num_workers) {
  return "mode=" + std::string(to_string(mode)) + " partition_bytes=" + std::to_string(partition_bytes) +
         " servers=" + std::to_string(num_servers) + " workers=" + std::to_string(num_workers);
}

}  // namespace pstrain
