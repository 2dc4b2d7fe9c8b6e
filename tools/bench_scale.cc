// How the coordination of a parameter-server job grows with its workers:
// 8 to 1,024 simulated workers against 4 to 64 servers, all in this process
// (tools/bench/scale_run.h: the real scheduler, servers, consistency policies,
// worker sessions and KV clients over ZeroMQ inproc://; only the compute is
// simulated). Per step, for each mode:
//   step ms        wall time of a step (every worker's push + pull, barrier)
//   barrier ms     the last worker's arrival sent -> the last worker released (median, max);
//                  1st out: -> the first worker released (the scheduler's part, without the fan-out)
//   round ms       the same for barriers taken back to back after the steps (--barrier-rounds),
//                  nothing else running: a barrier alone (median; 1st out)
//   round us/W     per barrier of those, per worker: the scheduler thread's CPU without heartbeats
//                  (the project's part: arrivals, the release's sends) and the workers' threads'
//                  CPU (woken by the release, sending the next arrival: the machine's part here);
//                  round x: the scheduler's figure against 64 workers (at most 1 = linear); user x:
//                  the same for its user-space part (the kernel's user/system split of that CPU:
//                  the project's code and libzmq's, without the kernel's wake-ups of the workers)
//   get ms         a worker's epoch-members get from the scheduler's store (median)
//   push/pull ms   a worker's push of all its chunks -> acks; its pull -> replies (median)
//   sched ms       the scheduler thread's CPU per step; hb ms: the part of it that is
//                  heartbeats and liveness (their rate when idle x the step's time)
//   coord x        (sched - hb) per step per worker at W / the same at 64 workers:
//                  at most 1 = grows at most linearly in the workers
//   hb us/node/s   the scheduler's heartbeat and liveness CPU per node per second;
//                  hb x: the same ratio against 64 workers
//   srv us/req     server threads' CPU per request answered (a push or a pull of a chunk)
//   KB/step, msg/step   bytes (sent + received, counted by the transport) and
//                  messages (requests and replies counted, heartbeats from the interval)
//                  of the scheduler, one server, one worker
//   RSS MB, KB/node     the process's resident memory with the cluster running, and
//                  its growth over the cluster's nodes
//   floor          with --floor-rounds N: the same fan-out in plain libzmq threads, no project code
//                  (tools/bench/fanout_floor.h): a release's latency and CPU per worker, the machine's part
// Sizes whose ZeroMQ sockets do not fit the descriptor limit (ulimit -n) are skipped, saying so.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/base/errors.h"
#include "common/base/json_line.h"
#include "tools/bench/fanout_floor.h"
#include "tools/bench/scale_run.h"

using namespace pstrain;
using bench::ScaleOptions;
using bench::ScaleResult;

