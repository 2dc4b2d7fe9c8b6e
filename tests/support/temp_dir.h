// A fresh directory under the system's temp dir for one test, removed with its
// contents when the test is done. The one TempDir of every test area.
#pragma once

#include <stdio.h>
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace pstrain::test {

class TempDir {
 public:
  // `tag` names the directory (/tmp/pstrain-<tag>-XXXXXX) so a leftover one
  // says which test made it.
  explicit TempDir(const std::string& tag = "test") {
    std::string pattern = (std::filesystem::temp_directory_path() / ("pstrain-" + tag + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  // PSTRAIN_KEEP_TEMP=1 keeps it (and says where) for a failure to be read afterwards.
  ~TempDir() {
    const char* keep = getenv("PSTRAIN_KEEP_TEMP");
    if (keep != nullptr && std::string(keep) == "1") {
      fprintf(stderr, "kept %s (PSTRAIN_KEEP_TEMP=1)\n", path_.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` in the directory, as a string.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace pstrain::test
