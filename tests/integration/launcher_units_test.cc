// The launcher's parts on their own: line splitting, where a key was set,
// exit descriptions, the run directory's lock and previous runs, a log
// that cannot be written, and which node a declared failure fences.
#include <doctest/doctest.h>

#include <csignal>

#include "tests/integration/launch_test_util.h"
#include "tools/launcher/child_process.h"
#include "tools/launcher/config_site.h"
#include "tools/launcher/fencing.h"
#include "tools/launcher/line_splitter.h"
#include "tools/launcher/run_dir.h"
#include "tools/launcher/signal_watch.h"
#include "tools/launcher/supervisor.h"

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

TEST_CASE("a line of failures.jsonl is read as the scheduler writes it; anything else is refused with the reason") {
  std::string error;
  const auto f = parse_declared_failure(
      R"({"role":"server","rank":1,"pid":4242,"host":"vm","silent":true,"last_seen_s":2.5,"time_s":4.5,)"
      R"("policy":"restart","reason":"server 1 (vm, pid 4242) sent no heartbeat for 2004 ms"})",
      error);
  REQUIRE(f.has_value());
  CHECK(f->node == "server 1");
  CHECK(f->pid == 4242);
  CHECK(f->silent);
  CHECK(f->last_seen_s == 2.5);
  CHECK(f->reason == "server 1 (vm, pid 4242) sent no heartbeat for 2004 ms");
  const std::pair<const char*, const char*> bad[] = {
      {"not json", ""},
      {R"({"role":"scheduler","rank":0,"pid":1,"silent":true,"last_seen_s":1,"reason":""})", "role 'scheduler'"},
      {R"({"role":"worker","pid":1,"silent":true,"last_seen_s":1,"reason":""})", "no key 'rank'"},
      {R"({"role":"worker","rank":1.5,"pid":1,"silent":true,"last_seen_s":1,"reason":""})", "rank"},
      {R"({"role":"worker","rank":1,"pid":1,"silent":"yes","last_seen_s":1,"reason":""})", "silent"},
      {R"({"role":"worker","rank":1,"pid":1,"silent":true,"reason":""})", "no key 'last_seen_s'"},
  };
  for (const auto& [line, why] : bad) {
    CAPTURE(line);
    error.clear();
    CHECK_FALSE(parse_declared_failure(line, error).has_value());
    CHECK_FALSE(error.empty());
    CHECK(doctest::String(error.c_str()) == doctest::Contains(why));
  }
}

TEST_CASE("node_to_fence: only a silent node's own process, still running, started before the silence") {
  auto node = [](const std::string& name, pid_t pid, double started_s, bool remote, bool exited) {
    NodeState n;
    n.spec.name = name;
    n.spec.stdin_pipe = remote;
    n.pid = pid;
    n.started_s = started_s;
    if (exited) n.status = ExitStatus{true, SIGKILL};
    return n;
  };
  DeclaredFailure f;
  f.node = "server 1";
  f.pid = 300;
  f.silent = true;
  f.last_seen_s = 10.0;
  // This host: the pid the scheduler heard from.
  std::vector<NodeState> nodes{node("scheduler", 100, 0, false, false), node("server 0", 200, 0, false, false),
                               node("server 1", 300, 0, false, false)};
  CHECK(node_to_fence(nodes, f) == std::optional<std::size_t>(2));
  DeclaredFailure reported = f;
  reported.silent = false;  // it reported its own failure: it exits by itself
  CHECK_FALSE(node_to_fence(nodes, reported).has_value());
  // Replaced already (the old one exited, a new one of another pid runs): not the new one.
  nodes[2].status = ExitStatus{true, SIGKILL};
  nodes.push_back(node("server 1", 301, 11.0, false, false));
  CHECK_FALSE(node_to_fence(nodes, f).has_value());
  // A replacement that got the old pid back, started after the silence began: not it either.
  std::vector<NodeState> same_pid{node("server 1", 300, 0, false, true), node("server 1", 300, 11.0, false, false)};
  CHECK_FALSE(node_to_fence(same_pid, f).has_value());
  // The replacement itself goes silent later: it is the one.
  DeclaredFailure later = f;
  later.pid = 301;
  later.last_seen_s = 20.0;
  CHECK(node_to_fence(nodes, later) == std::optional<std::size_t>(3));
  // Gone already: nothing to kill.
  nodes[3].status = ExitStatus{false, 0};
  CHECK_FALSE(node_to_fence(nodes, later).has_value());
  // No such node.
  DeclaredFailure other = f;
  other.node = "worker 7";
  CHECK_FALSE(node_to_fence(nodes, other).has_value());
  // Over ssh (the remote pid is not ours): the session started before the scheduler last heard from it.
  std::vector<NodeState> remote{node("worker 1", 500, 1.0, true, false)};
  DeclaredFailure w;
  w.node = "worker 1";
  w.pid = 77;  // the program's pid on its host
  w.silent = true;
  w.last_seen_s = 5.0;
  CHECK(node_to_fence(remote, w) == std::optional<std::size_t>(0));
  remote[0].started_s = 6.0;  // a replacement started after the silence began
  CHECK_FALSE(node_to_fence(remote, w).has_value());
}

