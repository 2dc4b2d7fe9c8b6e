// Allreduce throughput of pstrain's Gloo collective among W worker
// processes on the CPU, beside raw Gloo and the parameter server's push+pull
// measured in the same run for the same sizes. Every node is its own forked
// process, as in a real job: a scheduler (the rendezvous store), W workers;
// then, for the PS figures, a scheduler, S servers and W workers.
//
//   time   the median time of one allreduce of SIZE bytes (float32) over
//          back-to-back operations, the slowest rank's
//   algbw  SIZE / time                      (GB = 1e9 bytes)
//   busbw  algbw * 2 (W - 1) / W            (nccl-tests' allreduce bus bandwidth:
//          the traffic per link of an optimal ring, comparable across W)
//   gloo   the same with raw gloo::allreduce (sum only) on its own context:
//          the cost of pstrain's layer (communication thread, mean)
//   PS     one sync push+pull round of SIZE bytes per worker (tools/bench/
//          ps_pushpull.h): the parameter server's way of averaging;
//          "PS algbw" = SIZE / round time, so algbw ratios are speed ratios
// Correctness is checked outside the timed loops (#wrong column: elements
// off the exact mean on any rank).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <CLI/CLI.hpp>

#include "common/base/errors.h"
#include "common/base/json_line.h"
#include "common/node/node_cli.h"
#include "common/node/scheduler_client.h"
#include "scheduler/scheduler.h"
#include "tools/bench/processes.h"
#include "tools/bench/ps_pushpull.h"
#include "worker/collective/collective_factory.h"
#include "worker/collective/scheduler_store.h"
#include "common/transport/make_transport.h"

using namespace pstrain;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::vector<double> sizes_mib{1, 4, 16, 64};
  int workers = 2, servers = 1, rounds = 0;
  bool with_ps = true;
  std::string json;
};

struct Result {
  double size_mib = 0, time_ms = 0, algbw = 0, busbw = 0, gloo_ms = 0, gloo_busbw = 0, ps_ms = 0, ps_algbw = 0;
  int wrong = 0, ps_wrong = 0;
};

// Raw Gloo beside the collective: its own context, rendezvous through the
// same scheduler store under another key prefix.
class RawGlooStore final : public gloo::rendezvous::Store {
 public:
  explicit RawGlooStore(RendezvousStore& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set("raw/" + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = store_.get("raw/" + key, std::chrono::milliseconds(60000));
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(60000)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) store_.get("raw/" + k, timeout);
  }

 private:
  RendezvousStore& store_;
};

// Median seconds of `rounds` back-to-back operations (after warm-up and a barrier).
template <class Op, class Barrier>
double time_ops(int rounds, Op op, Barrier barrier) {
  op();
  op();  // warm-up: connections, buffers, page faults
  barrier();
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    op();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return bench::median(times);
}

// One worker: "collective_seconds gloo_seconds wrong".
std::string worker_run(const std::string& sched, int rank, int workers, std::size_t num_elems, int rounds) {
  ClusterConfig cluster;
  cluster.timeout_ms = 120000;
  SchedulerClient client(make_zmq_transport(), sched, Role::kWorker, cluster);
  RegisterRequest req;
  req.requested_rank = rank;
  client.register_node(req);
  SchedulerStore store(client);
  CollectiveOptions o;
  o.rank = rank;
  o.size = workers;
  auto collective = make_collective("gloo", o, store);
  std::vector<float> x(num_elems, static_cast<float>(rank + 1));
  const double ours = time_ops(rounds, [&] { collective->allreduce_mean(x.data(), x.size()); },
                               [&] { collective->barrier(); });
  // Every op keeps the mean of equal values: (W + 1) / 2 after the first, exactly.
  const float expected = static_cast<float>(workers + 1) / 2.0f;
  const auto wrong = std::count_if(x.begin(), x.end(), [&](float v) { return v != expected; });

  auto device = gloo::transport::tcp::CreateDevice(gloo::transport::tcp::attr("127.0.0.1"));
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, workers);
  RawGlooStore raw_store(store);
  context->connectFullMesh(raw_store, device);
  std::vector<float> y(num_elems, 1.0f);
  const double raw = time_ops(
      rounds,
      [&] {
        gloo::AllreduceOptions opts(context);
        opts.setOutput(y.data(), y.size());
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
        gloo::allreduce(opts);
      },
      [&] { collective->barrier(); });
  collective->barrier();
  collective.reset();
  client.finish();
  return std::to_string(ours) + " " + std::to_string(raw) + " " + std::to_string(wrong);
}

