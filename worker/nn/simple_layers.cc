#include "worker/nn/simple_layers.h"

#include "common/base/errors.h"
#include "worker/nn/shape_checks.h"

namespace pstrain::nn {
namespace {

std::size_t elems(int batch, Dims d) { return static_cast<std::size_t>(batch * d.num_elems()); }

}  // namespace

// ---- ReLU ----

void ReLU::forward(const ForwardContext& ctx, const float* x, float* y) {
  backend().relu_forward(x, y, elems(ctx.batch, input_dims()));
}

void ReLU::backward(int batch, const float* /*x*/, const float* y, const float* dy, float* dx) {
  if (dx != nullptr) backend().relu_backward(y, dy, dx, elems(batch, input_dims()));
}

// ---- MaxPool2d ----

MaxPool2d::MaxPool2d(Dims in, int kernel, int stride, Backend& backend, int max_batch)
    : Layer("maxpool", in, backend, max_batch), shape_{1, in.c, in.h, in.w, kernel, stride} {
  check_shape(shape(max_batch), "maxpool layer");
  argmax_ = DeviceBuffer(backend, elems(max_batch, output_dims()) * sizeof(std::int32_t));
}

Dims MaxPool2d::output_dims() const { return {shape_.c, shape_.out_h(), shape_.out_w()}; }

PoolShape MaxPool2d::shape(int batch) const {
  PoolShape s = shape_;
  s.n = batch;
  return s;
}

void MaxPool2d::forward(const ForwardContext& ctx, const float* x, float* y) {
  backend().maxpool_forward(shape(ctx.batch), x, y, argmax_.as<std::int32_t>());
}

void MaxPool2d::backward(int batch, const float* /*x*/, const float* /*y*/, const float* dy, float* dx) {
  if (dx != nullptr) backend().maxpool_backward(shape(batch), dy, argmax_.as<std::int32_t>(), dx);
}

// ---- Dropout ----

Dropout::Dropout(Dims in, float drop_p, Backend& backend, int max_batch)
    : Layer("dropout", in, backend, max_batch), drop_p_(drop_p) {
  if (!(drop_p >= 0.0f && drop_p < 1.0f)) {
    throw ComputeError("dropout layer: drop probability " + std::to_string(drop_p) + " is outside [0, 1)");
  }
  mask_ = DeviceBuffer(backend, elems(max_batch, in) * sizeof(float));
}

void Dropout::forward(const ForwardContext& ctx, const float* x, float* y) {
  last_training_ = ctx.training;
  const std::size_t n = elems(ctx.batch, input_dims());
  if (ctx.training) {
    backend().dropout_forward(x, y, mask_.f32(), n, drop_p_, ctx.seed);
  } else if (x != y) {
    backend().copy(y, x, n * sizeof(float));
  }
}

void Dropout::backward(int batch, const float* /*x*/, const float* /*y*/, const float* dy, float* dx) {
  if (dx == nullptr) return;
  const std::size_t n = elems(batch, input_dims());
  if (last_training_) {
    backend().dropout_backward(dy, mask_.f32(), dx, n);
  } else if (dx != dy) {
    backend().copy(dx, dy, n * sizeof(float));
  }
}

// ---- Flatten ----

void Flatten::forward(const ForwardContext& ctx, const float* x, float* y) {
  if (x != y) backend().copy(y, x, elems(ctx.batch, input_dims()) * sizeof(float));
}

void Flatten::backward(int batch, const float* /*x*/, const float* /*y*/, const float* dy, float* dx) {
  if (dx != nullptr && dx != dy) backend().copy(dx, dy, elems(batch, input_dims()) * sizeof(float));
}

}  // namespace pstrain::nn
