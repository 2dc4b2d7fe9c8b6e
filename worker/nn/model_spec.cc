#include "worker/nn/model_spec.h"

#include "common/base/errors.h"
#include "common/config/model_names.h"

namespace pstrain::nn {

std::string_view to_string(LayerKind kind) {
  switch (kind) {
    case LayerKind::kConv2d: return "conv2d";
    case LayerKind::kReLU: return "relu";
    case LayerKind::kMaxPool2d: return "maxpool2d";
    case LayerKind::kFlatten: return "flatten";
    case LayerKind::kLinear: return "linear";
    case LayerKind::kDropout: return "dropout";
  }
  return "unknown";
}

LayerSpec conv2d(std::string name, int out_channels, int kernel, int stride, int pad, WeightInit init) {
  LayerSpec s;
  s.kind = LayerKind::kConv2d;
  s.name = std::move(name);
  s.out = out_channels;
  s.kernel = kernel;
  s.stride = stride;
  s.pad = pad;
  s.init = init;
  return s;
}

LayerSpec relu() { return LayerSpec{LayerKind::kReLU, "relu", 0, 0, 1, 0, 0.0f, WeightInit::kHe}; }

LayerSpec maxpool2d(int kernel, int stride) {
  return LayerSpec{LayerKind::kMaxPool2d, "maxpool", 0, kernel, stride, 0, 0.0f, WeightInit::kHe};
}

LayerSpec flatten() { return LayerSpec{LayerKind::kFlatten, "flatten", 0, 0, 1, 0, 0.0f, WeightInit::kHe}; }

LayerSpec linear(std::string name, int out_features, WeightInit init) {
  return LayerSpec{LayerKind::kLinear, std::move(name), out_features, 0, 1, 0, 0.0f, init};
}

LayerSpec dropout(float drop_p) {
  return LayerSpec{LayerKind::kDropout, "dropout", 0, 0, 1, 0, drop_p, WeightInit::kHe};
}

std::vector<std::string> known_models() { return {kModelNames.begin(), kModelNames.end()}; }

ModelSpec model_spec(std::string_view name, int channels, int height, int width, int classes) {
  if (channels <= 0 || height <= 0 || width <= 0 || classes <= 0) {
    throw ConfigError("model '" + std::string(name) + "': input " + std::to_string(channels) + "x" +
                      std::to_string(height) + "x" + std::to_string(width) + " with " + std::to_string(classes) +
                      " classes: every dimension must be positive");
  }
  ModelSpec spec{std::string(name), channels, height, width, classes, {}};
  if (name == "fmnist_cnn") {
    spec.layers = {conv2d("conv1", 32, 5, 1, 2, WeightInit::kHe), relu(), maxpool2d(2, 2),
                   conv2d("conv2", 64, 5, 1, 2, WeightInit::kHe), relu(), maxpool2d(2, 2),
                   flatten(), linear("fc1", 1024, WeightInit::kHe), relu(), dropout(0.4f),
                   linear("fc2", classes, WeightInit::kGlorot)};
  } else if (name == "small_cnn") {
    spec.layers = {conv2d("conv1", 8, 3, 1, 1, WeightInit::kHe), relu(), maxpool2d(2, 2),
                   conv2d("conv2", 16, 3, 1, 1, WeightInit::kHe), relu(), maxpool2d(2, 2),
                   flatten(), linear("fc1", classes, WeightInit::kGlorot)};
  } else {
    throw ConfigError("model '" + std::string(name) + "': unknown, known models: " + known_model_list());
  }
  return spec;
}

}  // namespace pstrain::nn
