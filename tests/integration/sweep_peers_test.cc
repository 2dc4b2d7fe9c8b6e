// The fault sweep, peers that disconnect in the middle of a request (the
// project's standards: "a peer that disconnects mid-request"), against real
// jobs through the launcher:
//   - raw TCP connections to a server and to the scheduler that speak ZeroMQ's
//     handshake, send part of a pstrain message (a header frame flagged "more",
//     then a payload frame cut short; or a greeting cut short) and close: the
//     nodes go on, and a sync job ends with the same weights, bit for bit, as
//     the same job without them;
//   - a worker killed while its push is half sent (a 13 MB push to a stopped
//     server: the kernel holds part of it, the rest dies with the process):
//     under "continue" it is dropped, the server discards the partial message
//     and answers the rest of the job.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <set>

#include "common/wire/protocol.h"
#include "tests/integration/sweep_util.h"

namespace {

using sweep::JsonValue;
using namespace std::chrono_literals;

// "tcp://127.0.0.1:PORT" in `log` after "listening on ": PORT.
int listening_port(const std::string& log) {
  const std::size_t at = log.find("listening on tcp://127.0.0.1:");
  REQUIRE(at != std::string::npos);
  return std::stoi(log.substr(at + 29));
}

class RawPeer {
 public:
  explicit RawPeer(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }
  ~RawPeer() { close_now(); }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  void send_bytes(const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      REQUIRE(n > 0);
      sent += static_cast<std::size_t>(n);
    }
  }

  // Reads until `count` bytes have come (the peer's greeting, its READY), at most `limit`.
  std::string receive(std::size_t count, std::chrono::milliseconds limit = 30s) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (got.size() < count && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[512];
      const ssize_t n = ::recv(fd_, buf, std::min(sizeof(buf), count - got.size()), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    return got;
  }

  // ZMTP 3.0 with the NULL mechanism, as a DEALER: our greeting, the peer's,
  // then READY both ways. True when the peer's READY came.
  bool handshake() {
    std::string greeting(64, '\0');
    greeting[0] = '\xff';
    greeting[9] = '\x7f';
    greeting[10] = 3;  // version 3.0
    std::memcpy(&greeting[12], "NULL", 4);
    send_bytes(greeting);
    if (receive(64).size() != 64) return false;
    const std::string head = receive(2);  // command flags (short), size
    if (head.size() != 2 || head[0] != '\x04') return false;
    const std::string body = receive(static_cast<unsigned char>(head[1]));
    if (body.size() < 6 || body.substr(1, 5) != "READY") return false;
    std::string ready = std::string("\x05READY") + "\x0bSocket-Type" + std::string("\0\0\0\x06", 4) + "DEALER";
    send_bytes(std::string("\x04", 1) + static_cast<char>(ready.size()) + ready);
    return true;
  }

  void close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// A short ZMTP frame: flags, size, body.
std::string frame(const std::string& body, bool more) {
  REQUIRE(body.size() < 256);
  return std::string(1, more ? '\x01' : '\x00') + static_cast<char>(body.size()) + body;
}

// A long frame's head announcing `size` bytes (flags more | long, 8-byte size).
std::string long_frame_head(std::uint64_t size) {
  std::string head(1, '\x02');
  for (int b = 7; b >= 0; --b) head += static_cast<char>((size >> (8 * b)) & 0xff);
  return head;
}

std::string header_bytes(pstrain::MsgType type, std::int64_t key) {
  pstrain::Header h;
  h.type = type;
  h.role = pstrain::Role::kWorker;
  h.sender = 0;
  h.key = key;
  h.request_id = 1;
  const pstrain::Buffer b = pstrain::encode_header(h);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Against the node listening on `port`, one connection per way of stopping mid-request.
void cut_requests(int port, const std::string& node) {
  CAPTURE(node);
  {  // a greeting cut in the middle
    RawPeer p(port);
    p.send_bytes(std::string("\xff\0\0\0\0\0\0\0\0\x7f\x03", 11));
  }
  {  // a header frame flagged "more", then nothing: the payload frame never comes
    RawPeer p(port);
    REQUIRE(p.handshake());
    p.send_bytes(frame(header_bytes(pstrain::MsgType::kPush, 0), true));
  }
  {  // a push whose payload frame announces 64 KiB and brings 1000 bytes
    RawPeer p(port);
    REQUIRE(p.handshake());
    p.send_bytes(frame(header_bytes(pstrain::MsgType::kPush, 0), true) + long_frame_head(65536) +
                 std::string(1000, '\x11'));
  }
  {  // a register header cut in the middle of the frame
    RawPeer p(port);
    REQUIRE(p.handshake());
    const std::string h = header_bytes(pstrain::MsgType::kRegister, 0);
    p.send_bytes(std::string(1, '\x01') + static_cast<char>(h.size()) + h.substr(0, h.size() / 2));
  }
}

std::vector<std::string> sync_job_args(const it::fs::path& run) {
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "workload.epochs=8", "--set", "workload.seed=404", "--set", "output.trace=off",
                           "--set", "cluster.transport=tcp", "--quiet"});
  return args;
}

}  // namespace

