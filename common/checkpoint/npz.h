// Weights others can read: the model's tensors as a NumPy .npz archive (a
// zip of one .npy file per tensor, stored without compression), so
// `numpy.load("weights.npz")` gives each tensor by its layout name with its
// shape, float32 little-endian. docs/run_directory.md has a loader example.
//
// Format facts this writer relies on (NumPy's NEP 1 and the PKWARE zip
// specification): an .npy file is "\x93NUMPY", version 1.0, a u16 header
// length, and an ASCII dict header padded with spaces to a multiple of 64
// bytes ending in '\n', then the raw data; a zip member is a local header,
// the bytes, and an entry in the central directory at the end. Archives
// over 4 GiB would need zip64 and are refused.
#pragma once

#include <span>
#include <string>

#include "common/math/param_layout.h"

namespace pstrain {

// The bytes of an .npy file holding one float32 tensor of `shape`.
std::string npy_bytes(std::span<const std::int64_t> shape, std::span<const float> values);

// Writes `params` (the flat buffer in `layout` order) to `path` as .npz: one
// member "<tensor name>.npy" per tensor. Written to a temporary file and
// renamed into place. Throws ConfigError if params does not match the
// layout, Error naming the file when it cannot be written or is too large.
void write_npz(const std::string& path, const ParamLayout& layout, std::span<const float> params);

}  // namespace pstrain
