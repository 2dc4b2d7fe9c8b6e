// Whole-file text output for the run directory.
#pragma once

#include <filesystem>
#include <string>

namespace pstrain::report {

// Writes `text` to FILE.tmp and renames it over FILE, so readers never see
// a partial file. Throws Error naming the file.
void write_text_file_atomic(const std::filesystem::path& file, const std::string& text);

}  // namespace pstrain::report
