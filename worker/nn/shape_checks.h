// Validation and printing of the backend's shape structs, shared by the
// backends and layers. Each check throws ComputeError naming the operation
// and the offending shape, e.g.
// "conv2d_forward [n=2 c_in=3 h=4 w=4 c_out=8 k=5x5 stride=1 pad=0]: kernel 5x5 larger than padded input 4x4".
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "worker/nn/backend.h"

namespace pstrain::nn {

std::string to_string(const Conv2dShape& s);
std::string to_string(const PoolShape& s);
std::string to_string(const LinearShape& s);

void check_shape(const Conv2dShape& s, std::string_view op);
void check_shape(const PoolShape& s, std::string_view op);
void check_shape(const LinearShape& s, std::string_view op);

}  // namespace pstrain::nn
