#include "worker/nn/model.h"

#include <random>
#include <string>

#include "common/base/errors.h"
#include "worker/nn/param_layers.h"
#include "worker/nn/simple_layers.h"

namespace pstrain::nn {
namespace {

// SplitMix64 of a combination: decorrelated seeds for (seed, step, layer).
std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::unique_ptr<Layer> make_layer(const LayerSpec& s, Dims in, Backend& backend, int max_batch) {
  switch (s.kind) {
    case LayerKind::kConv2d:
      return std::make_unique<Conv2d>(s.name, in, s.out, s.kernel, s.stride, s.pad, s.init, backend, max_batch);
    case LayerKind::kLinear: return std::make_unique<Linear>(s.name, in, s.out, s.init, backend, max_batch);
    case LayerKind::kReLU: return std::make_unique<ReLU>(in, backend, max_batch);
    case LayerKind::kMaxPool2d: return std::make_unique<MaxPool2d>(in, s.kernel, s.stride, backend, max_batch);
    case LayerKind::kDropout: return std::make_unique<Dropout>(in, s.drop_p, backend, max_batch);
    case LayerKind::kFlatten: return std::make_unique<Flatten>(in, backend, max_batch);
  }
  throw ConfigError("layer '" + s.name + "': unknown kind");
}

}  // namespace

Model::Model(const ModelSpec& spec, Backend& backend, int max_batch)
    : spec_(spec), backend_(backend), max_batch_(max_batch) {
  if (max_batch < 1) {
    throw ConfigError("model '" + spec.name + "': max batch " + std::to_string(max_batch) + ", expected >= 1");
  }
  build_layers();
  params_ = DeviceBuffer(backend_, static_cast<std::size_t>(layout_.total_bytes()));
  grads_ = DeviceBuffer(backend_, static_cast<std::size_t>(layout_.total_bytes()));
  backend_.fill(params_.f32(), 0.0f, static_cast<std::size_t>(layout_.total_elems()));
  backend_.fill(grads_.f32(), 0.0f, static_cast<std::size_t>(layout_.total_elems()));
  for (auto& layer : layers_) layer->bind(params_.f32(), grads_.f32());
  allocate_activations();
  labels_ = DeviceBuffer(backend_, static_cast<std::size_t>(max_batch) * sizeof(std::int32_t));
  loss_ = std::make_unique<SoftmaxCrossEntropy>(spec_.classes, backend_);
}

Model::~Model() = default;

void Model::build_layers() {
  if (spec_.layers.empty()) throw ConfigError("model '" + spec_.name + "': has no layers");
  Dims dims{spec_.channels, spec_.height, spec_.width};
  first_param_layer_ = spec_.layers.size();
  for (std::size_t i = 0; i < spec_.layers.size(); ++i) {
    const LayerSpec& s = spec_.layers[i];
    try {
      layers_.push_back(make_layer(s, dims, backend_, max_batch_));
    } catch (const ComputeError& e) {
      throw ConfigError("model '" + spec_.name + "': layer " + std::to_string(i) + " (" +
                        std::string(to_string(s.kind)) + ") on input " + to_string(dims) + ": " + e.what());
    }
    layers_.back()->add_params(layout_);
    if (layers_.back()->param_count() > 0 && first_param_layer_ == spec_.layers.size()) first_param_layer_ = i;
    dims = layers_.back()->output_dims();
  }
  fuses_relu_.assign(layers_.size(), false);
  for (std::size_t i = 0; i + 1 < layers_.size(); ++i) {
    fuses_relu_[i] = dynamic_cast<const Conv2d*>(layers_[i].get()) != nullptr &&
                     dynamic_cast<const ReLU*>(layers_[i + 1].get()) != nullptr;
  }
  if (dims != Dims{spec_.classes, 1, 1}) {
    throw ConfigError("model '" + spec_.name + "': last layer outputs " + to_string(dims) + ", expected " +
                      std::to_string(spec_.classes) + "x1x1 (one logit per class)");
  }
}

void Model::allocate_activations() {
  const std::size_t num_layers = layers_.size();
  auto own = [&](Dims d) {
    owned_.emplace_back(backend_, static_cast<std::size_t>(max_batch_ * d.num_elems()) * sizeof(float));
    return owned_.back().f32();
  };
  acts_.assign(num_layers + 1, nullptr);
  dacts_.assign(num_layers + 1, nullptr);
  acts_[0] = own(Dims{spec_.channels, spec_.height, spec_.width});
  for (std::size_t i = 0; i < num_layers; ++i) {
    acts_[i + 1] = layers_[i]->is_view() ? acts_[i] : own(layers_[i]->output_dims());
  }
  dacts_[num_layers] = own(layers_.back()->output_dims());
  for (std::size_t i = num_layers - 1; i >= 1; --i) {
    dacts_[i] = layers_[i]->is_view() ? dacts_[i + 1] : own(layers_[i]->input_dims());
  }
}

void Model::init_params(std::uint64_t seed) {
  std::vector<float> host(static_cast<std::size_t>(layout_.total_elems()));
  std::mt19937_64 rng(seed);
  for (const auto& layer : layers_) layer->init_params(rng, host);
  params_.upload<float>(host);
  dropout_seed_ = mix_seed(seed, 0xD50F);
  step_ = 0;
}

void Model::check_host_size(std::size_t got, const char* op) const {
  if (got != static_cast<std::size_t>(layout_.total_elems())) {
    throw ComputeError(std::string(op) + ": host buffer has " + std::to_string(got) + " floats, the layout has " +
                       std::to_string(layout_.total_elems()));
  }
}

void Model::set_params(std::span<const float> host_flat) {
  check_host_size(host_flat.size(), "set_params");
  params_.upload(host_flat);
}

void Model::get_params(std::span<float> host_flat) const {
  check_host_size(host_flat.size(), "get_params");
  params_.download(host_flat);
}

void Model::get_grads(std::span<float> host_flat) const {
  check_host_size(host_flat.size(), "get_grads");
  grads_.download(host_flat);
}

void Model::get_grads(std::int64_t offset, std::span<float> host) const {
  if (offset < 0 || offset + static_cast<std::int64_t>(host.size()) > layout_.total_elems()) {
    throw ComputeError("get_grads: range [" + std::to_string(offset) + ", " +
                       std::to_string(offset + static_cast<std::int64_t>(host.size())) + ") outside the " +
                       std::to_string(layout_.total_elems()) + " parameters");
  }
  grads_.download(host, static_cast<std::size_t>(offset));
}

void Model::upload_batch(const float* images, const std::int32_t* labels, int batch, const char* op) {
  if (batch < 1 || batch > max_batch_) {
    throw ComputeError(std::string(op) + ": batch " + std::to_string(batch) + " outside [1, " +
                       std::to_string(max_batch_) + "]");
  }
  for (int i = 0; i < batch; ++i) {
    if (labels[i] < 0 || labels[i] >= spec_.classes) {
      throw ComputeError(std::string(op) + ": label of sample " + std::to_string(i) + " is " +
                         std::to_string(labels[i]) + ", expected 0.." + std::to_string(spec_.classes - 1));
    }
  }
  const std::size_t image_elems =
      static_cast<std::size_t>(batch) * static_cast<std::size_t>(spec_.channels * spec_.height * spec_.width);
  backend_.copy_from_host(acts_[0], images, image_elems * sizeof(float));
  backend_.copy_from_host(labels_.as<std::int32_t>(), labels, static_cast<std::size_t>(batch) * sizeof(std::int32_t));
}

void Model::forward(int batch, bool training, const ForwardGateFn& before_forward) {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (before_forward && layers_[i]->param_count() > 0) before_forward(layers_[i]->param_offset(), layers_[i]->param_count());
    const ForwardContext ctx{batch, training, mix_seed(mix_seed(dropout_seed_, step_), i)};
    if (fuses_relu_[i] && static_cast<Conv2d&>(*layers_[i]).forward_relu(ctx, acts_[i], acts_[i + 2])) {
      ++i;  // the ReLU (layer i + 1) is done too
      continue;
    }
    layers_[i]->forward(ctx, acts_[i], acts_[i + 1]);
  }
}

