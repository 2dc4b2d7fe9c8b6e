// guarded_main's termination watch (common/node/node_cli.h): a node ended by
// SIGTERM or SIGINT (the launcher stopping a run, Ctrl-C) writes its trace
// part first and still dies of that signal; a process it forks gets both
// signals unblocked (it has no signal thread). Each in a forked child, as a
// node program's main.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "common/node/node_cli.h"
#include "common/observe/trace.h"
#include "tests/support/temp_dir.h"

namespace {

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("guarded_main: SIGTERM or SIGINT writes the trace part, then the node dies of that signal") {
  for (const int sig : {SIGTERM, SIGINT}) {
    CAPTURE(sig);
    pstrain::test::TempDir dir;
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(ready[0]);
      std::signal(SIGTERM, SIG_DFL);  // as a freshly started node
      std::signal(SIGINT, SIG_DFL);
      const int code = pstrain::guarded_main("pstrain-test-node", [&] {
        pstrain::TraceRecorder trace(pstrain::TraceLevel::kSteps);
        trace.set_process("worker", 3);
        const pstrain::TraceFileGuard guard(trace, dir.path() / "trace");
        std::thread other([&trace] { pstrain::TraceSpan span(&trace, pstrain::TraceLevel::kSteps, "step", "worker"); });
        other.join();
        { pstrain::TraceSpan span(&trace, pstrain::TraceLevel::kSteps, "pull wait", "worker"); }
        const char byte = 'r';
        if (write(ready[1], &byte, 1) != 1) return 10;
        for (;;) pause();  // until the signal ends the process
        return 11;
      });
      _exit(code);
    }
    close(ready[1]);
    char byte = 0;
    REQUIRE(read(ready[0], &byte, 1) == 1);
    close(ready[0]);
    REQUIRE(kill(child, sig) == 0);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));  // the default action, after the trace
    CHECK(WTERMSIG(status) == sig);
    const std::string text = read_text(dir.path() / "trace" / "worker-3.json");
    CAPTURE(text);
    CHECK(text.rfind("{\"traceEvents\":", 0) == 0);
    CHECK(text.find("\"name\":\"step\"") != std::string::npos);
    CHECK(text.find("\"name\":\"pull wait\"") != std::string::npos);
    CHECK(text.find("\"events\":2") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.path() / "trace" / "worker-3.json.tmp"));
  }
}

TEST_CASE("guarded_main: a process the node forks has SIGTERM and SIGINT unblocked again") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGINT, SIG_DFL);
    const int code = pstrain::guarded_main("pstrain-test-node", [] {
      sigset_t mine;
      pthread_sigmask(SIG_BLOCK, nullptr, &mine);
      if (sigismember(&mine, SIGTERM) != 1) return 20;  // the node's threads leave them to the signal thread
      const pid_t grandchild = fork();
      if (grandchild == 0) {
        sigset_t its;
        pthread_sigmask(SIG_BLOCK, nullptr, &its);
        _exit(sigismember(&its, SIGTERM) == 0 && sigismember(&its, SIGINT) == 0 ? 0 : 21);
      }
      int status = 0;
      if (waitpid(grandchild, &status, 0) != grandchild || !WIFEXITED(status)) return 22;
      return WEXITSTATUS(status);
    });
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
