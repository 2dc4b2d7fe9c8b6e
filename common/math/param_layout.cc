#include "common/math/param_layout.h"

#include "common/base/errors.h"

namespace pstrain {

const TensorSpec& ParamLayout::add(std::string name, std::vector<std::int64_t> shape) {
  for (const auto& t : tensors_) {
    if (t.name == name) throw ConfigError("param layout: duplicate tensor name '" + name + "'");
  }
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw ConfigError("param layout: tensor '" + name + "' has dimension " + std::to_string(d));
    n *= d;
  }
  tensors_.push_back(TensorSpec{std::move(name), std::move(shape), total_elems_, n});
  total_elems_ += n;
  return tensors_.back();
}

const TensorSpec& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return t;
  }
  throw ConfigError("param layout: no tensor named '" + name + "'");
}

void ParamLayout::validate() const {
  std::int64_t offset = 0;
  for (const auto& t : tensors_) {
    std::int64_t n = 1;
    for (auto d : t.shape) {
      if (d < 0 || (d > 0 && n > (std::int64_t{1} << 40) / d)) {
        throw ProtocolError("param layout: tensor '" + t.name + "' has an invalid shape");
      }
      n *= d;
    }
    if (t.offset != offset || t.num_elems != n) {
      throw ProtocolError("param layout: tensor '" + t.name + "' has offset " + std::to_string(t.offset) +
                          " and " + std::to_string(t.num_elems) + " elements, expected offset " +
                          std::to_string(offset) + " and " + std::to_string(n));
    }
    offset += n;
  }
  if (offset != total_elems_) {
    throw ProtocolError("param layout: total " + std::to_string(total_elems_) + " elements, tensors sum to " +
                        std::to_string(offset));
  }
}

}  // namespace pstrain
