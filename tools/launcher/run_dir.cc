#include "tools/launcher/run_dir.h"

#include <fstream>
#include <sstream>
#include <system_error>

#include "common/errors.h"

namespace pstrain::launcher {
namespace {

namespace fs = std::filesystem;

void make_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory " + dir.string() + ": " + ec.message());
}

bool has_form(const std::string& name, const std::string& prefix, const std::string& suffix) {
  return name.size() >= prefix.size() + suffix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int remove_file(const fs::path& file) {
  std::error_code ec;
  const bool removed = fs::remove(file, ec);
  if (ec) throw Error("cannot remove " + file.string() + " left by a previous run: " + ec.message());
  return removed ? 1 : 0;
}

// Removes the files in `dir` whose names have one of the (prefix, suffix) forms.
int remove_matching(const fs::path& dir, std::initializer_list<std::pair<const char*, const char*>> forms) {
  int removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    for (const auto& [prefix, suffix] : forms) {
      if (e.is_regular_file() && has_form(name, prefix, suffix)) {
        removed += remove_file(e.path());
        break;
      }
    }
  }
  if (ec) throw Error("cannot list " + dir.string() + ": " + ec.message());
  return removed;
}

}  // namespace

int prepare_run_dir(const fs::path& run_dir) {
  make_dir(run_dir / "logs");
  make_dir(run_dir / "metrics");
  int removed = 0;
  for (const char* name : {"config.toml", "summary.json", "summary.md", "pids.txt", "scheduler.endpoint"}) {
    removed += remove_file(run_dir / name);
  }
  removed += remove_matching(run_dir / "logs", {{"", ".log"}});
  removed += remove_matching(run_dir / "metrics", {{"worker-", ".jsonl"}, {"server-", ".json"}});
  removed += remove_file(run_dir / "trace.json");
  if (std::filesystem::is_directory(run_dir / "trace")) removed += remove_matching(run_dir / "trace", {{"", ".json"}});
  return removed;
}

std::optional<std::string> read_endpoint_file(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const auto nl = s.find('\n');
  if (nl == std::string::npos || nl == 0) return std::nullopt;
  return s.substr(0, nl);
}

}  // namespace pstrain::launcher
