// Model architectures as plain data: a sequence of layer descriptions plus
// the input shape and class count. `model_spec` returns the named built-in
// models; Model (model.h) builds layers from a spec.
// Pure data and functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pstrain::nn {

enum class LayerKind { kConv2d, kReLU, kMaxPool2d, kFlatten, kLinear, kDropout };
std::string_view to_string(LayerKind kind);

// Weight initialization (biases start at zero):
//   kHe:     uniform(-a, a), a = sqrt(6 / fan_in)            (feeds a ReLU)
//   kGlorot: uniform(-a, a), a = sqrt(6 / (fan_in + fan_out)) (feeds the loss)
enum class WeightInit { kHe, kGlorot };

struct LayerSpec {
  LayerKind kind = LayerKind::kReLU;
  std::string name;             // parameter prefix, e.g. "conv1" -> "conv1.weight", "conv1.bias"
  int out = 0;                  // conv: output channels; linear: output features
  int kernel = 0;               // conv: square kernel size; pool: window size
  int stride = 1;               // conv and pool
  int pad = 0;                  // conv: zero padding on every side
  float drop_p = 0.0f;          // dropout: drop probability in [0, 1)
  WeightInit init = WeightInit::kHe;
};

struct ModelSpec {
  std::string name;
  int channels = 0, height = 0, width = 0;  // one input sample [channels, height, width]
  int classes = 0;                          // the last layer's output features
  std::vector<LayerSpec> layers;
};

// Builders for spec entries.
LayerSpec conv2d(std::string name, int out_channels, int kernel, int stride, int pad, WeightInit init);
LayerSpec relu();
LayerSpec maxpool2d(int kernel, int stride);
LayerSpec flatten();
LayerSpec linear(std::string name, int out_features, WeightInit init);
LayerSpec dropout(float drop_p);

// The built-in models for an input of [channels, height, width] and
// `classes` classes:
//   "fmnist_cnn": conv 5x5x32 pad 2 + ReLU, maxpool 2, conv 5x5x64 pad 2 +
//                 ReLU, maxpool 2, dense 1024 + ReLU, dropout 0.4, dense classes
//                 (3,274,634 parameters on 28x28x1 with 10 classes)
//   "small_cnn":  conv 3x3x8 pad 1 + ReLU, maxpool 2, conv 3x3x16 pad 1 +
//                 ReLU, maxpool 2, dense classes (9,098 parameters on 28x28x1)
// Throws ConfigError for an unknown name (listing the known ones) or a
// non-positive dimension.
ModelSpec model_spec(std::string_view name, int channels, int height, int width, int classes);
std::vector<std::string> known_models();

}  // namespace pstrain::nn
