#include "common/math/parallel_ranges.h"

#include <algorithm>

namespace pstrain {

Range split_range(std::size_t n, std::size_t parts, std::size_t index, std::size_t align) {
  parts = std::max<std::size_t>(parts, 1);
  align = std::max<std::size_t>(align, 1);
  // Equal parts rounded up to the alignment: every boundary a multiple of it.
  const std::size_t per = (n + parts - 1) / parts;
  const std::size_t size = (per + align - 1) / align * align;
  const std::size_t begin = std::min(n, index * size);
  const std::size_t end = index + 1 == parts ? n : std::min(n, begin + size);
  return Range{begin, std::max(begin, end)};
}

namespace update {

GradSource offset(GradSource g, std::size_t at) {
  if (g.f32 != nullptr) g.f32 += at;
  if (g.bf16 != nullptr) g.bf16 += at;
  if (g.partial != nullptr) g.partial += at;
  return g;
}

}  // namespace update
}  // namespace pstrain
