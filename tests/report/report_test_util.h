// Helpers of the report tests: a temporary directory and file writing.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace report_test {

// A fresh directory under the system's temp dir, removed with its contents.
using pstrain::test::TempDir;  // tests/support/temp_dir.h

inline void write_file(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

inline std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// One "step" record with every documented field.
inline std::string step_line(int step, double time_s, double loss) {
  return "{\"type\":\"step\",\"time_s\":" + std::to_string(time_s) + ",\"step\":" + std::to_string(step) +
         ",\"epoch\":0,\"batch\":32,\"loss\":" + std::to_string(loss) +
         ",\"accuracy\":0.5,\"images_per_s\":100,\"compute_ms\":3,\"pull_ms\":1,\"push_ms\":2,\"lr\":0.05,"
         "\"staleness\":0,\"simulated\":false}\n";
}

inline std::string eval_line(int step, double time_s, double accuracy) {
  return "{\"type\":\"eval\",\"time_s\":" + std::to_string(time_s) + ",\"step\":" + std::to_string(step) +
         ",\"epoch\":0,\"test_loss\":0.7,\"test_accuracy\":" + std::to_string(accuracy) + "}\n";
}

inline std::string end_line(double time_s, int steps, int images) {
  return "{\"type\":\"end\",\"time_s\":" + std::to_string(time_s) + ",\"steps\":" + std::to_string(steps) +
         ",\"images\":" + std::to_string(images) + ",\"compute_s\":1.5,\"pull_s\":0.25,\"push_s\":0.5}\n";
}

}  // namespace report_test
