// What a launch checks before anything changes (tools/launcher/port_check.h,
// RunDirLock::busy): a scheduler or server port another process holds, or two
// nodes of the job on one port, is a config error (exit 3, one line naming
// the file, line and key, and what to do) from `launch` and from
// `launch --check`, and the previous run stays where it was; `--check`
// refuses a run directory another launch holds, as a launch would.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/integration/launch_test_util.h"
#include "tools/launcher/run_dir.h"

namespace {

using namespace std::chrono_literals;

const it::fs::path kTinySync = it::kSourceDir / "configs" / "tiny_sync.toml";

// A TCP listener on 127.0.0.1 (port chosen by the kernel), closed with the object.
class HeldPort {
 public:
  HeldPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(listen(fd_, 4) == 0);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
  }
  ~HeldPort() { close(fd_); }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The output's lines that are not empty.
int count_output_lines(const std::string& output) {
  int lines = 0;
  std::size_t start = 0;
  while (start < output.size()) {
    const std::size_t end = output.find('\n', start);
    const std::size_t stop = end == std::string::npos ? output.size() : end;
    lines += stop > start ? 1 : 0;
    start = stop + 1;
  }
  return lines;
}

}  // namespace

TEST_CASE("a scheduler port another process holds: exit 3 naming the key, before the run directory changes") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  it::write_file(run / "summary.json", "{\"a previous run\": true}\n");
  HeldPort held;
  const std::string port = std::to_string(held.port());
  const auto args = with(it::launch_args(kTinySync, run), {"--set", "cluster.scheduler=tcp://127.0.0.1:" + port});

  for (const bool check : {true, false}) {
    CAPTURE(check);
    const it::Result r = it::run_launch(check ? with(args, {"--check"}) : args, dir.path(), 60s);
    INFO(r.output);
    CHECK(r.exit.code == 3);
    CHECK(it::contains(r.output, "config error: --set cluster.scheduler=tcp://127.0.0.1:" + port +
                                     ": key 'cluster.scheduler': the scheduler cannot listen on port " + port +
                                     " of 127.0.0.1 (Address already in use): stop what holds it, choose another "
                                     "port, or 0 for any free port"));
    CHECK(count_output_lines(r.output) == 1);
    // Nothing moved: the previous run is where it was, no .prev-* sibling, no lock file.
    CHECK(it::read_file(run / "summary.json") == "{\"a previous run\": true}\n");
    CHECK_FALSE(it::fs::exists(run / "launch.lock"));
    for (const auto& e : it::fs::directory_iterator(dir.path())) {
      CHECK(e.path().filename().string().find(".prev-") == std::string::npos);
    }
  }
}

TEST_CASE("a server port another process holds, or one shared with the scheduler: exit 3 naming cluster.server_port") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  HeldPort held;
  const std::string port = std::to_string(held.port());
  const it::Result taken =
      it::run_launch(with(it::launch_args(kTinySync, run), {"--set", "cluster.server_port=" + port, "--check"}),
                     dir.path(), 60s);
  INFO(taken.output);
  CHECK(taken.exit.code == 3);
  CHECK(it::contains(taken.output, "key 'cluster.server_port': server 0 cannot listen on port " + port +
                                       " of 127.0.0.1 (Address already in use)"));

  // Overlaps are found before any port is tried, so these need not be free.
  const it::Result shared = it::run_launch(
      with(it::launch_args(kTinySync, run),
           {"--set", "cluster.scheduler=tcp://127.0.0.1:" + std::to_string(held.port() + 1), "--set",
            "cluster.server_port=" + port, "--check"}),
      dir.path(), 60s);
  INFO(shared.output);
  CHECK(shared.exit.code == 3);
  CHECK(it::contains(shared.output, "key 'cluster.server_port': server 1 and the scheduler would both listen on port " +
                                        std::to_string(held.port() + 1)));
  CHECK_FALSE(it::fs::exists(run));
}

TEST_CASE("--check refuses a run directory another launch holds, and passes once it is free") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const auto check = with(it::launch_args(kTinySync, run), {"--check"});
  {
    const pstrain::launcher::RunDirLock lock(run);  // as a running launch holds it
    const it::Result busy = it::run_launch(check, dir.path(), 60s);
    INFO(busy.output);
    CHECK(busy.exit.code == 3);
    CHECK(it::contains(busy.output, "refused: run directory " + run.string() + " is in use by launch pid " +
                                        std::to_string(getpid())));
  }
  const it::Result free = it::run_launch(check, dir.path(), 60s);
  INFO(free.output);
  CHECK(free.exit.code == 0);
  CHECK(it::contains(free.output, "mode = \"sync\""));
}