namespace {

struct Args {
  std::vector<int> workers{8, 64, 256, 1024};
  std::vector<int> servers{4};
  std::vector<std::string> modes{"sync", "async", "ssp"};
  ScaleOptions base;
  std::string json;
  int floor_rounds = 0;  // --floor-rounds: the machine's floor per worker count (tools/bench/fanout_floor.h)
};

Mode mode_of(const std::string& name) {
  if (name == "sync") return Mode::kSync;
  if (name == "async") return Mode::kAsync;
  return Mode::kSsp;
}

// The figures derived from a result and the same mode and servers at 64 workers (if measured).
struct Derived {
  double hb_s = 0;           // heartbeats and liveness per step
  double coord_s = 0;        // the scheduler's per-step work without them
  double hb_node_s = 0;      // heartbeat CPU per node per second
  double coord_x = 0, hb_x = 0;  // growth per worker against 64 workers (0: no reference)
  double round_x = 0;            // the scheduler's CPU per barrier per worker against 64 workers
  double round_user_x = 0;       // the same for its user-space part (the project's code and libzmq's)
};

Derived derive(const ScaleResult& r, const ScaleResult* ref) {
  Derived d;
  const auto nodes = [](const ScaleResult& x) { return x.options.workers + x.options.servers + 1.0; };
  d.hb_s = r.scheduler_idle_cpu_s * r.step_s;
  d.coord_s = std::max(0.0, r.scheduler_cpu_s - d.hb_s);
  d.hb_node_s = r.scheduler_idle_cpu_s / nodes(r);
  if (ref != nullptr && ref != &r) {
    const Derived base = derive(*ref, nullptr);
    const double w = r.options.workers, w0 = ref->options.workers;
    if (base.coord_s > 0) d.coord_x = (d.coord_s / w) / (base.coord_s / w0);
    if (base.hb_node_s > 0) d.hb_x = d.hb_node_s / base.hb_node_s;
    if (ref->round_scheduler_cpu_s > 0) d.round_x = (r.round_scheduler_cpu_s / w) / (ref->round_scheduler_cpu_s / w0);
    const double user0 = ref->round_scheduler_cpu_s * ref->round_scheduler_user_share;
    if (user0 > 0) d.round_user_x = (r.round_scheduler_cpu_s * r.round_scheduler_user_share / w) / (user0 / w0);
  }
  return d;
}

const ScaleResult* reference(const std::vector<ScaleResult>& rows, const ScaleResult& r) {
  for (const ScaleResult& x : rows) {
    if (x.options.mode == r.options.mode && x.options.servers == r.options.servers && x.options.workers == 64) return &x;
  }
  return nullptr;
}

// Column titles, their units and widths (the rows below print the same widths).
struct Column {
  const char* title;
  const char* unit;
  int width;
};
constexpr Column kColumns[] = {
    {"mode", "", 5},        {"W", "", 5},           {"S", "", 3},          {"step", "ms", 8},
    {"barrier", "p50 ms", 8}, {"barrier", "max ms", 8}, {"1st out", "p50 ms", 8}, {"round", "p50 ms", 7},
    {"round", "1st ms", 7}, {"round", "sched us/W", 10}, {"round x", "vs 64", 7}, {"user x", "vs 64", 6},
    {"round", "wkr us/W", 8},
    {"get", "p50 ms", 7},
    {"push", "p50 ms", 7},
    {"pull", "p50 ms", 7},  {"sched", "cpu ms", 8}, {"hb", "cpu ms", 7},   {"coord x", "vs 64", 7},
    {"hb", "us/node/s", 9}, {"hb x", "vs 64", 6},   {"server", "us/req", 7}, {"sched", "KB", 8},
    {"server", "KB", 7},    {"worker", "KB", 7},    {"sched", "msgs", 7},  {"server", "msgs", 7},
    {"worker", "msgs", 7},  {"RSS", "MB", 7},       {"mem", "KB/node", 8}, {"wrong", "", 5},
};

void print_table(const std::vector<ScaleResult>& rows) {
  for (const bool units : {false, true}) {
    for (const Column& c : kColumns) std::printf("%*s ", c.width, units ? c.unit : c.title);
    std::printf("\n");
  }
  for (const ScaleResult& r : rows) {
    const Derived d = derive(r, reference(rows, r));
    const auto ratio = [](double x) { return x > 0 ? std::to_string(x).substr(0, 5) : std::string("-"); };
    const double w = r.options.workers;
    std::printf("%5s %5d %3d %8.2f %8.3f %8.3f %8.3f %7.3f %7.3f %10.2f %7s %6s %8.2f %7.3f %7.3f %7.3f %8.3f %7.3f %7s %9.2f "
                "%6s %7.1f %8.1f %7.1f %7.2f %7.0f %7.0f %7.1f %7.0f %8.1f %5d\n",
                std::string(to_string(r.options.mode)).c_str(), r.options.workers, r.options.servers, 1e3 * r.step_s,
                1e3 * r.barrier_p50_s, 1e3 * r.barrier_max_s, 1e3 * r.barrier_first_p50_s, 1e3 * r.round_p50_s,
                1e3 * r.round_first_p50_s, 1e6 * r.round_scheduler_cpu_s / w, ratio(d.round_x).c_str(),
                ratio(d.round_user_x).c_str(), 1e6 * r.round_worker_cpu_s, 1e3 * r.store_get_p50_s, 1e3 * r.push_p50_s,
                1e3 * r.pull_p50_s, 1e3 * r.scheduler_cpu_s, 1e3 * d.hb_s, ratio(d.coord_x).c_str(), 1e6 * d.hb_node_s,
                ratio(d.hb_x).c_str(), 1e6 * r.server_cpu_per_request_s, r.scheduler_bytes / 1024,
                r.server_bytes / 1024, r.worker_bytes / 1024, r.scheduler_messages, r.server_messages,
                r.worker_messages, static_cast<double>(r.rss_bytes) / 1048576.0, r.rss_per_node_bytes / 1024, r.wrong);
  }
}

std::string json_row(const ScaleResult& r, const Derived& d) {
  const ScaleOptions& o = r.options;
  return JsonLine()
      .add("bench", "scale").add("mode", to_string(o.mode)).add("workers", o.workers).add("servers", o.servers)
      .add("steps", o.steps).add("barrier_every", o.barrier_every).add("epoch_steps", o.epoch_steps)
      .add("elems_per_server", o.elems_per_server).add("compute_us", o.compute_us).add("heartbeat_ms", o.heartbeat_ms)
      .add("batch_workers", o.batch_workers).add("batch_worker_threads", r.batch_worker_threads)
      .add("step_ms", 1e3 * r.step_s).add("barriers", r.barriers).add("barrier_p50_ms", 1e3 * r.barrier_p50_s)
      .add("barrier_max_ms", 1e3 * r.barrier_max_s).add("barrier_first_out_p50_ms", 1e3 * r.barrier_first_p50_s)
      .add("barrier_rounds", o.barrier_rounds).add("round_p50_ms", 1e3 * r.round_p50_s).add("round_max_ms", 1e3 * r.round_max_s)
      .add("round_first_out_p50_ms", 1e3 * r.round_first_p50_s)
      .add("round_scheduler_cpu_us_per_worker", 1e6 * r.round_scheduler_cpu_s / o.workers)
      .add("round_scheduler_growth_vs_64", d.round_x)
      .add("round_scheduler_user_share", r.round_scheduler_user_share)
      .add("round_scheduler_user_us_per_worker", 1e6 * r.round_scheduler_cpu_s * r.round_scheduler_user_share / o.workers)
      .add("round_scheduler_user_growth_vs_64", d.round_user_x)
      .add("round_worker_cpu_us_per_worker", 1e6 * r.round_worker_cpu_s)
      .add("store_get_p50_ms", 1e3 * r.store_get_p50_s)
      .add("push_p50_ms", 1e3 * r.push_p50_s).add("pull_p50_ms", 1e3 * r.pull_p50_s)
      .add("scheduler_cpu_ms_per_step", 1e3 * r.scheduler_cpu_s).add("heartbeat_cpu_ms_per_step", 1e3 * d.hb_s)
      .add("coordination_cpu_ms_per_step", 1e3 * d.coord_s).add("coordination_growth_vs_64", d.coord_x)
      .add("heartbeat_us_per_node_s", 1e6 * d.hb_node_s).add("heartbeat_growth_vs_64", d.hb_x)
      .add("server_cpu_us_per_request", 1e6 * r.server_cpu_per_request_s)
      .add("worker_cpu_ms_per_step", 1e3 * r.worker_cpu_s).add("zmq_io_cpu_ms_per_step", 1e3 * r.zmq_io_cpu_s)
      .add("scheduler_bytes_per_step", r.scheduler_bytes).add("server_bytes_per_step", r.server_bytes)
      .add("worker_bytes_per_step", r.worker_bytes).add("scheduler_messages_per_step", r.scheduler_messages)
      .add("server_messages_per_step", r.server_messages).add("worker_messages_per_step", r.worker_messages)
      .add("rss_bytes", r.rss_bytes).add("rss_per_node_bytes", r.rss_per_node_bytes).add("wrong", r.wrong)
      .str();
}

std::string json_row(const bench::FanoutFloor& f) {
  return JsonLine()
      .add("bench", "fanout_floor").add("workers", f.workers).add("rounds", f.rounds).add("batch_workers", f.batch_workers)
      .add("release_p50_ms", 1e3 * f.release_p50_s)
      .add("releaser_cpu_us_per_worker", 1e6 * f.releaser_cpu_s).add("worker_cpu_us_per_worker", 1e6 * f.worker_cpu_s)
      .str();
}

void write_json(const std::string& path, const std::vector<ScaleResult>& rows, const std::vector<bench::FanoutFloor>& floors) {
  std::ofstream out(path);
  out << "[\n";
  std::vector<std::string> lines;
  for (const ScaleResult& r : rows) lines.push_back(json_row(r, derive(r, reference(rows, r))));
  for (const bench::FanoutFloor& f : floors) lines.push_back(json_row(f));
  for (std::size_t i = 0; i < lines.size(); ++i) out << "  " << lines[i] << (i + 1 < lines.size() ? ",\n" : "\n");
  out << "]\n";
  if (!out) throw Error("bench_scale: cannot write " + path);
}

// The floor under a barrier at each worker count: the same fan-out in plain libzmq (fanout_floor.h).
// A size whose sockets (one descriptor each) do not fit `files` is skipped, saying so.
std::vector<bench::FanoutFloor> measure_floors(const Args& a, const rlimit& files) {
  std::vector<bench::FanoutFloor> floors;
  std::printf("# floor: plain libzmq threads, no project code; a release's first send -> the last thread woken (p50), "
              "CPU per round per worker\n");
  for (const int workers : a.workers) {
    if (static_cast<rlim_t>(workers) + 64 > files.rlim_cur) {
      std::printf("# floor skipped at %d workers: ulimit -n is %llu\n", workers,
                  static_cast<unsigned long long>(files.rlim_cur));
      continue;
    }
    floors.push_back(bench::measure_fanout_floor(workers, a.floor_rounds, a.base.batch_workers));
    const bench::FanoutFloor& f = floors.back();
    std::printf("# floor %5d workers: release %7.3f ms, releaser %6.2f us/W, workers %6.2f us/W (%d rounds)\n",
                f.workers, 1e3 * f.release_p50_s, 1e6 * f.releaser_cpu_s, 1e6 * f.worker_cpu_s, f.rounds);
  }
  return floors;
}

void add_options(CLI::App& app, Args& a) {
  app.add_option("--workers", a.workers, "worker counts (8,64 or 8 64)")->delimiter(',')->check(CLI::Range(1, 4096));
  app.add_option("--servers", a.servers, "server counts")->delimiter(',')->check(CLI::Range(1, 64));
  app.add_option("--modes", a.modes, "sync, async, ssp")->delimiter(',')->check(CLI::IsMember({"sync", "async", "ssp"}));
  app.add_option("--steps", a.base.steps, "measured steps")->check(CLI::Range(1, 100000));
  app.add_option("--barrier-every", a.base.barrier_every, "steps between barriers (0: none)")->check(CLI::Range(0, 100000));
  app.add_option("--epoch-steps", a.base.epoch_steps, "steps per epoch: an epoch-members get (0: none)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--elems", a.base.elems_per_server, "floats per chunk, one chunk per server")->check(CLI::Range(1, 1 << 24));
  app.add_option("--compute-us", a.base.compute_us, "simulated compute per step (a sleep)")->check(CLI::Range(0, 10000000));
  app.add_option("--heartbeat-ms", a.base.heartbeat_ms, "cluster.heartbeat_interval_ms")->check(CLI::Range(1, 60000));
  app.add_option("--idle-ms", a.base.idle_ms, "the heartbeat-only phase")->check(CLI::Range(4, 600000));
  app.add_option("--staleness", a.base.staleness_bound, "ssp's staleness bound")->check(CLI::Range(0, 1000));
  app.add_option("--barrier-rounds", a.base.barrier_rounds,
                 "barriers back to back after the steps (0: none; -1: 51,200 / workers, at least 20)")
      ->check(CLI::Range(-1, 100000));
  app.add_option("--floor-rounds", a.floor_rounds,
                 "also measure the machine's floor for each worker count: this many releases of plain libzmq "
                 "threads, no project code (0: none)")
      ->check(CLI::Range(0, 100000));
  app.add_flag("--batch-workers", a.base.batch_workers,
               "the workers' threads SCHED_BATCH (the floor's too): woken, they wait for a core's next turn instead of "
               "preempting the scheduler mid-release, as on hosts of their own (docs/scaling.md)");
  app.add_option("--json", a.json, "also write the results to this JSON file");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the coordination of 8 to 1,024 simulated workers, in one process"};
  Args a;
  add_options(app, a);
  CLI11_PARSE(app, argc, argv);
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  std::printf("# scale: %d steps, a barrier every %d, an epoch every %d, %lld floats per server, compute %d us, "
              "heartbeat %d ms%s; per step unless named; KB = 1024 bytes\n",
              a.base.steps, a.base.barrier_every, a.base.epoch_steps, static_cast<long long>(a.base.elems_per_server),
              a.base.compute_us, a.base.heartbeat_ms, a.base.batch_workers ? ", workers SCHED_BATCH" : "");
  std::vector<ScaleResult> rows;
  std::vector<bench::FanoutFloor> floors;
  try {
    for (const std::string& mode : a.modes) {
      for (const int servers : a.servers) {
        for (const int workers : a.workers) {
          const int sockets = bench::sockets_needed(workers, servers);
          if (static_cast<rlim_t>(sockets) + 64 > files.rlim_cur) {
            std::printf("# skipped %s %d workers x %d servers: %d ZeroMQ sockets (a descriptor each), ulimit -n is %llu\n",
                        mode.c_str(), workers, servers, sockets, static_cast<unsigned long long>(files.rlim_cur));
            continue;
          }
          ScaleOptions o = a.base;
          o.mode = mode_of(mode);
          o.workers = workers;
          o.servers = servers;
          rows.push_back(bench::run_scale(o));
          std::fflush(stdout);
        }
      }
    }
    print_table(rows);
    std::fflush(stdout);
    if (a.floor_rounds > 0) floors = measure_floors(a, files);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_scale: %s\n", e.what());
    return 1;
  }
  if (!a.json.empty()) write_json(a.json, rows, floors);
  int wrong = 0;
  for (const ScaleResult& r : rows) wrong += r.wrong;
  return wrong == 0 ? 0 : 1;
}