TEST_CASE("sweep: raw connections that send part of a request and close leave a sync job's weights bit for bit") {
  it::TempDir dir;
  // The reference: the same job, nobody else connecting.
  const auto quiet = dir.path() / "quiet";
  const it::Result reference = it::run_launch(sync_job_args(quiet), dir.path());
  INFO(reference.output);
  REQUIRE(reference.exit.code == 0);

  const auto run = dir.path() / "cut";
  it::LaunchProcess launch(sync_job_args(run), dir.path() / "cut-output.txt");
  REQUIRE(it::wait_until([&] { return sweep::step_records(sweep::worker_metrics(run, 0)) >= 3; }, 120s,
                         "worker 0's third step record"));
  const int server_port = listening_port(it::read_file(run / "logs/server-0.log"));
  const int scheduler_port = listening_port(it::read_file(run / "logs/scheduler.log"));
  const int steps_before = sweep::step_records(sweep::worker_metrics(run, 0));
  cut_requests(server_port, "server 0");
  cut_requests(scheduler_port, "scheduler");
  const auto exit = launch.wait(180s);
  const std::string output = launch.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 0);
  // The cut requests came while the job ran (it had steps left), and it answered the rest.
  const int steps = sweep::step_records(sweep::worker_metrics(run, 0));
  CHECK(steps_before < steps);
  const JsonValue summary = sweep::read_summary(run);
  CHECK(summary.find("dropped_workers")->items().empty());
  for (const JsonValue& w : summary.find("per_worker")->items()) CHECK(w.find("status")->as_string("status") == "done");
  CHECK(sweep::server_total(run, 2, "pushes_rejected") == 0);
  CHECK(it::read_file(run / "weights.bin") == it::read_file(quiet / "weights.bin"));
  CHECK(summary.find("final_test_accuracy")->as_number("a") ==
        sweep::read_summary(quiet).find("final_test_accuracy")->as_number("a"));
  sweep::check_nothing_left(run);
}

namespace {

// The socket inodes `pid` holds (/proc/PID/fd -> socket:[inode]).
std::set<std::string> socket_inodes(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& e : it::fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const std::string target = it::fs::read_symlink(e.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  return inodes;
}

struct TcpQueues {
  std::int64_t worker_unsent = 0;    // tx_queue of the worker's connection to the server: not yet acknowledged
  std::int64_t server_unread = 0;    // rx_queue of the server's side of it
  std::int64_t server_unsent = 0;    // tx_queue of the server's side: its reply not yet acknowledged
  std::int64_t worker_unread = 0;    // rx_queue of the worker's: what the kernel holds for it
};

// /proc/net/tcp: the worker's connection to `port` (found by its socket inodes) and its peer side.
std::optional<TcpQueues> queues_to(pid_t worker, int port) {
  const std::set<std::string> inodes = socket_inodes(worker);
  std::istringstream in(it::read_file("/proc/net/tcp"));
  std::string line;
  std::getline(in, line);  // the column names
  std::map<unsigned, std::pair<std::int64_t, std::int64_t>> server_side;  // the server's sockets: peer port -> tx, rx
  std::optional<std::pair<unsigned, std::pair<std::int64_t, std::int64_t>>> mine;  // the worker's: local port, tx, rx
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
    f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    const auto local_port = static_cast<unsigned>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16));
    const auto remote_port = static_cast<unsigned>(std::stoul(remote.substr(remote.find(':') + 1), nullptr, 16));
    const std::int64_t tx = std::stoll(queues.substr(0, queues.find(':')), nullptr, 16);
    const std::int64_t rx = std::stoll(queues.substr(queues.find(':') + 1), nullptr, 16);
    if (static_cast<int>(local_port) == port) server_side[remote_port] = {tx, rx};
    if (static_cast<int>(remote_port) == port && inodes.count(inode) == 1 && state == "01") mine = {{local_port, {tx, rx}}};
  }
  if (!mine || server_side.count(mine->first) == 0) return std::nullopt;
  const auto& [server_tx, server_rx] = server_side.at(mine->first);
  return TcpQueues{mine->second.first, server_rx, server_tx, mine->second.second};
}

}  // namespace