StepStats Model::train_step(const float* images, const std::int32_t* labels, int batch,
                            const GradsReadyFn& on_grads_ready, const ForwardGateFn& before_forward) {
  upload_batch(images, labels, batch, "train_step");
  forward(batch, true, before_forward);
  const std::size_t num_layers = layers_.size();
  const LossResult loss = loss_->forward_backward(batch, acts_[num_layers], labels_.as<std::int32_t>(),
                                                  dacts_[num_layers]);
  last_loss_ = loss.loss_sum / batch;
  for (std::size_t i = num_layers; i-- > first_param_layer_;) {
    float* dx = i > first_param_layer_ ? dacts_[i] : nullptr;
    layers_[i]->backward(batch, acts_[i], acts_[i + 1], dacts_[i + 1], dx);
    if (on_grads_ready && layers_[i]->param_count() > 0) {
      if (sync_before_grads_ready_) backend_.synchronize();
      on_grads_ready(layers_[i]->param_offset(), layers_[i]->param_count());
    }
  }
  ++step_;
  return {last_loss_, loss.correct, batch};
}

EvalStats Model::evaluate(const float* images, const std::int32_t* labels, int batch) {
  upload_batch(images, labels, batch, "evaluate");
  forward(batch, false);
  const std::size_t num_layers = layers_.size();
  const LossResult loss = loss_->forward_backward(batch, acts_[num_layers], labels_.as<std::int32_t>(),
                                                  dacts_[num_layers]);
  return {loss.loss_sum / batch, loss.correct, batch};
}

double Model::train_flops(int batch) const {
  double flops = 0.0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    flops += layers_[i]->forward_flops(batch);
    if (i >= first_param_layer_) flops += layers_[i]->backward_flops(batch, i > first_param_layer_);
  }
  return flops;
}

}  // namespace pstrain::nn
