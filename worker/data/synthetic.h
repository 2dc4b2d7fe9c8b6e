// A synthetic, learnable image classification dataset made by our own code,
// for fast tests and benchmarks without files.
//
// Each class has a fixed random prototype per channel, drawn from `seed`: a
// coarse grid (at most 7x7) of N(0, 1) values, bilinearly upsampled to
// height x width and scaled to mean 0, std 1 (smooth blobs a CNN can pick
// up). Sample i has label i % num_classes (classes balanced to within one
// sample) and image
//     (a * shift(prototype[label], dx, dy) + noise) / sqrt(1 + sigma^2)
// with a ~ U(0.6, 1.4), dx, dy uniform in [-2, 2] pixels (zero fill), noise
// i.i.d. N(0, sigma^2), sigma = noise_std (default kSyntheticNoiseStd; the
// task's difficulty: more noise, lower reachable accuracy); so values are already
// at normalized scale (mean ~0, std ~1) and Dataset::normalization is
// {mean 0, std 1} per channel. The noise comes from a stream derived from
// (seed, split): the train and test splits share prototypes, not noise.
// Deterministic: the same arguments give bit-identical data (random numbers
// from std::mt19937_64 through portable_random.h).
#pragma once

#include <cstdint>

#include "worker/data/dataset.h"

namespace pstrain::data {

inline constexpr double kSyntheticNoiseStd = 1.5;

enum class SyntheticSplit { kTrain, kTest };

// Throws ConfigError for num_samples < 1, a dim or num_classes < 1, more
// than 2^28 floats in all, or a noise_std that is negative or not finite.
Dataset make_synthetic(std::int64_t num_samples, std::uint64_t seed, int channels = 1,
                       int height = 28, int width = 28, int num_classes = 10,
                       SyntheticSplit split = SyntheticSplit::kTrain,
                       double noise_std = kSyntheticNoiseStd);

// Train and test splits of the same synthetic task, 1x28x28, 10 classes.
DatasetPair make_synthetic_pair(std::int64_t num_train, std::int64_t num_test, std::uint64_t seed,
                                double noise_std = kSyntheticNoiseStd);

}  // namespace pstrain::data
