#include "worker/nn/cpu_backend.h"

#include <cstring>
#include <new>

#include <sys/mman.h>

#include "common/base/errors.h"
#include "worker/nn/cpu_ops.h"
#include "worker/nn/shape_checks.h"

namespace pstrain::nn {
namespace {

constexpr std::align_val_t kAlignment{64};

// Runs a oneDNN call, turning its errors into ComputeError naming the op.
template <class Fn>
void run_dnnl(const char* op, const std::string& shape, Fn&& fn) {
  try {
    fn();
  } catch (const dnnl::error& e) {
    throw ComputeError(std::string(op) + " [" + shape + "]: oneDNN: " + e.what());
  }
}

}  // namespace

CpuBackend::CpuBackend(int threads) : threads_(threads), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

std::string CpuBackend::name() const {
  return "cpu (oneDNN, " + std::to_string(threads_.count()) + (threads_.count() == 1 ? " thread)" : " threads)");
}

ComputePath CpuBackend::compute_path() const {
  const dnnl_version_t* v = dnnl_version();
  return {"onednn", "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch),
          "fp32"};
}

void* CpuBackend::allocate(std::size_t num_bytes) {
  if (num_bytes >= kPagesOfItsOwnBytes) {  // pages of its own: zeroed, page aligned, unmapped whole when freed
    void* p = ::mmap(nullptr, num_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw ComputeError("cpu allocate: out of memory for " + std::to_string(num_bytes) + " bytes");
    const std::lock_guard<std::mutex> lock(mapped_mutex_);
    mapped_.emplace(p, num_bytes);
    return p;
  }
  const std::size_t rounded = (num_bytes + 63) / 64 * 64;
  try {
    return ::operator new(rounded == 0 ? 64 : rounded, kAlignment);
  } catch (const std::bad_alloc&) {
    throw ComputeError("cpu allocate: out of memory for " + std::to_string(num_bytes) + " bytes");
  }
}

void CpuBackend::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  {
    const std::lock_guard<std::mutex> lock(mapped_mutex_);
    if (const auto it = mapped_.find(ptr); it != mapped_.end()) {
      ::munmap(ptr, it->second);  // with any pages mapped into it since
      mapped_.erase(it);
      return;
    }
  }
  ::operator delete(ptr, kAlignment);
}

void CpuBackend::copy_from_host(void* dst, const void* host_src, std::size_t num_bytes) {
  if (num_bytes != 0) std::memcpy(dst, host_src, num_bytes);
}

void CpuBackend::copy_to_host(void* host_dst, const void* src, std::size_t num_bytes) {
  if (num_bytes != 0) std::memcpy(host_dst, src, num_bytes);
}

void CpuBackend::copy(void* dst, const void* src, std::size_t num_bytes) {
  if (num_bytes != 0) std::memmove(dst, src, num_bytes);
}

void CpuBackend::fill(float* x, float value, std::size_t num_elems) {
  for (std::size_t i = 0; i < num_elems; ++i) x[i] = value;
}

DnnlConv& CpuBackend::conv_for(const Conv2dShape& s) {
  const std::array<int, 9> key{s.n, s.c_in, s.h, s.w, s.c_out, s.k_h, s.k_w, s.stride, s.pad};
  auto& slot = convs_[key];
  if (!slot) slot = std::make_unique<DnnlConv>(engine_, s);
  return *slot;
}

DnnlLinear& CpuBackend::linear_for(const LinearShape& s) {
  auto& slot = linears_[{s.n, s.in, s.out}];
  if (!slot) slot = std::make_unique<DnnlLinear>(engine_, s);
  return *slot;
}

void CpuBackend::conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y) {
  check_shape(s, "conv2d_forward");
  threads_.apply();
  run_dnnl("conv2d_forward", to_string(s), [&] { conv_for(s).forward(stream_, x, w, b, y); });
}

void CpuBackend::conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dx,
                                 float* dw, float* db) {
  check_shape(s, "conv2d_backward");
  threads_.apply();
  run_dnnl("conv2d_backward", to_string(s), [&] { conv_for(s).backward(stream_, x, w, dy, dx, dw, db); });
}

void CpuBackend::linear_forward(const LinearShape& s, const float* x, const float* w, const float* b, float* y) {
  check_shape(s, "linear_forward");
  threads_.apply();
  run_dnnl("linear_forward", to_string(s), [&] { linear_for(s).forward(stream_, x, w, b, y); });
}

void CpuBackend::linear_backward(const LinearShape& s, const float* x, const float* w, const float* dy, float* dx,
                                 float* dw, float* db) {
  check_shape(s, "linear_backward");
  threads_.apply();
  run_dnnl("linear_backward", to_string(s), [&] { linear_for(s).backward(stream_, x, w, dy, dx, dw, db); });
}

void CpuBackend::relu_forward(const float* x, float* y, std::size_t num_elems) {
  cpu::relu_forward(x, y, num_elems);
}

void CpuBackend::relu_backward(const float* y, const float* dy, float* dx, std::size_t num_elems) {
  cpu::relu_backward(y, dy, dx, num_elems);
}

void CpuBackend::maxpool_forward(const PoolShape& s, const float* x, float* y, std::int32_t* argmax) {
  check_shape(s, "maxpool_forward");
  cpu::maxpool_forward(s, x, y, argmax);
}

void CpuBackend::maxpool_backward(const PoolShape& s, const float* dy, const std::int32_t* argmax, float* dx) {
  check_shape(s, "maxpool_backward");
  cpu::maxpool_backward(s, dy, argmax, dx);
}

void CpuBackend::dropout_forward(const float* x, float* y, float* mask, std::size_t num_elems, float p,
                                 std::uint64_t seed) {
  cpu::dropout_forward(x, y, mask, num_elems, p, seed);
}

void CpuBackend::dropout_backward(const float* dy, const float* mask, float* dx, std::size_t num_elems) {
  cpu::dropout_backward(dy, mask, dx, num_elems);
}

Backend::XentResult CpuBackend::softmax_xent(int n, int classes, const float* logits, const std::int32_t* labels,
                                             float* dlogits) {
  if (n <= 0 || classes <= 0) {
    throw ComputeError("softmax_xent: n=" + std::to_string(n) + " classes=" + std::to_string(classes) +
                       ": both must be positive");
  }
  return cpu::softmax_xent(n, classes, logits, labels, dlogits);
}

void CpuBackend::sgd_step(float* w, const float* g, float* velocity, std::size_t num_elems,
                          const update::SgdCoefficients& c) {
  update::sgd_update(w, g, velocity, num_elems, c);
}

void CpuBackend::adam_step(float* w, const float* g, float* m, float* v, std::size_t num_elems,
                           const update::AdamCoefficients& c) {
  update::adam_update(w, g, m, v, num_elems, c);
}

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace pstrain::nn
