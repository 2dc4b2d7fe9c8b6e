// Push+pull throughput of the parameter server, beside raw ZeroMQ measured in
// the same run. Every node (scheduler, S servers, W workers, and the two raw
// ZeroMQ peers) is its own forked process with its own ZeroMQ context, as in a
// real job. One round = push a float tensor of SIZE bytes (split into chunks
// over the servers) and pull the updated tensor back; the pull is sent right
// after the push and the servers answer it once the update is applied.
// Sync mode, plain SGD on the servers.
//   GB/s per worker = 2 * SIZE / round time   (GB = 1e9 bytes)
//   raw ZeroMQ      = 2 * SIZE / round time of a DEALER->ROUTER echo of SIZE
//                     bytes each way, zero-copy, no processing
// Correctness is checked outside the timed loop (#wrong column).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/json_line.h"
#include "common/transport.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "worker/client/worker_session.h"

using namespace pstrain;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::vector<double> sizes_mib{1, 4, 16, 64};
  int workers = 1, servers = 1, rounds = 0;
  std::int64_t partition_bytes = 0;  // 0: size / servers (one chunk per server, like ps-lite's one key per server)
  std::string transport = "tcp", json;
};

struct Result {
  double size_mib = 0, round_ms = 0, gbps_per_worker = 0, total_gbps = 0, raw_gbps = 0;
  int wrong = 0;
};

int rounds_for(double size_mib, int requested) {
  if (requested > 0) return requested;
  return std::clamp(static_cast<int>(400.0 / size_mib), 8, 200);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `body` in a child process; returns its pid.
template <class F>
pid_t spawn(F body) {
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 0;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench child: %s\n", e.what());
      code = 1;
    }
    std::fflush(stdout);
    _exit(code);
  }
  return pid;
}

