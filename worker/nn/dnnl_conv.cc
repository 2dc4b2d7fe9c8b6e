#include "worker/nn/dnnl_conv.h"

namespace pstrain::nn {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;
constexpr auto kDirect = dnnl::algorithm::convolution_direct;
// Measured (batch 64, 3x3, 16 output channels, 1 thread): blocked backward-data costs
// the same for 1..16 input channels (they are padded to 16), plain grows
// with them; they cross between 4 and 8.
constexpr int kMinBlockedBackwardDataChannels = 8;

dims x_dims(const Conv2dShape& s) { return {s.n, s.c_in, s.h, s.w}; }
dims w_dims(const Conv2dShape& s) { return {s.c_out, s.c_in, s.k_h, s.k_w}; }
dims y_dims(const Conv2dShape& s) { return {s.n, s.c_out, s.out_h(), s.out_w()}; }
dims strides(const Conv2dShape& s) { return {s.stride, s.stride}; }
dims pad_l(const Conv2dShape& s) { return {s.pad, s.pad}; }
// Right padding such that the last window ends inside the padded input
// (windows that would start past it are not computed, like floor division).
dims pad_r(const Conv2dShape& s) {
  return {(s.out_h() - 1) * s.stride + s.k_h - s.h - s.pad, (s.out_w() - 1) * s.stride + s.k_w - s.w - s.pad};
}

dnnl::convolution_forward::desc forward_desc(const Conv2dShape& s, tag act, tag wt) {
  return dnnl::convolution_forward::desc(
      dnnl::prop_kind::forward_training, kDirect, dnnl::memory::desc(x_dims(s), kF32, act),
      dnnl::memory::desc(w_dims(s), kF32, wt), dnnl::memory::desc({s.c_out}, kF32, tag::x),
      dnnl::memory::desc(y_dims(s), kF32, act), strides(s), pad_l(s), pad_r(s));
}

}  // namespace

DnnlConv::DnnlConv(const dnnl::engine& engine, const Conv2dShape& shape)
    : engine_(engine),
      shape_(shape),
      x_md_(x_dims(shape), kF32, tag::nchw),
      w_md_(w_dims(shape), kF32, tag::oihw),
      b_md_({shape.c_out}, kF32, tag::x),
      y_md_(y_dims(shape), kF32, tag::nchw),
      fwd_pd_(forward_desc(shape, tag::any, tag::any), engine),
      fwd_(fwd_pd_),
      fwd_x_(engine, x_md_, fwd_pd_.src_desc()),
      fwd_w_(engine, w_md_, fwd_pd_.weights_desc()),
      fwd_y_(engine, y_md_, fwd_pd_.dst_desc()),
      fwd_b_(b_md_, engine, DNNL_MEMORY_NONE) {}

const char* DnnlConv::forward_impl() const { return fwd_pd_.impl_info_str(); }

void DnnlConv::forward(dnnl::stream& stream, const float* x, const float* w, const float* b, float* y) {
  fwd_b_.set_data_handle(const_cast<float*>(b));
  fwd_.execute(stream, {{DNNL_ARG_SRC, fwd_x_.input(stream, x)},
                        {DNNL_ARG_WEIGHTS, fwd_w_.input(stream, w)},
                        {DNNL_ARG_BIAS, fwd_b_},
                        {DNNL_ARG_DST, fwd_y_.output(y)}});
  fwd_y_.finish_output(stream);
  stream.wait();
}

void DnnlConv::build_backward_data() {
  const Conv2dShape& s = shape_;
  const tag act = s.c_in >= kMinBlockedBackwardDataChannels ? tag::any : tag::nchw;
  // The hint must describe a forward primitive with the same layouts.
  dnnl::convolution_forward::primitive_desc hint(forward_desc(s, act, tag::any), engine_);
  dnnl::convolution_backward_data::desc desc(kDirect, dnnl::memory::desc(x_dims(s), kF32, act),
                                             dnnl::memory::desc(w_dims(s), kF32, tag::any),
                                             dnnl::memory::desc(y_dims(s), kF32, act), strides(s), pad_l(s),
                                             pad_r(s));
  dnnl::convolution_backward_data::primitive_desc pd(desc, engine_, hint);
  bwd_data_ = dnnl::convolution_backward_data(pd);
  bd_dy_ = DnnlPort(engine_, y_md_, pd.diff_dst_desc());
  bd_w_ = DnnlPort(engine_, w_md_, pd.weights_desc());
  bd_dx_ = DnnlPort(engine_, x_md_, pd.diff_src_desc());
  have_bwd_data_ = true;
}

void DnnlConv::build_backward_weights() {
  const Conv2dShape& s = shape_;
  dnnl::convolution_backward_weights::desc desc(
      kDirect, dnnl::memory::desc(x_dims(s), kF32, tag::any), dnnl::memory::desc(w_dims(s), kF32, tag::any),
      b_md_, dnnl::memory::desc(y_dims(s), kF32, tag::any), strides(s), pad_l(s), pad_r(s));
  dnnl::convolution_backward_weights::primitive_desc pd(desc, engine_, fwd_pd_);
  bwd_weights_ = dnnl::convolution_backward_weights(pd);
  bw_x_ = DnnlPort(engine_, x_md_, pd.src_desc());
  bw_dy_ = DnnlPort(engine_, y_md_, pd.diff_dst_desc());
  bw_dw_ = DnnlPort(engine_, w_md_, pd.diff_weights_desc());
  bw_db_ = dnnl::memory(b_md_, engine_, DNNL_MEMORY_NONE);
  have_bwd_weights_ = true;
}

void DnnlConv::backward(dnnl::stream& stream, const float* x, const float* w, const float* dy, float* dx,
                        float* dw, float* db) {
  if (dx != nullptr) {
    if (!have_bwd_data_) build_backward_data();
    bwd_data_.execute(stream, {{DNNL_ARG_DIFF_DST, bd_dy_.input(stream, dy)},
                               {DNNL_ARG_WEIGHTS, bd_w_.input(stream, w)},
                               {DNNL_ARG_DIFF_SRC, bd_dx_.output(dx)}});
    bd_dx_.finish_output(stream);
  }
  if (!have_bwd_weights_) build_backward_weights();
  // dy in the backward-data layout is reused when backward-weights wants the same one.
  const bool reuse_dy = dx != nullptr && bd_dy_.reorders() && bd_dy_.inner_desc() == bw_dy_.inner_desc();
  const dnnl::memory& dy_mem = reuse_dy ? bd_dy_.inner() : bw_dy_.input(stream, dy);
  bw_db_.set_data_handle(db);
  bwd_weights_.execute(stream, {{DNNL_ARG_SRC, bw_x_.input(stream, x)},
                                {DNNL_ARG_DIFF_DST, dy_mem},
                                {DNNL_ARG_DIFF_WEIGHTS, bw_dw_.output(dw)},
                                {DNNL_ARG_DIFF_BIAS, bw_db_}});
  bw_dw_.finish_output(stream);
  stream.wait();
}

}  // namespace pstrain::nn
