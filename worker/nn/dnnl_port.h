// One tensor argument of a oneDNN primitive: the caller's buffer in a plain
// layout (NCHW / OIHW / [n, in] ...) and, when the primitive prefers another
// (blocked) layout, an internal buffer plus the reorders between the two.
// Built once per primitive; per call only the caller's pointer changes.
// Not thread-safe (the internal buffer is reused).
#pragma once

#include <dnnl.hpp>

namespace pstrain::nn {

class DnnlPort {
 public:
  DnnlPort() = default;
  // plain: the caller's layout; wanted: the primitive's (may equal plain).
  DnnlPort(const dnnl::engine& engine, const dnnl::memory::desc& plain, const dnnl::memory::desc& wanted);

  // An input: points the plain memory at `data`, reorders into the internal
  // layout if needed, and returns the memory to pass to the primitive.
  const dnnl::memory& input(dnnl::stream& stream, const float* data);
  // An output: returns the memory the primitive writes; finish_output() then
  // copies it into `data` (reordering if needed).
  const dnnl::memory& output(float* data);
  void finish_output(dnnl::stream& stream);
  bool reorders() const { return reorders_; }
  // The primitive-side memory's layout (after input()/output()).
  dnnl::memory::desc inner_desc() const { return inner_.get_desc(); }
  // The primitive-side memory as last filled by input().
  const dnnl::memory& inner() const { return inner_; }

 private:
  dnnl::memory plain_;
  dnnl::memory inner_;
  dnnl::reorder to_inner_;
  dnnl::reorder to_plain_;
  bool reorders_ = false;
};

}  // namespace pstrain::nn
