// A sequential CNN built from a ModelSpec on one backend. Parameters live in
// ONE flat backend buffer described by a ParamLayout ("conv1.weight",
// "conv1.bias", ... in layer order); gradients in a second flat buffer with
// the same layout. Parameters are initialized on the host from a seed
// (bit-identical for the same seed on every backend) and uploaded.
//
// Activations and their gradients are backend buffers sized for max_batch;
// any batch in [1, max_batch] may be used. Dropout masks come from a
// counter-based hash of (dropout seed, step, layer), so runs are
// reproducible; distributed workers should give each rank its own dropout
// seed (set_dropout_seed) while sharing the init seed.
// Not thread-safe; the backend must outlive the model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/math/param_layout.h"
#include "worker/nn/backend.h"
#include "worker/nn/device_buffer.h"
#include "worker/nn/layer.h"
#include "worker/nn/model_spec.h"
#include "worker/nn/softmax_xent.h"

namespace pstrain::nn {

struct StepStats {
  double loss = 0.0;           // mean over the batch
  std::int64_t correct = 0;    // argmax == label
  int batch = 0;
};
struct EvalStats {
  double loss = 0.0;           // mean over the batch
  std::int64_t correct = 0;
  int batch = 0;
};

// (offset, num_elems) of a range of the flat gradient buffer that is final.
using GradsReadyFn = std::function<void(std::int64_t, std::int64_t)>;
// (offset, num_elems) of a layer's parameters in the flat buffer, called just
// before that layer's forward (e.g. to wait for those weights' upload).
using ForwardGateFn = std::function<void(std::int64_t, std::int64_t)>;

class Model {
 public:
  // Throws ConfigError when the spec's layers do not fit its input shape or
  // its last layer does not output `classes` features, or max_batch < 1.
  Model(const ModelSpec& spec, Backend& backend, int max_batch);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelSpec& spec() const { return spec_; }
  const ParamLayout& layout() const { return layout_; }
  int max_batch() const { return max_batch_; }
  std::int64_t num_params() const { return layout_.total_elems(); }
  Backend& backend() { return backend_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

  // Host-side init from the seed (see weight_init.h), uploaded. Also sets the
  // dropout seed to one derived from `seed` and resets the step counter.
  void init_params(std::uint64_t seed);
  void set_dropout_seed(std::uint64_t seed) { dropout_seed_ = seed; }
  // The training-step counter that, with the seed, draws the dropout masks
  // (the model's only random state): saved in checkpoints, set on resume.
  std::uint64_t dropout_step() const { return step_; }
  void set_dropout_step(std::uint64_t step) { step_ = step; }

  // Whole flat buffers; sizes must equal num_params() (ComputeError otherwise).
  void set_params(std::span<const float> host_flat);
  void get_params(std::span<float> host_flat) const;
  void get_grads(std::span<float> host_flat) const;
  // host.size() gradient elements starting at `offset`.
  void get_grads(std::int64_t offset, std::span<float> host) const;
  float* device_params() { return params_.f32(); }
  float* device_grads() { return grads_.f32(); }

  // Forward + backward on one batch: images [batch, C, H, W] and labels
  // [batch] on the host. Gradients (of the mean loss) are overwritten.
  // on_grads_ready, if given, is called in backward order (last layer
  // first) as soon as a layer's parameter gradients are final on the
  // backend (the backend is synchronized first, unless
  // set_sync_before_grads_ready(false): then they are final once the work
  // queued so far has run), so a caller can start sending them while
  // backward continues. before_forward, if given, is called before each
  // layer with parameters runs its forward. Throws ComputeError for a batch
  // outside [1, max_batch] or a label outside [0, classes).
  StepStats train_step(const float* images, const std::int32_t* labels, int batch,
                       const GradsReadyFn& on_grads_ready = {}, const ForwardGateFn& before_forward = {});
  // false: train_step does not synchronize the backend before on_grads_ready
  // (its caller orders its reads after the queued kernels, e.g. by an event).
  void set_sync_before_grads_ready(bool sync) { sync_before_grads_ready_ = sync; }
  // The mean loss of the current train_step, known before backward starts:
  // an on_grads_ready callback may read it (e.g. to skip a non-finite step
  // before sending anything).
  double last_loss() const { return last_loss_; }
  // Forward only, dropout off; no gradients are touched.
  EvalStats evaluate(const float* images, const std::int32_t* labels, int batch);

  // Floating-point operations of one train_step (conv/linear only).
  double train_flops(int batch) const;

 private:
  void build_layers();
  void allocate_activations();
  void upload_batch(const float* images, const std::int32_t* labels, int batch, const char* op);
  void forward(int batch, bool training, const ForwardGateFn& before_forward = {});
  void check_host_size(std::size_t got, const char* op) const;

  ModelSpec spec_;
  Backend& backend_;
  int max_batch_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<SoftmaxCrossEntropy> loss_;
  ParamLayout layout_;
  DeviceBuffer params_, grads_;
  std::vector<DeviceBuffer> owned_;        // activation and gradient buffers
  std::vector<float*> acts_;               // acts_[i]: input of layer i; acts_[L]: logits
  std::vector<float*> dacts_;              // gradients of acts_ (dacts_[0] unused)
  DeviceBuffer labels_;                    // int32 [max_batch]
  std::size_t first_param_layer_ = 0;      // backward stops here
  // fuses_relu_[i]: layer i is a convolution followed by a ReLU, whose forward the backend may
  // run as one call (Backend::conv2d_relu_forward; the conv's own output is then not written:
  // no backward reads it, the ReLU's backward reads only its output).
  std::vector<bool> fuses_relu_;
  std::uint64_t dropout_seed_ = 0;
  std::uint64_t step_ = 0;
  double last_loss_ = 0.0;
  bool sync_before_grads_ready_ = true;
};

}  // namespace pstrain::nn
