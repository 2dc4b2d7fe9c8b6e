// The final weights of a run: worker 0 writes run_dir/weights.bin when
// training ends (every mode), so runs can be compared weight by weight,
// and weights.npz, the same tensors by name for NumPy (common/checkpoint/npz.h).
// Format (little-endian, as on every supported machine):
//   bytes 0..3   magic "PSWT"
//   bytes 4..7   u32 format version (1)
//   bytes 8..15  u64 number of parameters N
//   then         N float32, the flat parameter buffer in ParamLayout order
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/math/param_layout.h"

namespace pstrain {

// Path of the weights file in a run directory.
std::string weights_path(const std::string& run_dir);

// Writes `params` to run_dir/weights.bin (through a temporary file renamed
// into place, so readers never see half a file). An empty run_dir writes
// nothing. Throws Error naming the file when it cannot be written.
void write_final_weights(const std::string& run_dir, std::span<const float> params);

// The same, and beside it run_dir/weights.npz: each tensor of `layout` by
// name and shape, for NumPy and the tools that read it (common/checkpoint/npz.h).
void write_final_weights(const std::string& run_dir, const ParamLayout& layout, std::span<const float> params);

// Path of the NumPy export in a run directory.
std::string weights_npz_path(const std::string& run_dir);

// Reads a weights file. Throws DataError naming the file when it is missing,
// has a bad magic or version, or its size does not match N.
std::vector<float> read_weights(const std::string& path);

}  // namespace pstrain
