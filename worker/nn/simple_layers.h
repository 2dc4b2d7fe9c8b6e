// The parameter-free layers:
//   ReLU:      y = max(x, 0), any shape
//   MaxPool2d: x [n, c, h, w] -> y [n, c, oh, ow], window k, stride s, no
//              padding; keeps the argmax indices [n, c, oh, ow] for backward
//   Dropout:   inverted dropout with drop probability p while training (mask
//              [n, ...] kept for backward), identity in evaluation
//   Flatten:   [n, c, h, w] -> [n, c*h*w], a view (same memory)
// Not thread-safe.
#pragma once

#include <cstdint>

#include "worker/nn/device_buffer.h"
#include "worker/nn/layer.h"

namespace pstrain::nn {

class ReLU final : public Layer {
 public:
  ReLU(Dims in, Backend& backend, int max_batch) : Layer("relu", in, backend, max_batch) {}
  Dims output_dims() const override { return input_dims(); }
  void forward(const ForwardContext& ctx, const float* x, float* y) override;
  void backward(int batch, const float* x, const float* y, const float* dy, float* dx) override;
};

class MaxPool2d final : public Layer {
 public:
  // Throws ComputeError when the window does not fit the input.
  MaxPool2d(Dims in, int kernel, int stride, Backend& backend, int max_batch);
  Dims output_dims() const override;
  void forward(const ForwardContext& ctx, const float* x, float* y) override;
  void backward(int batch, const float* x, const float* y, const float* dy, float* dx) override;
  PoolShape shape(int batch) const;

 private:
  PoolShape shape_;        // with n = 1
  DeviceBuffer argmax_;    // int32 [max_batch, c, oh, ow]
};

class Dropout final : public Layer {
 public:
  // Throws ComputeError unless 0 <= drop_p < 1.
  Dropout(Dims in, float drop_p, Backend& backend, int max_batch);
  Dims output_dims() const override { return input_dims(); }
  void forward(const ForwardContext& ctx, const float* x, float* y) override;
  // After an evaluation-mode forward the layer was the identity: dx = dy.
  void backward(int batch, const float* x, const float* y, const float* dy, float* dx) override;
  float drop_p() const { return drop_p_; }

 private:
  float drop_p_;
  bool last_training_ = false;
  DeviceBuffer mask_;      // float [max_batch, in]
};

class Flatten final : public Layer {
 public:
  Flatten(Dims in, Backend& backend, int max_batch) : Layer("flatten", in, backend, max_batch) {}
  Dims output_dims() const override { return {static_cast<int>(input_dims().num_elems()), 1, 1}; }
  bool is_view() const override { return true; }
  // Copies only when given distinct buffers (the model passes the same one).
  void forward(const ForwardContext& ctx, const float* x, float* y) override;
  void backward(int batch, const float* x, const float* y, const float* dy, float* dx) override;
};

}  // namespace pstrain::nn
