#include "worker/nn/omp_threads.h"

#include <dlfcn.h>

#include <thread>

namespace pstrain::nn {

OmpThreads::OmpThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  count_ = threads > 0 ? threads : 1;
  void* sym = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
  set_num_threads_ = reinterpret_cast<void (*)(int)>(sym);
}

void OmpThreads::apply() const {
  if (set_num_threads_ != nullptr) set_num_threads_(count_);
}

}  // namespace pstrain::nn
