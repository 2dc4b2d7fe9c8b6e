// The launcher's parts on their own: line splitting, where a key was set,
// exit descriptions, and the run directory's cleanup.
#include <doctest/doctest.h>

#include <csignal>

#include "tests/integration/launch_test_util.h"
#include "tools/launcher/child_process.h"
#include "tools/launcher/config_site.h"
#include "tools/launcher/line_splitter.h"
#include "tools/launcher/run_dir.h"

using namespace pstrain::launcher;

TEST_CASE("LineSplitter hands on whole lines however the bytes arrive") {
  std::vector<std::string> lines;
  LineSplitter split([&](std::string_view l) { lines.emplace_back(l); }, 8);
  split.feed("ab");
  split.feed("c\nde\r\n\nf");
  CHECK(lines == std::vector<std::string>{"abc", "de", ""});
  split.feed("ghijklmnop");  // "fghijklmnop" is longer than 8: cut
  CHECK(lines.back() == "fghijklm");
  split.feed("q\n");
  CHECK(lines.back() == "nopq");
  split.feed("tail");
  CHECK(lines.size() == 5);
  split.finish();
  CHECK(lines.back() == "tail");
  split.finish();
  CHECK(lines.size() == 6);
}

TEST_CASE("key_site names the line, the --set flag, or the file") {
  it::TempDir dir;
  const auto file = (dir.path() / "c.toml").string();
  it::write_file(file, "mode = \"sync\"\n\n[workload]\n# comment\ndata_path = \"/x\"\n");
  CHECK(key_site(file, {}, "workload.data_path") == file + ":5");
  CHECK(key_site(file, {}, "mode") == file + ":1");
  CHECK(key_site(file, {}, "workload.epochs") == file);  // the default applies
  CHECK(key_site(file, {"workload.data_path=/a", " workload.data_path = /b", "mode=async"}, "workload.data_path") ==
        "--set  workload.data_path = /b");
}

TEST_CASE("exit statuses are described as codes or signals") {
  CHECK(describe(ExitStatus{false, 0}) == "exited with code 0");
  CHECK(describe(ExitStatus{false, 2}) == "exited with code 2");
  CHECK(describe(ExitStatus{true, SIGKILL}) == "was killed by signal 9 (Killed)");
  CHECK(ExitStatus{false, 0}.ok());
  CHECK_FALSE(ExitStatus{true, 0}.ok());
}

TEST_CASE("prepare_run_dir removes a previous run's files and nothing else") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  for (const char* f : {"config.toml", "summary.json", "summary.md", "pids.txt", "logs/worker-0.log",
                        "metrics/worker-0.jsonl", "metrics/server-1.json"}) {
    it::write_file(run / f, "old");
  }
  for (const char* f : {"notes.txt", "metrics/other.csv", "logs/keep.txt"}) it::write_file(run / f, "mine");
  CHECK(prepare_run_dir(run) == 7);
  CHECK_FALSE(it::fs::exists(run / "metrics/worker-0.jsonl"));
  CHECK_FALSE(it::fs::exists(run / "logs/worker-0.log"));
  CHECK(it::fs::exists(run / "notes.txt"));
  CHECK(it::fs::exists(run / "metrics/other.csv"));
  CHECK(it::fs::exists(run / "logs/keep.txt"));
  CHECK(prepare_run_dir(run) == 0);
  CHECK(prepare_run_dir(dir.path() / "fresh/deeper") == 0);
  CHECK(it::fs::is_directory(dir.path() / "fresh/deeper/metrics"));
}

TEST_CASE("read_endpoint_file wants a whole line") {
  it::TempDir dir;
  const auto file = dir.path() / "ep";
  CHECK_FALSE(read_endpoint_file(file).has_value());
  it::write_file(file, "tcp://127.0.0.1:4");
  CHECK_FALSE(read_endpoint_file(file).has_value());
  it::write_file(file, "tcp://127.0.0.1:45\n");
  CHECK(read_endpoint_file(file) == "tcp://127.0.0.1:45");
}
