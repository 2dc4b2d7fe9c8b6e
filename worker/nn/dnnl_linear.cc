#include "worker/nn/dnnl_linear.h"

namespace pstrain::nn {
namespace {

using tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;

float* mutable_ptr(const float* p) { return const_cast<float*>(p); }  // oneDNN only reads inputs

}  // namespace

DnnlLinear::DnnlLinear(const dnnl::engine& engine, const LinearShape& s)
    : engine_(engine),
      x_md_({s.n, s.in}, kF32, tag::nc),
      w_md_({s.out, s.in}, kF32, tag::oi),
      b_md_({s.out}, kF32, tag::x),
      y_md_({s.n, s.out}, kF32, tag::nc),
      fwd_pd_({dnnl::prop_kind::forward_training, x_md_, w_md_, b_md_, y_md_}, engine),
      fwd_(fwd_pd_),
      x_(x_md_, engine, DNNL_MEMORY_NONE),
      w_(w_md_, engine, DNNL_MEMORY_NONE),
      b_(b_md_, engine, DNNL_MEMORY_NONE),
      y_(y_md_, engine, DNNL_MEMORY_NONE),
      dx_(x_md_, engine, DNNL_MEMORY_NONE),
      dw_(w_md_, engine, DNNL_MEMORY_NONE),
      db_(b_md_, engine, DNNL_MEMORY_NONE),
      dy_(y_md_, engine, DNNL_MEMORY_NONE) {}

void DnnlLinear::forward(dnnl::stream& stream, const float* x, const float* w, const float* b, float* y) {
  x_.set_data_handle(mutable_ptr(x));
  w_.set_data_handle(mutable_ptr(w));
  b_.set_data_handle(mutable_ptr(b));
  y_.set_data_handle(y);
  fwd_.execute(stream, {{DNNL_ARG_SRC, x_}, {DNNL_ARG_WEIGHTS, w_}, {DNNL_ARG_BIAS, b_}, {DNNL_ARG_DST, y_}});
  stream.wait();
}

void DnnlLinear::build_backward() {
  bwd_data_ = dnnl::inner_product_backward_data(
      dnnl::inner_product_backward_data::primitive_desc({x_md_, w_md_, y_md_}, engine_, fwd_pd_));
  bwd_weights_ = dnnl::inner_product_backward_weights(
      dnnl::inner_product_backward_weights::primitive_desc({x_md_, w_md_, b_md_, y_md_}, engine_, fwd_pd_));
  have_bwd_ = true;
}

void DnnlLinear::backward(dnnl::stream& stream, const float* x, const float* w, const float* dy, float* dx,
                          float* dw, float* db) {
  if (!have_bwd_) build_backward();
  dy_.set_data_handle(mutable_ptr(dy));
  if (dx != nullptr) {
    w_.set_data_handle(mutable_ptr(w));
    dx_.set_data_handle(dx);
    bwd_data_.execute(stream, {{DNNL_ARG_DIFF_DST, dy_}, {DNNL_ARG_WEIGHTS, w_}, {DNNL_ARG_DIFF_SRC, dx_}});
  }
  x_.set_data_handle(mutable_ptr(x));
  dw_.set_data_handle(dw);
  db_.set_data_handle(db);
  bwd_weights_.execute(stream, {{DNNL_ARG_SRC, x_},
                                {DNNL_ARG_DIFF_DST, dy_},
                                {DNNL_ARG_DIFF_WEIGHTS, dw_},
                                {DNNL_ARG_DIFF_BIAS, db_}});
  stream.wait();
}

}  // namespace pstrain::nn
