// The launcher's exit reports to the scheduler (common/node/exit_report.h):
// the line's format both ways, the errors for a line that is no report, and
// reading a file's appended lines as they come.
#include <doctest/doctest.h>

#include <fstream>

#include "common/node/exit_report.h"
#include "tests/support/temp_dir.h"

using pstrain::ExitReport;
using pstrain::Role;

TEST_CASE("exit report: formatted and parsed back") {
  const ExitReport r{Role::kWorker, 1, 4242, "was killed by signal 9 (Killed)"};
  CHECK(pstrain::format_exit_report(r) == "worker 1 pid 4242: was killed by signal 9 (Killed)");
  std::string error;
  const auto back = pstrain::parse_exit_report(pstrain::format_exit_report(r), error);
  REQUIRE(back.has_value());
  CHECK(back->role == Role::kWorker);
  CHECK(back->rank == 1);
  CHECK(back->pid == 4242);
  CHECK(back->how == "was killed by signal 9 (Killed)");
  const auto server = pstrain::parse_exit_report("server 0 pid 7: exited with code 1", error);
  REQUIRE(server.has_value());
  CHECK(server->role == Role::kServer);
  // A newline in `how` would start another line: written as a space.
  CHECK(pstrain::format_exit_report({Role::kServer, 2, 9, "a\nb"}) == "server 2 pid 9: a b");
}

TEST_CASE("exit report: a line that is no report is refused with the reason") {
  for (const char* line : {"", "scheduler 0 pid 1: x", "worker pid 1: x", "worker 1 pid 0: x", "worker -1 pid 5: x",
                           "worker 1 pid 5 x", "worker 1 pid x: y", "worker 1x pid 5: y"}) {
    CAPTURE(line);
    std::string error;
    CHECK_FALSE(pstrain::parse_exit_report(line, error).has_value());
    CHECK_FALSE(error.empty());
  }
}

TEST_CASE("exit report: the file's complete lines are handed on once, a half-written one when it is complete") {
  pstrain::test::TempDir dir;
  const auto file = dir.path() / "exits.txt";
  pstrain::AppendedLines lines(file, 4096);  // as the scheduler reads the exits file
  CHECK(lines.read().empty());  // no file yet
  std::ofstream(file, std::ios::app) << "worker 1 pid 5: x\nworker 2 pid" << std::flush;
  auto got = lines.read();
  REQUIRE(got.size() == 1);
  CHECK(got[0] == "worker 1 pid 5: x");
  CHECK(lines.read().empty());
  std::ofstream(file, std::ios::app) << " 6: y\n" << std::flush;
  got = lines.read();
  REQUIRE(got.size() == 1);
  CHECK(got[0] == "worker 2 pid 6: y");
  std::ofstream(file, std::ios::app) << std::string(10000, 'z') << "\nworker 3 pid 7: z\n" << std::flush;
  got = lines.read();  // the over-long line is dropped, the next one kept
  REQUIRE(got.size() == 1);
  CHECK(got[0] == "worker 3 pid 7: z");
}
