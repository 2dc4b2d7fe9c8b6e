#include "worker/data/dataset.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "common/base/errors.h"

namespace pstrain::data {

std::int64_t Dataset::sample_num_elems() const {
  return std::int64_t{channels} * height * width;
}

void Dataset::gather(std::span<const std::int64_t> indices, float* images_out,
                     std::int32_t* labels_out) const {
  for (std::size_t pos = 0; pos < indices.size(); ++pos) {
    const std::int64_t index = indices[pos];
    if (index < 0 || index >= num_samples) {
      throw DataError("gather from " + name + ": index " + std::to_string(index) +
                      " (position " + std::to_string(pos) + ") out of range [0, " +
                      std::to_string(num_samples) + ")");
    }
  }
  const std::int64_t sample_elems = sample_num_elems();
  for (std::size_t pos = 0; pos < indices.size(); ++pos) {
    const std::int64_t index = indices[pos];
    const float* src = images.data() + index * sample_elems;
    std::copy(src, src + sample_elems, images_out + static_cast<std::int64_t>(pos) * sample_elems);
    labels_out[pos] = labels[static_cast<std::size_t>(index)];
  }
}

namespace {

[[noreturn]] void invalid(const Dataset& dataset, const std::string& what) {
  throw DataError("dataset " + dataset.name + ": " + what);
}

}  // namespace

void Dataset::validate() const {
  if (num_samples <= 0) invalid(*this, "no samples");
  if (channels <= 0 || height <= 0 || width <= 0) {
    invalid(*this, "bad shape " + std::to_string(channels) + "x" + std::to_string(height) + "x" +
                       std::to_string(width));
  }
  if (num_classes <= 0) invalid(*this, "num_classes " + std::to_string(num_classes) + " <= 0");
  if (normalization.size() != static_cast<std::size_t>(channels)) {
    invalid(*this, std::to_string(normalization.size()) + " normalization entries for " +
                       std::to_string(channels) + " channels");
  }
  const auto expected_images = static_cast<std::size_t>(num_samples * sample_num_elems());
  if (images.size() != expected_images) {
    invalid(*this, "images hold " + std::to_string(images.size()) + " floats, expected " +
                       std::to_string(expected_images));
  }
  if (labels.size() != static_cast<std::size_t>(num_samples)) {
    invalid(*this, "labels hold " + std::to_string(labels.size()) + " entries, expected " +
                       std::to_string(num_samples));
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes) {
      invalid(*this, "sample " + std::to_string(i) + " is mislabelled: label " +
                         std::to_string(labels[i]) + " not in [0, " + std::to_string(num_classes) +
                         ")");
    }
  }
}

}  // namespace pstrain::data
