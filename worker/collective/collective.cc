#include "worker/collective/collective.h"

namespace pstrain {

void Collective::allreduce_mean(float* data, std::size_t num_elems) {
  start_allreduce_mean(data, num_elems);
  while (!wait_all(std::chrono::milliseconds(1000))) {
  }
}

}  // namespace pstrain
