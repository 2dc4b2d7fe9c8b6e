// Dataset::gather and Dataset::validate.
#include "worker/data/dataset.h"

#include <doctest/doctest.h>

#include <vector>

#include "common/base/errors.h"
#include "tests/data/data_test_util.h"

namespace pstrain::data {
namespace {

using testing::thrown_text;

// 4 samples of 1x2x3; image i is filled with 10 * i + j, label 3 - i.
Dataset tiny() {
  Dataset dataset;
  dataset.name = "tiny";
  dataset.num_samples = 4;
  dataset.channels = 1;
  dataset.height = 2;
  dataset.width = 3;
  dataset.num_classes = 4;
  dataset.normalization = {ChannelStats{}};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 6; ++j) dataset.images.push_back(static_cast<float>(10 * i + j));
    dataset.labels.push_back(3 - i);
  }
  return dataset;
}

TEST_CASE("dataset: gather copies samples in the order of the indices") {
  const Dataset dataset = tiny();
  CHECK_NOTHROW(dataset.validate());
  const std::vector<std::int64_t> indices{2, 0, 2};
  std::vector<float> images(3 * 6, -1.0f);
  std::vector<std::int32_t> labels(3, -1);
  dataset.gather(indices, images.data(), labels.data());
  CHECK(labels == std::vector<std::int32_t>{1, 3, 1});
  CHECK(images[0] == 20.0f);
  CHECK(images[5] == 25.0f);
  CHECK(images[6] == 0.0f);
  CHECK(images[17] == 25.0f);
}

TEST_CASE("dataset: gather refuses out-of-range indices before writing") {
  const Dataset dataset = tiny();
  std::vector<float> images(2 * 6, -1.0f);
  std::vector<std::int32_t> labels(2, -1);
  for (const std::int64_t bad : {std::int64_t{4}, std::int64_t{-1}}) {
    const std::vector<std::int64_t> indices{1, bad};
    CHECK_HAS(thrown_text<DataError>([&] { dataset.gather(indices, images.data(), labels.data()); }),
                   "gather from tiny: index " + std::to_string(bad) + " (position 1) out of range [0, 4)");
  }
  CHECK(images[0] == -1.0f);
  CHECK(labels[0] == -1);
}

TEST_CASE("dataset: validate names the first inconsistency") {
  auto error = [](const Dataset& dataset) {
    return thrown_text<DataError>([&] { dataset.validate(); });
  };
  Dataset empty = tiny();
  empty.num_samples = 0;
  CHECK_HAS(error(empty), "dataset tiny: no samples");
  Dataset bad_shape = tiny();
  bad_shape.width = 0;
  CHECK_HAS(error(bad_shape), "dataset tiny: bad shape 1x2x0");
  Dataset no_classes = tiny();
  no_classes.num_classes = 0;
  CHECK_HAS(error(no_classes), "num_classes 0 <= 0");
  Dataset bad_norm = tiny();
  bad_norm.normalization.clear();
  CHECK_HAS(error(bad_norm), "0 normalization entries for 1 channels");
  Dataset short_images = tiny();
  short_images.images.pop_back();
  CHECK_HAS(error(short_images), "images hold 23 floats, expected 24");
  Dataset short_labels = tiny();
  short_labels.labels.pop_back();
  CHECK_HAS(error(short_labels), "labels hold 3 entries, expected 4");
  Dataset bad_label = tiny();
  bad_label.labels[2] = 4;
  CHECK_HAS(error(bad_label), "sample 2 is mislabelled: label 4 not in [0, 4)");
}

}  // namespace
}  // namespace pstrain::data
