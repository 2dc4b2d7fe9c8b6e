// The layer interface of the sequential model. A layer is built for a fixed
// per-sample input shape and a maximum batch; it owns its caches (pooling
// argmax, dropout mask) in backend memory, but not its activations: the
// model passes x/y/dy/dx buffers it owns, all in backend memory.
//
// Parameters live in the model's one flat buffer: a layer with parameters
// adds its tensors to the ParamLayout, then bind() gives it the flat
// parameter and gradient buffers to index with those offsets.
// Not thread-safe; one layer belongs to one model.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>

#include "common/math/param_layout.h"
#include "worker/nn/backend.h"

namespace pstrain::nn {

// A per-sample shape [c, h, w]; flat vectors are [features, 1, 1].
struct Dims {
  int c = 0, h = 0, w = 0;
  std::int64_t num_elems() const { return std::int64_t{c} * h * w; }
  bool operator==(const Dims&) const = default;
};
std::string to_string(const Dims& d);

struct ForwardContext {
  int batch = 0;                // samples in this batch (<= max batch)
  bool training = false;        // dropout active only when true
  std::uint64_t seed = 0;       // this layer's dropout seed for this step
};

class Layer {
 public:
  Layer(std::string name, Dims in, Backend& backend, int max_batch)
      : name_(std::move(name)), in_(in), backend_(backend), max_batch_(max_batch) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  Dims input_dims() const { return in_; }
  virtual Dims output_dims() const = 0;
  // True when the output is the input reinterpreted (no computation, no own buffer).
  virtual bool is_view() const { return false; }

  // ---- parameters (layers without any keep these defaults) ----
  virtual void add_params(ParamLayout& /*layout*/) {}
  virtual void bind(float* /*params*/, float* /*grads*/) {}
  // [offset, offset + count) of the flat buffer holding this layer's
  // parameters (weight then bias); count 0 when it has none.
  virtual std::int64_t param_offset() const { return 0; }
  virtual std::int64_t param_count() const { return 0; }
  // Writes initial values into the host copy of the flat buffer.
  virtual void init_params(std::mt19937_64& /*rng*/, std::span<float> /*host_flat*/) const {}

  // x [batch, in], y [batch, out] (per-sample dims as above).
  virtual void forward(const ForwardContext& ctx, const float* x, float* y) = 0;
  // x, y: the last forward's input and output; dy: gradient of y.
  // dx: gradient of x, overwritten; null when not needed. Parameter
  // gradients are overwritten in the bound gradient buffer.
  virtual void backward(int batch, const float* x, const float* y, const float* dy, float* dx) = 0;

  // Floating-point operations of one forward (multiply-add = 2), for reports.
  virtual double forward_flops(int /*batch*/) const { return 0.0; }
  // Of one backward; without dx when need_dx is false.
  virtual double backward_flops(int /*batch*/, bool /*need_dx*/) const { return 0.0; }

 protected:
  Backend& backend() { return backend_; }
  int max_batch() const { return max_batch_; }

 private:
  std::string name_;
  Dims in_;
  Backend& backend_;
  int max_batch_;
};

}  // namespace pstrain::nn
