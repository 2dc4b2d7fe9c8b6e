// Issue 27's memory budget at the scheduler, against a real job (the
// launcher, real processes, loopback tcp): connections that are not the
// job's send rejoin registrations whose refusals (each echoing the 200 KiB
// host name the request claimed) they never read. Before the scheduler had a
// budget, every refusal stayed queued in it (up to 4,000 per connection);
// now a stranger holds at most 256 KiB and all strangers 16 MiB, its receive
// queues at most kSchedulerReceiveHwm messages per connection, and the job
// goes on (docs/architecture.md, "Memory budget and floods").
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/transport/zmq/zmq_socket.h"
#include "common/wire/wire_archive.h"
#include "tests/integration/launch_test_util.h"

namespace {

using namespace std::chrono_literals;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

// Steps per second between step records `from` and `to` (indices).
double rate(const std::vector<double>& times, std::size_t from, std::size_t to) {
  if (to >= times.size() || to <= from || times[to] <= times[from]) return 0;
  return static_cast<double>(to - from) / (times[to] - times[from]);
}

// A rejoin registration from a peer without the job's secret, claiming a host name of `host_bytes`.
std::string rejoin_body(std::size_t host_bytes) {
  pstrain::RegisterRequest req;
  req.role = pstrain::Role::kWorker;
  req.requested_rank = 1;
  req.host = std::string(host_bytes, 'h');
  return pstrain::wire_encode(req);
}

}  // namespace

TEST_CASE("strangers that flood the scheduler with requests and never read the refusals keep it within its budget") {
  it::TempDir dir;
  const it::fs::path run = dir.path() / "flood";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  for (const char* s : {"workload.simulated_step_ms=5", "workload.epochs=120"}) args.insert(args.end(), {"--set", s});
  args.push_back("--quiet");
  it::LaunchProcess launch(args, dir.path() / "flood-output.txt");
  const it::fs::path log = run / "logs" / "scheduler.log";
  REQUIRE(it::wait_until([&] { return it::contains(it::read_file(log), "listening on "); }, 60s, "the scheduler to listen"));
  const std::string text = it::read_file(log);
  const std::size_t at = text.find("listening on ") + 13;
  const std::string endpoint = text.substr(at, text.find(' ', at) - at);
  REQUIRE(it::wait_until([&] { return it::read_pids(run).count("scheduler") == 1; }, 30s, "the scheduler's pid"));
  const pid_t scheduler = it::read_pids(run).at("scheduler");
  // A rejoin is refused as such only once the job runs (before, "nothing to rejoin", a short text).
  REQUIRE(it::wait_until([&] { return it::worker0_step_times(run).size() >= 20; }, 120s, "the job's first steps"));
  const std::int64_t before = it::rss_of(scheduler);
  REQUIRE(before > 0);

  zmq::context_t ctx;
  constexpr int kConnections = 4;
  constexpr int kRequests = 800;  // each: 200 KiB in, a refusal of 200 KiB out (640 MiB in all)
  std::vector<zmq::socket_t> strangers;
  for (int c = 0; c < kConnections; ++c) {
    pstrain::SocketOptions so;
    so.receive_hwm = 1;  // never read: the refusals stay on the scheduler's side
    so.send_hwm = 8;
    so.send_timeout = 30000ms;  // the scheduler takes them at its pace (its receive queue is bounded)
    strangers.push_back(pstrain::make_socket(ctx, zmq::socket_type::dealer, so));
    strangers.back().set(zmq::sockopt::rcvbuf, 4096);
    pstrain::connect_socket(strangers.back(), endpoint);
  }
  const std::string body = rejoin_body(200 * 1024);
  pstrain::Header h;
  h.type = pstrain::MsgType::kRegister;
  h.role = pstrain::Role::kWorker;
  h.sender = -1;
  h.aux = pstrain::kRegisterRejoin;
  const std::size_t steps_before = it::worker0_step_times(run).size();
  std::int64_t sent = 0;
  std::int64_t peak = before;
  for (int r = 0; r < kRequests && !it::process_gone(scheduler); ++r) {
    for (zmq::socket_t& s : strangers) {
      ++h.request_id;
      try {
        pstrain::send_message(s, nullptr, h, pstrain::Payload::bytes(body));
        ++sent;
      } catch (const pstrain::TransportError&) {
      }
    }
    if (r % 16 == 0) peak = std::max(peak, it::rss_of(scheduler));
  }
  const std::size_t steps_flooded = it::worker0_step_times(run).size();
  // What the connections and the kernel still hold reaches the scheduler while the job goes on.
  while (it::worker0_step_times(run).size() < steps_flooded + 100 && !it::process_gone(scheduler)) {
    peak = std::max(peak, it::rss_of(scheduler));
  }
  const std::vector<double> times = it::worker0_step_times(run);
  it::note("scheduler flood: " + std::to_string(sent) + " rejoins of 200 KiB from " + std::to_string(kConnections) +
           " connections; scheduler RSS " + std::to_string(before / kMiB) + " MiB -> peak " +
           std::to_string(peak / kMiB) + " MiB; worker 0 " + std::to_string(rate(times, steps_before / 2, steps_before)) +
           " steps/s before, " + std::to_string(rate(times, steps_before, steps_flooded)) + " during the flood");
  CHECK(sent >= kConnections * kRequests / 2);
  // Without the budget the refusals alone held about 600 MiB; now the strangers' pool
  // (16 MiB) and receive queues (64 x 200 KiB per connection), with room for the job's own growth.
  CHECK(peak - before < 128 * kMiB);

  strangers.clear();
  const auto exit = launch.wait(300s);
  REQUIRE(exit.has_value());
  INFO(launch.output());
  CHECK_FALSE(exit->signaled);
  CHECK(exit->code == 0);
  CHECK(it::contains(it::read_file(log), "memory budget for unsent replies"));
}