bool wait_all(const std::vector<pid_t>& pids) {
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

// Raw ZeroMQ echo between two processes: median seconds per round trip.
double raw_round_s(std::size_t num_bytes, int rounds, const std::string& transport) {
  const std::string ep = transport == "ipc" ? "ipc:///tmp/pstrain-bench-raw-" + std::to_string(getpid()) : "tcp://127.0.0.1:*";
  int ep_pipe[2];
  if (pipe(ep_pipe) != 0) throw Error("pipe failed");
  const pid_t echo = spawn([&] {
    std::vector<char> reply(num_bytes, 1);  // outlives the context, which flushes zero-copy sends
    zmq::context_t ctx;
    zmq::socket_t router = make_socket(ctx, zmq::socket_type::router);
    const std::string bound = bind_socket(router, ep) + "\n";
    if (write(ep_pipe[1], bound.data(), bound.size()) < 0) return 1;
    for (int r = 0; r < rounds + 2; ++r) {
      zmq::message_t id, body;
      (void)router.recv(id);
      (void)router.recv(body);
      router.send(id, zmq::send_flags::sndmore);
      router.send(zmq::message_t(reply.data(), reply.size(), [](void*, void*) {}, nullptr), zmq::send_flags::none);
    }
    return 0;
  });
  char buf[256] = {};
  const auto n = read(ep_pipe[0], buf, sizeof(buf) - 1);
  std::string bound(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 1) - 1));
  std::vector<char> data(num_bytes, 2);
  zmq::context_t ctx;
  zmq::socket_t dealer = make_socket(ctx, zmq::socket_type::dealer);
  connect_socket(dealer, bound);
  std::vector<double> times;
  for (int r = 0; r < rounds + 2; ++r) {
    const auto t0 = Clock::now();
    dealer.send(zmq::message_t(data.data(), data.size(), [](void*, void*) {}, nullptr), zmq::send_flags::none);
    zmq::message_t back;
    (void)dealer.recv(back);
    if (r >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  wait_all({echo});
  close(ep_pipe[0]);
  close(ep_pipe[1]);
  return median(times);
}

// One parameter-server measurement; returns median round seconds of worker 0 and the wrong count.
std::pair<double, int> ps_round_s(std::size_t num_bytes, int rounds, const Args& a) {
  const auto num_elems = static_cast<std::int64_t>(num_bytes / sizeof(float));
  ParamLayout layout;
  layout.add("tensor", {num_elems});
  ClusterConfig cluster;
  cluster.timeout_ms = 120000;
  const std::int64_t partition = a.partition_bytes > 0 ? a.partition_bytes
                                                       : std::max<std::int64_t>(4, (static_cast<std::int64_t>(num_bytes) + a.servers - 1) / a.servers);
  const std::string fp = job_fingerprint(Mode::kSync, partition, a.servers, a.workers);
  int ep_pipe[2], result_pipe[2];
  if (pipe(ep_pipe) != 0 || pipe(result_pipe) != 0) throw Error("pipe failed");
  std::vector<pid_t> pids;
  pids.push_back(spawn([&] {
    zmq::context_t ctx;
    Logger log("scheduler", LogLevel::kWarn);
    Scheduler s(ctx, SchedulerOptions{a.servers, a.workers, cluster, "tcp://127.0.0.1:*"}, log);
    const std::string ep = s.endpoint() + "\n";
    if (write(ep_pipe[1], ep.data(), ep.size()) < 0) return 1;
    s.run();
    return 0;
  }));
  char buf[256] = {};
  const auto n = read(ep_pipe[0], buf, sizeof(buf) - 1);
  const std::string sched(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 1) - 1));
  for (int s = 0; s < a.servers; ++s) {
    pids.push_back(spawn([&, s] {
      zmq::context_t ctx;
      Logger log("server", LogLevel::kWarn);
      ServerOptions o;
      o.optimizer.momentum = 0.0;
      o.partition_bytes = partition;
      o.cluster = cluster;
      o.scheduler_endpoint = sched;
      o.bind_endpoint = a.transport == "ipc" ? "ipc:///tmp/pstrain-bench-" + std::to_string(getpid()) : "tcp://127.0.0.1:*";
      o.requested_rank = s;
      o.job_fingerprint = fp;
      Server server(ctx, o, log);
      server.run();
      return 0;
    }));
  }
  for (int w = 0; w < a.workers; ++w) {
    pids.push_back(spawn([&, w] {
      zmq::context_t ctx;
      WorkerSession session(ctx, WorkerSessionOptions{sched, cluster, partition, w, fp}, layout);
      std::vector<float> params(static_cast<std::size_t>(num_elems), 0.0f), grads(params.size(), 1.0f);
      session.broadcast_initial(params);
      std::vector<double> times;
      KVClient& kv = session.kv();
      for (int r = 0; r < rounds + 2; ++r) {
        const auto t0 = Clock::now();
        // The pull is sent at once: the servers park it until the update is applied.
        const auto push = kv.push(grads, r, 1.0);
        const auto pull = kv.pull(params, r + 1);
        kv.wait(push);
        kv.wait(pull);
        if (r >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      // Checked outside the timed loop: every element moved by exactly -1 per round.
      int wrong = 0;
      for (float x : params) wrong += x != -static_cast<float>(rounds + 2) ? 1 : 0;
      session.finish();
      if (w == 0) {
        const std::string line = std::to_string(median(times)) + " " + std::to_string(wrong) + "\n";
        if (write(result_pipe[1], line.data(), line.size()) < 0) return 1;
      }
      return 0;
    }));
  }
  char out[128] = {};
  const auto got = read(result_pipe[0], out, sizeof(out) - 1);
  const bool ok = wait_all(pids);
  close(ep_pipe[0]); close(ep_pipe[1]); close(result_pipe[0]); close(result_pipe[1]);
  if (!ok || got <= 0) throw Error("a benchmark process failed");
  double secs = 0;
  int wrong = 0;
  std::sscanf(out, "%lf %d", &secs, &wrong);
  return {secs, wrong};
}

void print_table(const Args& a, const std::vector<Result>& results) {
  std::printf("# push+pull, %d worker(s) x %d server(s), %s, sync, plain SGD; GB = 1e9 bytes\n", a.workers, a.servers,
              a.transport.c_str());
  std::printf("%10s %12s %16s %14s %16s %10s %7s\n", "size(MiB)", "round(ms)", "GB/s/worker", "total(GB/s)",
              "raw zmq(GB/s)", "vs raw", "#wrong");
  for (const Result& r : results) {
    std::printf("%10.1f %12.3f %16.3f %14.3f %16.3f %9.1f%% %7d\n", r.size_mib, r.round_ms, r.gbps_per_worker,
                r.total_gbps, r.raw_gbps, 100.0 * r.gbps_per_worker / r.raw_gbps, r.wrong);
  }
}

void write_json(const Args& a, const std::vector<Result>& results) {
  std::ofstream out(a.json);
  out << "[\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    out << "  " << JsonLine().add("bench", "pushpull").add("workers", a.workers).add("servers", a.servers)
                       .add("transport", a.transport).add("size_mib", r.size_mib).add("round_ms", r.round_ms)
                       .add("gbps_per_worker", r.gbps_per_worker).add("total_gbps", r.total_gbps)
                       .add("raw_zmq_gbps", r.raw_gbps).add("ratio_vs_raw", r.gbps_per_worker / r.raw_gbps)
                       .add("wrong", r.wrong).str()
        << (i + 1 < results.size() ? ",\n" : "\n");
  }
  out << "]\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"push+pull throughput of pstrain's parameter server vs raw ZeroMQ"};
  Args a;
  app.add_option("--sizes", a.sizes_mib, "tensor sizes in MiB");
  app.add_option("--workers", a.workers, "workers")->check(CLI::Range(1, 64));
  app.add_option("--servers", a.servers, "servers")->check(CLI::Range(1, 64));
  app.add_option("--rounds", a.rounds, "timed rounds per size (default: by size)");
  app.add_option("--partition-bytes", a.partition_bytes, "chunk size (default: size / servers)");
  app.add_option("--transport", a.transport, "tcp or ipc")->check(CLI::IsMember({"tcp", "ipc"}));
  app.add_option("--json", a.json, "also write results to this JSON file");
  CLI11_PARSE(app, argc, argv);
  std::vector<Result> results;
  for (double mib : a.sizes_mib) {
    const auto num_bytes = static_cast<std::size_t>(mib * 1048576.0) / 4 * 4;
    const int rounds = rounds_for(mib, a.rounds);
    const double raw = raw_round_s(num_bytes, rounds, a.transport);
    const auto [ps, wrong] = ps_round_s(num_bytes, rounds, a);
    Result r;
    r.size_mib = mib;
    r.round_ms = 1e3 * ps;
    r.gbps_per_worker = 2.0 * static_cast<double>(num_bytes) / ps / 1e9;
    r.total_gbps = r.gbps_per_worker * a.workers;
    r.raw_gbps = 2.0 * static_cast<double>(num_bytes) / raw / 1e9;
    r.wrong = wrong;
    results.push_back(r);
  }
  print_table(a, results);
  if (!a.json.empty()) write_json(a, results);
  return 0;
}
