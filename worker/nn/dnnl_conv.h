// A 2-D convolution of one fixed shape on oneDNN: forward, backward-data and
// backward-weights(+bias) primitives, built lazily on first use and kept.
//
// Layouts: the caller's tensors are plain (x, y: NCHW; w: OIHW; b: [c_out]).
// The primitives pick their own (blocked, e.g. nChw16c) layouts and the
// DnnlPorts reorder in and out; measured on AVX-512 this is ~2x faster end
// to end than running on plain layouts (see tools/bench_train_step). The
// exception is backward-data with few input channels (< 8), where blocking
// pads the channels and the plain (GEMM-based) path is faster.
// Not thread-safe; the caller sets the OpenMP thread count.
#pragma once


#include <dnnl.hpp>

#include "worker/nn/backend.h"
#include "worker/nn/dnnl_port.h"

namespace pstrain::nn {

class DnnlConv {
 public:
  DnnlConv(const dnnl::engine& engine, const Conv2dShape& shape);

  // x [n, c_in, h, w], w [c_out, c_in, k_h, k_w], b [c_out] -> y [n, c_out, out_h, out_w]
  void forward(dnnl::stream& stream, const float* x, const float* w, const float* b, float* y);
  // dx (may be null: skipped) [n, c_in, h, w]; dw, db overwritten.
  void backward(dnnl::stream& stream, const float* x, const float* w, const float* dy, float* dx,
                float* dw, float* db);

  // Implementation names chosen by oneDNN (e.g. "jit:avx512_core"), for reports.
  const char* forward_impl() const;

 private:
  void build_backward_data();
  void build_backward_weights();

  dnnl::engine engine_;
  Conv2dShape shape_;
  dnnl::memory::desc x_md_, w_md_, b_md_, y_md_;  // plain layouts
  dnnl::convolution_forward::primitive_desc fwd_pd_;
  dnnl::convolution_forward fwd_;
  DnnlPort fwd_x_, fwd_w_, fwd_y_;
  dnnl::memory fwd_b_;

  bool have_bwd_data_ = false;
  dnnl::convolution_backward_data bwd_data_;
  DnnlPort bd_dy_, bd_w_, bd_dx_;

  bool have_bwd_weights_ = false;
  dnnl::convolution_backward_weights bwd_weights_;
  DnnlPort bw_x_, bw_dy_, bw_dw_;
  dnnl::memory bw_db_;
};

}  // namespace pstrain::nn
