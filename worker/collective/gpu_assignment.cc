#include "worker/collective/gpu_assignment.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "common/base/errors.h"

namespace pstrain {

int local_rank_from_env() {
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const std::string_view text(value);
    int rank = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
    if (ec != std::errc() || end != text.data() + text.size() || rank < 0) {
      throw ConfigError(std::string("environment ") + name + "='" + value + "': expected a local rank >= 0");
    }
    return rank;
  }
  return -1;
}

std::string worker_device(const std::string& configured, int local_rank, int num_gpus) {
  if (configured == "cpu" || configured.rfind("cuda:", 0) == 0) return configured;
  if (configured == "auto" && num_gpus <= 0) return configured;
  if (configured != "auto" && configured != "cuda") return configured;  // make_backend reports it
  const int rank = local_rank < 0 ? 0 : local_rank;
  return "cuda:" + std::to_string(num_gpus > 0 ? rank % num_gpus : rank);
}

#if !defined(PSTRAIN_HAVE_CUDA)
int visible_cuda_devices(std::string* why_not) {
  if (why_not != nullptr) *why_not = "pstrain was built without CUDA";
  return 0;
}
#endif

}  // namespace pstrain
