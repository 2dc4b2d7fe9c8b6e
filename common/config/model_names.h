// The names of the models worker/nn/model_spec.cc builds, for checks made
// without the compute code (the launcher checks workload.model before it
// starts anything). model_spec() accepts exactly these (tested).
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace pstrain {

inline constexpr std::array<std::string_view, 2> kModelNames = {"fmnist_cnn", "small_cnn"};

inline bool is_known_model(std::string_view name) {
  for (const std::string_view m : kModelNames) {
    if (m == name) return true;
  }
  return false;
}

// "fmnist_cnn, small_cnn"
inline std::string known_model_list() {
  std::string text;
  for (const std::string_view m : kModelNames) text += (text.empty() ? "" : ", ") + std::string(m);
  return text;
}

}  // namespace pstrain
