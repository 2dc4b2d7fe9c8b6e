#include "worker/nn/layer.h"

namespace pstrain::nn {

std::string to_string(const Dims& d) {
  return std::to_string(d.c) + "x" + std::to_string(d.h) + "x" + std::to_string(d.w);
}

}  // namespace pstrain::nn