// fmnist_cnn (3,274,634 parameters: a 13 MB push, its largest tensor a 12.8 MB
// chunk under ps.partition_bytes 16 MiB) on one server, over tcp: with the server stopped, a worker's push fills the kernel's
// buffers and the rest stays in the worker process. Killed then, the push is
// half sent: the server, woken, reads part of a message and then the end of
// the connection. The job goes on without the worker (continue) and ends well.
TEST_CASE("sweep: a worker killed with a push half sent is dropped; the server answers the rest of the job") {
  constexpr std::int64_t kPushBytes = std::int64_t{3274634} * 4;
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "workload.model=fmnist_cnn", "--set", "workload.simulated_step_ms=20", "--set",
                           "cluster.servers=1", "--set", "cluster.workers=3", "--set", "cluster.transport=tcp", "--set",
                           "ps.partition_bytes=16777216", "--set", "cluster.on_worker_failure=continue", "--set",
                           "cluster.heartbeat_timeout_ms=30000", "--set", "workload.epochs=3", "--set",
                           "workload.seed=405", "--set", "output.trace=off", "--quiet"});
  it::LaunchProcess launch(args, dir.path() / "out.txt");
  const auto metrics = sweep::worker_metrics(run, 1);
  REQUIRE(it::wait_until([&] { return sweep::step_records(metrics) >= 2; }, 120s, "worker 1's second step record"));
  const auto pids = it::read_pids(run);
  const pid_t server = pids.at("server-0");
  const pid_t worker = pids.at("worker-1");
  const int port = listening_port(it::read_file(run / "logs/server-0.log"));
  // Stop the server until worker 1's push is stuck in flight: its socket holds unsent bytes (the
  // server's side is full) and the kernel holds less than the push, so the rest is in the worker.
  // A stop that finds the worker waiting for a pull reply instead is undone, and tried again a step on.
  std::optional<TcpQueues> stuck;
  for (int attempt = 0; attempt < 20 && !stuck; ++attempt) {
    const int steps = sweep::step_records(metrics);
    REQUIRE(kill(server, SIGSTOP) == 0);
    it::wait_until(
        [&] {
          const auto q = queues_to(worker, port);
          if (q && q->worker_unsent > 0 && q->worker_unsent + q->server_unread < kPushBytes) stuck = q;
          return stuck.has_value();
        },
        3s, "worker 1's push to be stuck");
    if (stuck) break;
    REQUIRE(kill(server, SIGCONT) == 0);
    REQUIRE(it::wait_until([&] { return sweep::step_records(metrics) > steps; }, 60s, "worker 1's next step"));
  }
  INFO(launch.output());
  REQUIRE(stuck.has_value());
  it::note("half-sent push: " + std::to_string(stuck->worker_unsent) + " bytes unacknowledged in worker 1's socket, " +
           std::to_string(stuck->server_unread) + " unread in the server's, of a " + std::to_string(kPushBytes) +
           "-byte push");
  REQUIRE(kill(worker, SIGKILL) == 0);
  REQUIRE(it::wait_until([&] { return it::process_gone(worker) || it::read_file(run / "exits.txt").size() > 0; }, 30s,
                         "worker 1's exit"));
  REQUIRE(kill(server, SIGCONT) == 0);

  const auto exit = launch.wait(180s);
  const std::string output = launch.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 0);
  const JsonValue summary = sweep::read_summary(run);
  CHECK(sweep::int_set(*summary.find("dropped_workers")) == std::set<std::int64_t>{1});
  const auto& per_worker = summary.find("per_worker")->items();
  REQUIRE(per_worker.size() == 3);
  CHECK(per_worker[0].find("status")->as_string("s") == "done");
  CHECK(per_worker[1].find("status")->as_string("s") == "dropped");
  CHECK(per_worker[2].find("status")->as_string("s") == "done");
  // The survivors trained every epoch to its end, sharing the training set from the drop on.
  const auto samples = sweep::samples_per_epoch(run, 3);
  REQUIRE(samples.size() == 3);
  CHECK(samples.at(2) == sweep::kTrainSamples);  // 2 survivors: 1024 / 2, no padding
  // The server: one update per chunk and step, the partial push neither applied nor refused.
  const std::int64_t final_steps = per_worker[0].find("steps_done")->as_integer("steps_done");
  CHECK(per_worker[2].find("steps_done")->as_integer("steps_done") == final_steps);
  const std::string server_log = it::read_file(run / "logs/server-0.log");
  const std::size_t holds = server_log.find("; holds ");
  REQUIRE(holds != std::string::npos);
  const std::int64_t chunks = std::stoll(server_log.substr(holds + 8));  // one per tensor: 8
  CHECK(sweep::server_total(run, 1, "updates") == chunks * final_steps);
  // The victim's whole pushes that lay in the kernel ahead of the cut one may reach the woken
  // server after the scheduler's drop: refused as a dropped worker's (seen: 2), one step's at most.
  CHECK(sweep::server_total(run, 1, "pushes_rejected") <= chunks);
  CHECK(summary.find("partial_updates")->as_integer("partial_updates") > 0);
  CHECK_FALSE(it::contains(it::read_file(run / "logs/server-0.log"), "error"));
  sweep::check_nothing_left(run, {worker});
}

