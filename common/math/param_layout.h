// The model's variables as named tensors laid out back to back in one flat
// float buffer. A parameter server shards this buffer by offset; the workers'
// models take named views into it. The layout is plain data and travels in
// the scheduler's rendezvous so servers need no model code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {

struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0;     // in elements, into the flat buffer
  std::int64_t num_elems = 0;  // product of shape

  template <class Archive>
  void serialize(Archive& ar) { ar(name, shape, offset, num_elems); }
};

class ParamLayout {
 public:
  // Appends a tensor after the last one; returns its spec. Throws ConfigError
  // for a duplicate name or a negative dimension
  // (a zero dimension makes an empty tensor, which holds no chunk).
  const TensorSpec& add(std::string name, std::vector<std::int64_t> shape);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  std::int64_t total_elems() const { return total_elems_; }
  std::int64_t total_bytes() const { return total_elems_ * static_cast<std::int64_t>(sizeof(float)); }
  // Throws ConfigError naming the tensor when absent.
  const TensorSpec& find(const std::string& name) const;
  // Checks offsets/sizes are consistent (used on layouts received off the wire).
  void validate() const;

  template <class Archive>
  void serialize(Archive& ar) { ar(tensors_, total_elems_); }

 private:
  std::vector<TensorSpec> tensors_;
  std::int64_t total_elems_ = 0;
};

}  // namespace pstrain
