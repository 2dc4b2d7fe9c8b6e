// Synthetic dataset: shape, determinism, class balance, shared prototypes
// between splits, and learnability by a nearest-class-mean classifier.
#include "worker/data/synthetic.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/base/errors.h"
#include "tests/data/data_test_util.h"

namespace pstrain::data {
namespace {

using testing::thrown_text;

// Per-class mean image of `dataset`.
std::vector<std::vector<double>> class_means(const Dataset& dataset) {
  const auto elems = static_cast<std::size_t>(dataset.sample_num_elems());
  std::vector<std::vector<double>> means(static_cast<std::size_t>(dataset.num_classes),
                                         std::vector<double>(elems, 0.0));
  std::vector<double> counts(means.size(), 0.0);
  for (std::size_t i = 0; i < static_cast<std::size_t>(dataset.num_samples); ++i) {
    const auto label = static_cast<std::size_t>(dataset.labels[i]);
    for (std::size_t j = 0; j < elems; ++j) means[label][j] += dataset.images[i * elems + j];
    counts[label] += 1;
  }
  for (std::size_t k = 0; k < means.size(); ++k) {
    for (double& v : means[k]) v /= counts[k];
  }
  return means;
}

// Accuracy on `test` of assigning each sample to the nearest class mean of `train`.
double nearest_mean_accuracy(const Dataset& train, const Dataset& test) {
  const auto means = class_means(train);
  const auto elems = static_cast<std::size_t>(test.sample_num_elems());
  int correct = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(test.num_samples); ++i) {
    double best = std::numeric_limits<double>::max();
    std::size_t best_class = 0;
    for (std::size_t k = 0; k < means.size(); ++k) {
      double dist = 0;
      for (std::size_t j = 0; j < elems; ++j) {
        const double d = test.images[i * elems + j] - means[k][j];
        dist += d * d;
      }
      if (dist < best) {
        best = dist;
        best_class = k;
      }
    }
    correct += static_cast<int>(best_class) == test.labels[i] ? 1 : 0;
  }
  return correct / static_cast<double>(test.num_samples);
}

TEST_CASE("synthetic: shape, scale and class balance") {
  const Dataset dataset = make_synthetic(1005, 7, 3, 12, 10, 4);
  CHECK(dataset.name == "synthetic/train");
  CHECK(dataset.num_samples == 1005);
  CHECK(dataset.channels == 3);
  CHECK(dataset.height == 12);
  CHECK(dataset.width == 10);
  CHECK(dataset.num_classes == 4);
  CHECK(dataset.images.size() == 1005u * 3 * 12 * 10);
  std::vector<int> counts(4, 0);
  for (const std::int32_t label : dataset.labels) ++counts[static_cast<std::size_t>(label)];
  CHECK(counts == std::vector<int>{252, 251, 251, 251});
  double sum = 0, sum_sq = 0;
  for (const float v : dataset.images) {
    sum += v;
    sum_sq += double{v} * v;
  }
  const double n = static_cast<double>(dataset.images.size());
  CHECK(std::abs(sum / n) < 0.05);
  CHECK(std::sqrt(sum_sq / n) == doctest::Approx(1.0).epsilon(0.15));
}

TEST_CASE("synthetic: deterministic from the seed; splits and seeds differ") {
  const Dataset a = make_synthetic(64, 11);
  const Dataset b = make_synthetic(64, 11);
  CHECK(a.images == b.images);
  CHECK(a.labels == b.labels);
  CHECK(make_synthetic(64, 12).images != a.images);
  const Dataset test = make_synthetic(64, 11, 1, 28, 28, 10, SyntheticSplit::kTest);
  CHECK(test.name == "synthetic/test");
  CHECK(test.images != a.images);
  const DatasetPair pair = make_synthetic_pair(64, 32, 11);
  CHECK(pair.train.images == a.images);
  CHECK(pair.test.num_samples == 32);
}

TEST_CASE("synthetic: learnable, and the test split shares the train prototypes") {
  const DatasetPair pair = make_synthetic_pair(2000, 500, 3);
  const double accuracy = nearest_mean_accuracy(pair.train, pair.test);
  MESSAGE("nearest-class-mean test accuracy: " << accuracy);
  CHECK(accuracy > 0.5);  // chance is 0.1
  // Prototypes from another seed do not explain this test split.
  const Dataset other = make_synthetic(2000, 4);
  CHECK(nearest_mean_accuracy(other, pair.test) < 0.3);
}

TEST_CASE("synthetic: noise_std sets the difficulty") {
  // Same prototypes and seed; only the noise differs. Less noise: the classes
  // separate better; the default is kSyntheticNoiseStd.
  const DatasetPair clean = make_synthetic_pair(1000, 300, 5, 0.5);
  const DatasetPair usual = make_synthetic_pair(1000, 300, 5);
  const DatasetPair noisy = make_synthetic_pair(1000, 300, 5, 6.0);
  CHECK(usual.train.images == make_synthetic_pair(1000, 300, 5, kSyntheticNoiseStd).train.images);
  const double a_clean = nearest_mean_accuracy(clean.train, clean.test);
  const double a_usual = nearest_mean_accuracy(usual.train, usual.test);
  const double a_noisy = nearest_mean_accuracy(noisy.train, noisy.test);
  MESSAGE("nearest-class-mean accuracy at noise 0.5 / 1.5 / 6: " << a_clean << " / " << a_usual << " / "
                                                                 << a_noisy);
  CHECK(a_clean > a_usual);
  CHECK(a_usual > a_noisy + 0.2);
  CHECK(a_noisy > 0.12);  // still above chance (0.1)
  // Values stay at normalized scale whatever the noise.
  double sum_sq = 0;
  for (const float v : noisy.train.images) sum_sq += double{v} * v;
  CHECK(std::sqrt(sum_sq / static_cast<double>(noisy.train.images.size())) ==
        doctest::Approx(1.0).epsilon(0.1));
}

TEST_CASE("synthetic: argument validation") {
  CHECK_HAS(thrown_text<ConfigError>([] { make_synthetic(5, 1, 1, 28, 28, 10, SyntheticSplit::kTrain, -1.0); }),
            "noise_std must be a finite number >= 0, got -1");
  CHECK_HAS(thrown_text<ConfigError>([] { make_synthetic(0, 1); }),
                 "make_synthetic(num_samples=0, shape=1x28x28, num_classes=10): num_samples must be >= 1");
  CHECK_HAS(thrown_text<ConfigError>([] { make_synthetic(5, 1, 1, 0, 28); }),
                 "every dim must be >= 1");
  CHECK_HAS(thrown_text<ConfigError>([] { make_synthetic(5, 1, 1, 28, 28, 0); }),
                 "num_classes must be >= 1");
  CHECK_HAS(thrown_text<ConfigError>([] { make_synthetic(1 << 20, 1, 3, 256, 256); }),
                 "more than the limit of 268435456 floats");
}

}  // namespace
}  // namespace pstrain::data