namespace {

// Whether the server (listening on `port`) still holds a connection from local port `peer_port`.
bool server_holds_connection(int port, unsigned peer_port) {
  std::istringstream in(it::read_file("/proc/net/tcp"));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string slot, local, remote;
    f >> slot >> local >> remote;
    const auto local_port = std::stoul(local.substr(local.find(':') + 1), nullptr, 16);
    const auto remote_port = std::stoul(remote.substr(remote.find(':') + 1), nullptr, 16);
    if (static_cast<int>(local_port) == port && remote_port == peer_port) return true;
  }
  return false;
}

// The local port of `worker`'s established connection to `port`; 0 if none.
unsigned worker_port_to(pid_t worker, int port) {
  const std::set<std::string> inodes = socket_inodes(worker);
  std::istringstream in(it::read_file("/proc/net/tcp"));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
    f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    const auto remote_port = std::stoul(remote.substr(remote.find(':') + 1), nullptr, 16);
    if (static_cast<int>(remote_port) == port && state == "01" && inodes.count(inode) == 1) {
      return static_cast<unsigned>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return 0;
}

// At least 80 steps per worker: room for the tries of stop_until_reply_stuck (4 epochs of 8 steps
// at 4 workers ran out of steps once).
int pull_epochs(int workers) { return std::max(4, 80 * workers / 32); }
constexpr std::int64_t kPullReplyBytes = std::int64_t{3274634} * 4;  // fmnist_cnn's parameters

// The pull rows' coverage: epochs before the kill's whole; in the kill's epoch (that of the
// victim's last step record, or the next when the pending reply was its epoch's last step's: the
// others may begin the next epoch, with the victim as a member, before its drop), those left
// train their whole shards (the victim's rest stays untrained under "continue":
// docs/architecture.md section 5); every later epoch whole, split over those left (padded:
// members x ceil(1024 / members)).
void check_pull_coverage(const it::fs::path& run, int workers, int victim, bool restart, std::int64_t fault_epoch) {
  const auto samples = sweep::samples_per_epoch(run, workers);
  REQUIRE(static_cast<int>(samples.size()) == pull_epochs(workers));
  const std::int64_t left = restart ? workers : workers - 1;
  for (const auto& [epoch, images] : samples) {
    CAPTURE(epoch);
    CAPTURE(images);
    if (epoch < fault_epoch) CHECK(images == sweep::kTrainSamples);
    if (epoch > fault_epoch + 1) CHECK(images == left * ((sweep::kTrainSamples + left - 1) / left));
    if (epoch != fault_epoch && epoch != fault_epoch + 1) continue;
    std::int64_t others = 0;
    for (int w = 0; w < workers; ++w) {
      if (w == victim) continue;
      for (const JsonValue& line : sweep::json_lines(sweep::worker_metrics(run, w))) {
        if (sweep::type_of(line) == "step" && sweep::integer(line, "epoch") == epoch) others += sweep::integer(line, "batch");
      }
    }
    CHECK(others >= (workers - 1) * (sweep::kTrainSamples / workers));
    // The replacement finished the rank's shard from the step not yet applied; the step killed in
    // its pull was applied, but its record died with the process (one batch short at most).
    if (restart) CHECK(images >= sweep::kTrainSamples - sweep::kBatch);
  }
}

// Stops `worker` until the server's reply to it is stuck (nullopt if that never came); a stop
// that finds no reply in flight (the worker computing or pushing) is undone, and tried again a
// step on.
std::optional<TcpQueues> stop_until_reply_stuck(pid_t worker, int port, const it::fs::path& metrics) {
  std::optional<TcpQueues> stuck;
  for (int attempt = 0; attempt < 40 && !stuck; ++attempt) {
    const int steps = sweep::step_records(metrics);
    // Aimed: a reply arriving (bytes unread in the worker's socket), polled tightly; stopped anyway after 1 s.
    const auto aim_until = std::chrono::steady_clock::now() + 1s;
    while (std::chrono::steady_clock::now() < aim_until) {
      const auto q = queues_to(worker, port);
      if (q && q->worker_unread > 0) break;
    }
    REQUIRE(kill(worker, SIGSTOP) == 0);
    it::wait_until(
        [&] {
          const auto q = queues_to(worker, port);
          // Megabytes held (a push's reply is a header; only a pull's reply is this large), and less than the reply.
          const std::int64_t held = q ? q->server_unsent + q->worker_unread : 0;
          if (q && q->server_unsent > 0 && q->worker_unread > 0 && held > (1 << 20) && held < kPullReplyBytes) {
            stuck = q;
          }
          return stuck.has_value();
        },
        2s, "the server's reply to be stuck");
    if (stuck) break;
    REQUIRE(kill(worker, SIGCONT) == 0);
    REQUIRE(it::wait_until([&] { return sweep::step_records(metrics) > steps; }, 60s, "the victim's next step"));
  }
  return stuck;
}

// The pull rows' summary: the victim dropped (or restarted), every worker's images those of its
// step records, every worker left at the same last step.
void check_pull_summary(const it::fs::path& run, int workers, int victim, bool restart) {
  const JsonValue summary = sweep::read_summary(run);
  CHECK_FALSE(summary.find("partial")->as_bool("partial"));
  CHECK(sweep::int_set(*summary.find("dropped_workers")) ==
        (restart ? std::set<std::int64_t>{} : std::set<std::int64_t>{victim}));
  CHECK(sweep::int_set(*summary.find("restarts"), "rank") ==
        (restart ? std::set<std::int64_t>{victim} : std::set<std::int64_t>{}));
  const auto& per_worker = summary.find("per_worker")->items();
  REQUIRE(static_cast<int>(per_worker.size()) == workers);
  std::set<std::int64_t> last_steps;
  for (int w = 0; w < workers; ++w) {
    CAPTURE(w);
    const JsonValue& pw = per_worker[static_cast<std::size_t>(w)];
    CHECK(pw.find("images")->as_integer("images") == sweep::images_recorded(run, w));
    const std::string status = pw.find("status")->as_string("status");
    if (w == victim) {
      CHECK(status == (restart ? "restarted" : "dropped"));
      if (!restart) continue;
    } else {
      CHECK(status == "done");
    }
    last_steps.insert(pw.find("steps_done")->as_integer("steps_done"));
  }
  CHECK(last_steps.size() == 1);  // every worker left ended at the same step
}

// fmnist_cnn (a 13 MB pull reply, one chunk per tensor under ps.partition_bytes 16 MiB) on one
// server over tcp, simulated compute: the last worker is stopped until the server's reply to its
// pull is stuck in flight (the worker's receive buffer full, the server's send queue holding the
// rest: the kernels hold less than the reply, so the rest is queued in the server process), then
// killed. The server closes the dead connection (its queued reply goes with it), answers the
// others to the end, and the job goes on: under "continue" without the worker, at 1 worker under
// "restart" (there "continue" leaves no worker: the scheduler ends the job) with its replacement.
void kill_with_pull_pending(int workers) {
  const int victim = workers - 1;
  const bool restart = workers == 1;
  CAPTURE(workers);
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "workload.model=fmnist_cnn", "--set", "workload.simulated_step_ms=20", "--set",
                           "cluster.servers=1", "--set", "cluster.workers=" + std::to_string(workers), "--set",
                           "cluster.transport=tcp", "--set", "ps.partition_bytes=16777216", "--set",
                           std::string("cluster.on_worker_failure=") + (restart ? "restart" : "continue"), "--set",
                           "cluster.heartbeat_timeout_ms=30000", "--set", "workload.epochs=" + std::to_string(pull_epochs(workers)), "--set",
                           "workload.seed=" + std::to_string(700 + workers), "--set", "output.trace=off", "--quiet"});
  it::LaunchProcess launch(args, dir.path() / "out.txt");
  const auto metrics = sweep::worker_metrics(run, victim);
  REQUIRE(it::wait_until([&] { return sweep::step_records(metrics) >= 2; }, 120s, "the victim's second step record"));
  const auto pids = it::read_pids(run);
  const pid_t server = pids.at("server-0");
  const pid_t worker = pids.at("worker-" + std::to_string(victim));
  const int port = listening_port(it::read_file(run / "logs/server-0.log"));
  const std::optional<TcpQueues> stuck = stop_until_reply_stuck(worker, port, metrics);
  INFO(launch.output());
  REQUIRE(stuck.has_value());
  it::note("pull reply pending (" + std::to_string(workers) + " workers): " + std::to_string(stuck->server_unsent) +
           " bytes unacknowledged in the server's socket, " + std::to_string(stuck->worker_unread) +
           " unread in worker " + std::to_string(victim) + "'s, of a " + std::to_string(kPullReplyBytes) + "-byte reply");
  std::int64_t fault_epoch = 0;  // the epoch of the victim's latest step record
  for (const JsonValue& line : sweep::json_lines(metrics)) {
    if (sweep::type_of(line) == "step") fault_epoch = sweep::integer(line, "epoch");
  }
  const unsigned victim_port = worker_port_to(worker, port);
  REQUIRE(victim_port != 0);
  REQUIRE(kill(worker, SIGKILL) == 0);
  // The server let the dead connection go (no socket, nor the reply queued on it, kept).
  CHECK(it::wait_until([&] { return !server_holds_connection(port, victim_port); }, 30s,
                       "the server to close the killed worker's connection"));

  const auto exit = launch.wait(180s);
  const std::string output = launch.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK_FALSE(exit->signaled);
  REQUIRE(exit->code == 0);
  check_pull_summary(run, workers, victim, restart);
  check_pull_coverage(run, workers, victim, restart, fault_epoch);
  CHECK(sweep::server_total(run, 1, "pushes_rejected") == 0);
  CHECK(sweep::server_total(run, 1, "duplicate_pushes") == 0);
  const std::string server_log = it::read_file(run / "logs/server-0.log");
  CHECK_FALSE(it::contains(server_log, "error"));
  CHECK(it::fs::exists(run / "weights.bin"));
  sweep::check_nothing_left(run, {worker});
  CHECK(it::process_gone(server));
}

}  // namespace

TEST_CASE("sweep: a worker killed with a pull reply pending, 1 worker (restart): the server survives, the job goes on") {
  kill_with_pull_pending(1);
}

TEST_CASE("sweep: a worker killed with a pull reply pending, 2 workers (continue): the server survives, the job goes on") {
  kill_with_pull_pending(2);
}

TEST_CASE("sweep: a worker killed with a pull reply pending, 4 workers (continue): the server survives, the job goes on") {
  kill_with_pull_pending(4);
}