TEST_CASE("keep_previous_run moves a previous run aside, whole, and keeps the caller's log in place") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  for (const char* f : {"config.toml", "summary.json", "logs/worker-0.log", "metrics/worker-0.jsonl", "notes.txt",
                        "weights.bin"}) {
    it::write_file(run / f, std::string("old ") + f);
  }
  it::write_file(run / "launch.log", "output of this launch");
  const KeptRun kept = keep_previous_run(run);
  CHECK(kept.entries == 6);  // config.toml, summary.json, logs, metrics, notes.txt, weights.bin
  REQUIRE_FALSE(kept.moved_to.empty());
  CHECK(kept.moved_to.parent_path() == dir.path());
  CHECK(kept.moved_to.filename().string().rfind("run.prev-", 0) == 0);
  CHECK(it::read_file(kept.moved_to / "metrics/worker-0.jsonl") == "old metrics/worker-0.jsonl");
  CHECK(it::read_file(kept.moved_to / "summary.json") == "old summary.json");
  CHECK(it::read_file(kept.moved_to / "notes.txt") == "old notes.txt");
  CHECK_FALSE(it::fs::exists(run / "summary.json"));
  CHECK(it::read_file(run / "launch.log") == "output of this launch");
  CHECK(it::fs::is_directory(run / "logs"));
  CHECK(it::fs::is_empty(run / "metrics"));

  // Empty folders from the previous call count as a previous run; the second
  // aside folder in the same second gets its own name.
  const KeptRun again = keep_previous_run(run);
  CHECK(again.entries == 2);
  CHECK(again.moved_to != kept.moved_to);
  CHECK(it::fs::exists(kept.moved_to / "summary.json"));
  CHECK(keep_previous_run(dir.path() / "fresh/deeper").entries == 0);
  CHECK(it::fs::is_directory(dir.path() / "fresh/deeper/metrics"));
}

TEST_CASE("RunDirLock refuses a second owner, frees on release and names a stale owner") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  {
    RunDirLock first(run);
    CHECK_FALSE(first.stale_pid().has_value());
    CHECK(std::stol(it::read_file(RunDirLock::file(run))) == getpid());
    try {
      RunDirLock second(run);  // flock is per open file: a second open in one process conflicts too
      FAIL("a second lock was granted");
    } catch (const RunDirBusy& e) {
      CHECK(e.owner_pid == getpid());
      CHECK(it::contains(e.what(), "is in use by launch pid " + std::to_string(getpid())));
    }
  }
  CHECK(it::read_file(RunDirLock::file(run)).empty());  // released cleanly
  {
    RunDirLock again(run);
    CHECK_FALSE(again.stale_pid().has_value());
  }
  it::write_file(RunDirLock::file(run), "999999999\n");  // a launcher that died holding it
  RunDirLock taken(run);
  CHECK(taken.stale_pid() == 999999999L);
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

TEST_CASE("a node's log that cannot be written (a full disk) ends the wait, naming the file and the reason") {
  it::TempDir dir;
  const it::fs::path logs = dir.path() / "logs";
  it::fs::create_directories(logs);
  // /dev/full: every write fails with ENOSPC, as on a full disk.
  it::fs::create_symlink("/dev/full", logs / "worker-0.log");
  pstrain::launcher::SignalWatch signals;
  std::FILE* echo = std::tmpfile();
  REQUIRE(echo != nullptr);
  SupervisorOptions options;
  options.log_dir = logs;
  options.echo_to = echo;
  pstrain::launcher::Supervisor supervisor(options, signals);
  supervisor.start({"worker 0", "worker-0", {"/bin/sh", "-c", "echo first; sleep 30"}});
  const auto outcome = supervisor.run_until([] { return false; }, std::chrono::steady_clock::now() + std::chrono::seconds(20),
                                            std::chrono::milliseconds(50));
  CHECK(outcome.event == pstrain::launcher::Supervisor::Event::kWriteFailure);
  CHECK(outcome.node == 0);
  CHECK(supervisor.write_failure() == "cannot write " + (logs / "worker-0.log").string() + ": No space left on device");
  // Reported once: the next wait goes on (e.g. while the job is stopped) and ends on its own terms.
  const auto again = supervisor.run_until([] { return true; }, std::nullopt, std::chrono::milliseconds(50));
  CHECK(again.event == pstrain::launcher::Supervisor::Event::kCondition);
  supervisor.stop_all(std::chrono::milliseconds(500));
  std::fclose(echo);
}
