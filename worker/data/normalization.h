// Per-channel normalization of 8-bit pixels: x = (pixel / 255 - mean) / std.
//
// The constants are the per-channel mean and standard deviation of the
// training set's pixels scaled to [0, 1] (over all pixels of all images), so
// that a normalized training set has mean ~0 and std ~1 per channel:
//   Fashion-MNIST: mean 0.2860, std 0.3530 (60000 training images)
//   MNIST:         mean 0.1307, std 0.3081 (60000 training images)
//   CIFAR-10:      mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616)
//                  for channels R, G, B (50000 training images)
// The test set of each dataset is normalized with its training set's constants.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace pstrain::data {

struct ChannelStats {
  float mean = 0.0f;    // of pixel / 255
  float stddev = 1.0f;  // of pixel / 255; > 0
};

inline std::vector<ChannelStats> fashion_mnist_stats() { return {{0.2860f, 0.3530f}}; }

inline std::vector<ChannelStats> mnist_stats() { return {{0.1307f, 0.3081f}}; }

inline std::vector<ChannelStats> cifar10_stats() {
  return {{0.4914f, 0.2470f}, {0.4822f, 0.2435f}, {0.4465f, 0.2616f}};
}

// The normalized value of every possible pixel byte: table[p] = (p/255 - mean) / std.
inline std::array<float, 256> pixel_table(ChannelStats stats) {
  std::array<float, 256> table{};
  for (int p = 0; p < 256; ++p) {
    table[static_cast<std::size_t>(p)] = (static_cast<float>(p) / 255.0f - stats.mean) / stats.stddev;
  }
  return table;
}

}  // namespace pstrain::data
