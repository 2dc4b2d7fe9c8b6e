// Controls how many OpenMP threads oneDNN uses for the calling thread.
//
// oneDNN (Debian's build) runs on OpenMP; its thread count is the calling
// thread's OpenMP "nthreads" setting, which is per thread. pstrain itself is
// not compiled with OpenMP, so the setter is looked up at run time in the
// already-loaded OpenMP runtime (libgomp, pulled in by libdnnl).
// Thread safety: apply() affects only the calling thread; call it before each
// batch of oneDNN work (cheap: one function call).
#pragma once

namespace pstrain::nn {

class OmpThreads {
 public:
  // threads <= 0 means "all cores" (std::thread::hardware_concurrency()).
  explicit OmpThreads(int threads);
  int count() const { return count_; }
  // Sets the calling thread's OpenMP thread count to count(); no-op when no
  // OpenMP runtime is loaded.
  void apply() const;
  // Whether an OpenMP runtime was found (false: oneDNN runs its default).
  bool found() const { return set_num_threads_ != nullptr; }

 private:
  int count_ = 1;
  void (*set_num_threads_)(int) = nullptr;
};

}  // namespace pstrain::nn
