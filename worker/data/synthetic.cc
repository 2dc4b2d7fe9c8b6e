#include "worker/data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "worker/data/portable_random.h"

namespace pstrain::data {

namespace {

constexpr int kMaxGridSide = 7;
constexpr int kMaxShift = 2;
constexpr std::int64_t kMaxFloats = std::int64_t{1} << 28;
constexpr std::uint64_t kPrototypeStream = 0x70726f746fULL;  // "proto"

struct Shape {
  int channels, height, width;
};

void check_args(std::int64_t num_samples, const Shape& shape, int num_classes, double noise_std) {
  const std::string args = "make_synthetic(num_samples=" + std::to_string(num_samples) +
                           ", shape=" + std::to_string(shape.channels) + "x" +
                           std::to_string(shape.height) + "x" + std::to_string(shape.width) +
                           ", num_classes=" + std::to_string(num_classes) + ")";
  if (num_samples < 1) throw ConfigError(args + ": num_samples must be >= 1");
  if (shape.channels < 1 || shape.height < 1 || shape.width < 1) {
    throw ConfigError(args + ": every dim must be >= 1");
  }
  if (num_classes < 1) throw ConfigError(args + ": num_classes must be >= 1");
  if (!(noise_std >= 0) || !std::isfinite(noise_std)) {
    throw ConfigError(args + ": noise_std must be a finite number >= 0, got " + std::to_string(noise_std));
  }
  const std::int64_t sample_floats = std::int64_t{shape.channels} * shape.height * shape.width;
  if (sample_floats > kMaxFloats || num_samples > kMaxFloats / sample_floats) {
    throw ConfigError(args + ": more than the limit of " + std::to_string(kMaxFloats) + " floats");
  }
}

// Samples `grid` at fractional coordinates (y, x) by bilinear interpolation.
double bilinear(const std::vector<double>& grid, int side, double y, double x) {
  const int y0 = std::min(static_cast<int>(y), side - 1);
  const int x0 = std::min(static_cast<int>(x), side - 1);
  const int y1 = std::min(y0 + 1, side - 1);
  const int x1 = std::min(x0 + 1, side - 1);
  const double fy = y - y0;
  const double fx = x - x0;
  auto at = [&](int r, int c) { return grid[static_cast<std::size_t>(r * side + c)]; };
  return (1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x1)) +
         fy * ((1 - fx) * at(y1, x0) + fx * at(y1, x1));
}

// One smooth random plane of height x width with mean 0 and std 1.
std::vector<double> make_plane(std::mt19937_64& engine, int height, int width) {
  const int side = std::min({kMaxGridSide, height, width});
  std::vector<double> grid(static_cast<std::size_t>(side * side));
  for (double& value : grid) value = standard_normal(engine);
  std::vector<double> plane(static_cast<std::size_t>(height) * static_cast<std::size_t>(width));
  for (int r = 0; r < height; ++r) {
    for (int c = 0; c < width; ++c) {
      const double y = (r + 0.5) * side / height - 0.5;
      const double x = (c + 0.5) * side / width - 0.5;
      plane[static_cast<std::size_t>(r * width + c)] =
          bilinear(grid, side, std::max(y, 0.0), std::max(x, 0.0));
    }
  }
  double sum = 0, sum_sq = 0;
  for (const double v : plane) sum += v;
  const double mean = sum / static_cast<double>(plane.size());
  for (const double v : plane) sum_sq += (v - mean) * (v - mean);
  const double stddev = std::sqrt(sum_sq / static_cast<double>(plane.size()));
  for (double& v : plane) v = stddev > 0 ? (v - mean) / stddev : 0.0;
  return plane;
}

// prototypes[k * channels + c] is the plane of class k, channel c.
std::vector<std::vector<double>> make_prototypes(std::uint64_t seed, const Shape& shape,
                                                 int num_classes) {
  std::mt19937_64 engine(mix_seed(seed, kPrototypeStream));
  std::vector<std::vector<double>> prototypes;
  for (int p = 0; p < num_classes * shape.channels; ++p) {
    prototypes.push_back(make_plane(engine, shape.height, shape.width));
  }
  return prototypes;
}

// Writes one sample (all channels) of class `label` to `out`.
void make_sample(std::mt19937_64& engine, const std::vector<std::vector<double>>& prototypes,
                 const Shape& shape, int label, double noise_std, float* out) {
  const double amplitude = 0.6 + 0.8 * uniform01(engine);
  const int dy = static_cast<int>(uniform_below(engine, 2 * kMaxShift + 1)) - kMaxShift;
  const int dx = static_cast<int>(uniform_below(engine, 2 * kMaxShift + 1)) - kMaxShift;
  const double scale = 1.0 / std::sqrt(1.0 + noise_std * noise_std);
  for (int c = 0; c < shape.channels; ++c) {
    const auto& proto = prototypes[static_cast<std::size_t>(label * shape.channels + c)];
    for (int r = 0; r < shape.height; ++r) {
      for (int col = 0; col < shape.width; ++col) {
        const int src_r = r - dy;
        const int src_c = col - dx;
        const bool inside = src_r >= 0 && src_r < shape.height && src_c >= 0 && src_c < shape.width;
        const double signal =
            inside ? amplitude * proto[static_cast<std::size_t>(src_r * shape.width + src_c)] : 0.0;
        const double value = (signal + noise_std * standard_normal(engine)) * scale;
        *out++ = static_cast<float>(value);
      }
    }
  }
}

}  // namespace

Dataset make_synthetic(std::int64_t num_samples, std::uint64_t seed, int channels, int height,
                       int width, int num_classes, SyntheticSplit split, double noise_std) {
  const Shape shape{channels, height, width};
  check_args(num_samples, shape, num_classes, noise_std);
  const auto prototypes = make_prototypes(seed, shape, num_classes);
  const bool is_train = split == SyntheticSplit::kTrain;
  std::mt19937_64 engine(mix_seed(seed, is_train ? 1 : 2));
  Dataset dataset;
  dataset.name = is_train ? "synthetic/train" : "synthetic/test";
  dataset.num_samples = num_samples;
  dataset.channels = channels;
  dataset.height = height;
  dataset.width = width;
  dataset.num_classes = num_classes;
  dataset.normalization.assign(static_cast<std::size_t>(channels), ChannelStats{0.0f, 1.0f});
  dataset.images.resize(static_cast<std::size_t>(num_samples * dataset.sample_num_elems()));
  dataset.labels.resize(static_cast<std::size_t>(num_samples));
  for (std::int64_t i = 0; i < num_samples; ++i) {
    const auto label = static_cast<int>(i % num_classes);
    dataset.labels[static_cast<std::size_t>(i)] = label;
    make_sample(engine, prototypes, shape, label, noise_std,
                dataset.images.data() + i * dataset.sample_num_elems());
  }
  dataset.validate();
  return dataset;
}

DatasetPair make_synthetic_pair(std::int64_t num_train, std::int64_t num_test, std::uint64_t seed,
                                double noise_std) {
  return {make_synthetic(num_train, seed, 1, 28, 28, 10, SyntheticSplit::kTrain, noise_std),
          make_synthetic(num_test, seed, 1, 28, 28, 10, SyntheticSplit::kTest, noise_std)};
}

}  // namespace pstrain::data