// The slowest rank's times and the total wrong count.
void allreduce_round(std::size_t num_bytes, int rounds, const Args& a, Result& out) {
  ClusterConfig cluster;
  cluster.timeout_ms = 120000;
  bench::LinePipe endpoint_pipe, result_pipe;
  std::vector<pid_t> pids;
  pids.push_back(bench::spawn([&] {
    Logger log("scheduler", LogLevel::kWarn);
    Scheduler s(make_zmq_transport(), SchedulerOptions{0, a.workers, cluster, "tcp://127.0.0.1:*"}, log);
    if (!endpoint_pipe.write_line(s.endpoint())) return 1;
    s.run();
    return 0;
  }));
  endpoint_pipe.close_write();
  const std::string sched = endpoint_pipe.read_line();
  for (int w = 0; w < a.workers; ++w) {
    pids.push_back(bench::spawn([&, w] {
      return result_pipe.write_line(worker_run(sched, w, a.workers, num_bytes / sizeof(float), rounds)) ? 0 : 1;
    }));
  }
  result_pipe.close_write();
  double ours = 0, raw = 0;
  int wrong = 0, lines = 0;
  for (std::string line; !(line = result_pipe.read_line()).empty(); ++lines) {
    double o = 0, r = 0;
    int w = 0;
    if (std::sscanf(line.c_str(), "%lf %lf %d", &o, &r, &w) != 3) throw pstrain::Error("bad worker report '" + line + "'");
    ours = std::max(ours, o);
    raw = std::max(raw, r);
    wrong += w;
  }
  if (!bench::wait_all(pids) || lines != a.workers) throw pstrain::Error("an allreduce benchmark process failed");
  const double bytes = static_cast<double>(num_bytes);
  const double bus = 2.0 * (a.workers - 1) / a.workers;
  out.time_ms = 1e3 * ours;
  out.algbw = bytes / ours / 1e9;
  out.busbw = out.algbw * bus;
  out.gloo_ms = 1e3 * raw;
  out.gloo_busbw = bytes / raw / 1e9 * bus;
  out.wrong = wrong;
}

void print_table(const Args& a, const std::vector<Result>& results) {
  std::printf("# allreduce (mean) of float32 among %d worker processes, gloo over tcp loopback; GB = 1e9 bytes\n",
              a.workers);
  std::printf("# algbw = size / time, busbw = algbw * 2(W-1)/W; PS: sync push+pull, %d server(s), same workers\n",
              a.servers);
  std::printf("%9s %10s %9s %9s %10s %10s %8s %10s %10s %10s %7s\n", "size(MiB)", "time(ms)", "algbw", "busbw",
              "gloo(ms)", "gloo busbw", "vs gloo", "PS(ms)", "PS algbw", "AR/PS", "#wrong");
  for (const Result& r : results) {
    std::printf("%9.1f %10.3f %9.3f %9.3f %10.3f %10.3f %7.1f%% ", r.size_mib, r.time_ms, r.algbw, r.busbw,
                r.gloo_ms, r.gloo_busbw, 100.0 * r.gloo_ms / r.time_ms);
    if (a.with_ps) {
      std::printf("%10.3f %10.3f %9.2fx %7d\n", r.ps_ms, r.ps_algbw, r.ps_ms / r.time_ms, r.wrong + r.ps_wrong);
    } else {
      std::printf("%10s %10s %10s %7d\n", "-", "-", "-", r.wrong);
    }
  }
}

void write_json(const Args& a, const std::vector<Result>& results) {
  std::ofstream out(a.json);
  out << "[\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    JsonLine line;
    line.add("bench", "allreduce").add("workers", a.workers).add("size_mib", r.size_mib).add("time_ms", r.time_ms)
        .add("algbw_gbps", r.algbw).add("busbw_gbps", r.busbw).add("gloo_time_ms", r.gloo_ms)
        .add("gloo_busbw_gbps", r.gloo_busbw).add("wrong", r.wrong);
    if (a.with_ps) {
      line.add("ps_servers", a.servers).add("ps_round_ms", r.ps_ms).add("ps_algbw_gbps", r.ps_algbw)
          .add("ps_wrong", r.ps_wrong);
    }
    out << "  " << line.str() << (i + 1 < results.size() ? ",\n" : "\n");
  }
  out << "]\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"allreduce throughput of pstrain's Gloo collective vs raw Gloo and the parameter server's push+pull"};
  Args a;
  app.add_option("--sizes", a.sizes_mib, "tensor sizes in MiB")->check(CLI::PositiveNumber);
  app.add_option("--workers", a.workers, "worker processes")->check(CLI::Range(1, 64));
  app.add_option("--servers", a.servers, "servers for the PS push+pull figures")->check(CLI::Range(1, 64));
  app.add_option("--rounds", a.rounds, "timed operations per size (default: by size)");
  app.add_flag("--ps,!--no-ps", a.with_ps, "measure the parameter server's push+pull too (default: yes)");
  app.add_option("--json", a.json, "also write results to this JSON file");
  CLI11_PARSE(app, argc, argv);
  return guarded_main("bench_allreduce", [&] {
    std::vector<Result> results;
    for (double mib : a.sizes_mib) {
      const auto num_bytes = std::max<std::size_t>(4, static_cast<std::size_t>(mib * 1048576.0) / 4 * 4);
      const int rounds = bench::rounds_for(mib, a.rounds);
      Result r;
      r.size_mib = mib;
      allreduce_round(num_bytes, rounds, a, r);
      if (a.with_ps) {
        const bench::PsRound ps = bench::ps_pushpull_round(num_bytes, rounds, bench::PsBenchOptions{a.workers, a.servers, 0, "tcp", ""});
        r.ps_ms = 1e3 * ps.seconds;
        r.ps_algbw = static_cast<double>(num_bytes) / ps.seconds / 1e9;
        r.ps_wrong = ps.wrong;
      }
      results.push_back(r);
    }
    print_table(a, results);
    if (!a.json.empty()) write_json(a, results);
    return 0;
  });
}
