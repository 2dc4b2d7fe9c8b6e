#include "worker/nn/param_layers.h"

#include "common/base/errors.h"
#include "worker/nn/shape_checks.h"
#include "worker/nn/weight_init.h"

namespace pstrain::nn {

void ParamLayer::bind(float* params, float* grads) {
  params_ = params;
  grads_ = grads;
}

void ParamLayer::add_tensors(ParamLayout& layout, std::vector<std::int64_t> weight_shape, std::int64_t fan_in,
                             std::int64_t fan_out) {
  const std::int64_t bias_elems = weight_shape.front();
  weight_ = layout.add(name() + ".weight", std::move(weight_shape));
  bias_ = layout.add(name() + ".bias", {bias_elems});
  fan_in_ = fan_in;
  fan_out_ = fan_out;
}

void ParamLayer::init_params(std::mt19937_64& rng, std::span<float> host_flat) const {
  fill_uniform(rng, init_bound(init_, fan_in_, fan_out_),
               host_flat.subspan(static_cast<std::size_t>(weight_.offset), static_cast<std::size_t>(weight_.num_elems)));
  for (auto& b : host_flat.subspan(static_cast<std::size_t>(bias_.offset), static_cast<std::size_t>(bias_.num_elems))) {
    b = 0.0f;
  }
}

// ---- Conv2d ----

Conv2d::Conv2d(std::string name, Dims in, int out_channels, int kernel, int stride, int pad, WeightInit init,
               Backend& backend, int max_batch)
    : ParamLayer(std::move(name), in, init, backend, max_batch),
      shape_{1, in.c, in.h, in.w, out_channels, kernel, kernel, stride, pad} {
  check_shape(shape_, "conv2d layer '" + this->name() + "'");
}

Dims Conv2d::output_dims() const { return {shape_.c_out, shape_.out_h(), shape_.out_w()}; }

Conv2dShape Conv2d::shape(int batch) const {
  Conv2dShape s = shape_;
  s.n = batch;
  return s;
}

void Conv2d::add_params(ParamLayout& layout) {
  const std::int64_t taps = std::int64_t{shape_.k_h} * shape_.k_w;
  add_tensors(layout, {shape_.c_out, shape_.c_in, shape_.k_h, shape_.k_w}, shape_.c_in * taps,
              shape_.c_out * taps);
}

void Conv2d::forward(const ForwardContext& ctx, const float* x, float* y) {
  backend().conv2d_forward(shape(ctx.batch), x, weight(), bias(), y);
}

bool Conv2d::forward_relu(const ForwardContext& ctx, const float* x, float* relu_y) {
  return backend().conv2d_relu_forward(shape(ctx.batch), x, weight(), bias(), relu_y);
}

void Conv2d::backward(int batch, const float* x, const float* /*y*/, const float* dy, float* dx) {
  backend().conv2d_backward(shape(batch), x, weight(), dy, dx, weight_grad(), bias_grad());
}

double Conv2d::forward_flops(int batch) const {
  return 2.0 * batch * shape_.c_out * shape_.out_h() * shape_.out_w() * shape_.c_in * shape_.k_h * shape_.k_w;
}

double Conv2d::backward_flops(int batch, bool need_dx) const {
  return forward_flops(batch) * (need_dx ? 2.0 : 1.0);
}

// ---- Linear ----

Linear::Linear(std::string name, Dims in, int out_features, WeightInit init, Backend& backend, int max_batch)
    : ParamLayer(std::move(name), in, init, backend, max_batch),
      shape_{1, static_cast<int>(in.num_elems()), out_features} {
  check_shape(shape_, "linear layer '" + this->name() + "'");
}

LinearShape Linear::shape(int batch) const {
  LinearShape s = shape_;
  s.n = batch;
  return s;
}

void Linear::add_params(ParamLayout& layout) {
  add_tensors(layout, {shape_.out, shape_.in}, shape_.in, shape_.out);
}

void Linear::forward(const ForwardContext& ctx, const float* x, float* y) {
  backend().linear_forward(shape(ctx.batch), x, weight(), bias(), y);
}

void Linear::backward(int batch, const float* x, const float* /*y*/, const float* dy, float* dx) {
  backend().linear_backward(shape(batch), x, weight(), dy, dx, weight_grad(), bias_grad());
}

double Linear::forward_flops(int batch) const { return 2.0 * batch * shape_.in * shape_.out; }

double Linear::backward_flops(int batch, bool need_dx) const {
  return forward_flops(batch) * (need_dx ? 2.0 : 1.0);
}

}  // namespace pstrain::nn
