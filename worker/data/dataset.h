// An in-memory labelled image dataset, ready for training.
//
// Images are float32 NCHW, already normalized (see normalization.h for the
// constants of each dataset; the synthetic set is generated at that scale
// directly). Labels are int32 in [0, num_classes). A Dataset is a plain value:
// after loading it is only read, so any number of threads may call gather()
// on the same Dataset concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "worker/data/normalization.h"

namespace pstrain::data {

struct Dataset {
  std::string name;               // e.g. "fashion-mnist/train"
  std::int64_t num_samples = 0;
  int channels = 0;
  int height = 0;
  int width = 0;
  int num_classes = 0;
  std::vector<ChannelStats> normalization;  // per channel, as applied to the images
  std::vector<float> images;      // [num_samples, channels, height, width]
  std::vector<std::int32_t> labels;  // [num_samples]

  // Floats per sample: channels * height * width.
  std::int64_t sample_num_elems() const;

  // Copies the samples at `indices` (in that order) into caller-owned host
  // buffers: `images` must hold indices.size() * sample_num_elems() floats and
  // `labels` indices.size() ints. Checks every index before copying anything;
  // an index outside [0, num_samples) throws DataError naming the dataset,
  // the index and its position in `indices`.
  void gather(std::span<const std::int64_t> indices, float* images_out,
              std::int32_t* labels_out) const;

  // Checks that the fields agree (sizes, shape > 0, labels in range); throws
  // DataError naming the dataset and the first inconsistency. Loaders call it.
  void validate() const;
};

// A training set and its test set (same shape and classes).
struct DatasetPair {
  Dataset train;
  Dataset test;
};

}  // namespace pstrain::data
