// The layers with parameters: Conv2d and Linear. Each owns two tensors in
// the flat parameter buffer, "<name>.weight" then "<name>.bias":
//   Conv2d: weight [out_c, in_c, k, k], bias [out_c]; x [n, in_c, h, w] -> y [n, out_c, oh, ow]
//   Linear: weight [out, in], bias [out];  x [n, in] (any [n, c, h, w] read as in = c*h*w) -> y [n, out]
// Not thread-safe.
#pragma once

#include "worker/nn/layer.h"
#include "worker/nn/model_spec.h"

namespace pstrain::nn {

// Common part: the two tensors' offsets and the bound buffers.
class ParamLayer : public Layer {
 public:
  ParamLayer(std::string name, Dims in, WeightInit init, Backend& backend, int max_batch)
      : Layer(std::move(name), in, backend, max_batch), init_(init) {}
  void bind(float* params, float* grads) override;
  std::int64_t param_offset() const override { return weight_.offset; }
  std::int64_t param_count() const override { return weight_.num_elems + bias_.num_elems; }
  void init_params(std::mt19937_64& rng, std::span<float> host_flat) const override;

 protected:
  // Adds "<name>.weight" and "<name>.bias"; fan_in/fan_out feed the initializer.
  void add_tensors(ParamLayout& layout, std::vector<std::int64_t> weight_shape, std::int64_t fan_in,
                   std::int64_t fan_out);
  const float* weight() const { return params_ + weight_.offset; }
  const float* bias() const { return params_ + bias_.offset; }
  float* weight_grad() { return grads_ + weight_.offset; }
  float* bias_grad() { return grads_ + bias_.offset; }

 private:
  TensorSpec weight_, bias_;
  WeightInit init_;
  std::int64_t fan_in_ = 0, fan_out_ = 0;
  float* params_ = nullptr;
  float* grads_ = nullptr;
};

class Conv2d final : public ParamLayer {
 public:
  // Throws ComputeError when the kernel does not fit the (padded) input.
  Conv2d(std::string name, Dims in, int out_channels, int kernel, int stride, int pad, WeightInit init,
         Backend& backend, int max_batch);
  Dims output_dims() const override;
  void add_params(ParamLayout& layout) override;
  void forward(const ForwardContext& ctx, const float* x, float* y) override;
  // relu_y = relu(conv(x) + b) where the backend fuses them (Backend::conv2d_relu_forward);
  // false: nothing written (run forward, then the ReLU).
  bool forward_relu(const ForwardContext& ctx, const float* x, float* relu_y);
  void backward(int batch, const float* x, const float* y, const float* dy, float* dx) override;
  double forward_flops(int batch) const override;
  double backward_flops(int batch, bool need_dx) const override;
  Conv2dShape shape(int batch) const;

 private:
  Conv2dShape shape_;  // with n = 1
};

class Linear final : public ParamLayer {
 public:
  Linear(std::string name, Dims in, int out_features, WeightInit init, Backend& backend, int max_batch);
  Dims output_dims() const override { return {shape_.out, 1, 1}; }
  void add_params(ParamLayout& layout) override;
  void forward(const ForwardContext& ctx, const float* x, float* y) override;
  void backward(int batch, const float* x, const float* y, const float* dy, float* dx) override;
  double forward_flops(int batch) const override;
  double backward_flops(int batch, bool need_dx) const override;
  LinearShape shape(int batch) const;

 private:
  LinearShape shape_;  // with n = 1
};

}  // namespace pstrain::nn
