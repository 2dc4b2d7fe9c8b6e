// pstrain-server: one parameter-server shard. See server/server.h.
#include <unistd.h>

#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "common/checkpoint/checkpoint.h"
#include "common/base/errors.h"
#include "common/base/log.h"
#include "common/node/node_cli.h"
#include "common/observe/resource_sampler.h"
#include "common/transport/make_transport.h"
#include "common/transport/shm/shm_transport.h"
#include "common/observe/trace.h"
#include "server/server.h"
#include "server/server_options.h"
#include "common/base/json_line.h"

namespace {

// Where this server listens, and the host workers dial.
void choose_endpoint(const pstrain::RunConfig& c, int rank, pstrain::ServerOptions& o) {
  if (c.cluster.transport == "ipc") {
    o.bind_endpoint = "ipc:///tmp/pstrain-" + std::to_string(getpid()) + "-server";
    return;
  }
  if (c.cluster.server_hosts.empty()) {
    o.bind_endpoint = c.cluster.server_port > 0 && rank >= 0
                          ? "tcp://127.0.0.1:" + std::to_string(c.cluster.server_port + rank)
                          : "tcp://127.0.0.1:*";
    return;
  }
  if (rank < 0) {
    throw pstrain::ConfigError("cluster.server_hosts is set: give each server its --rank (or launch under SLURM/mpirun)");
  }
  o.bind_endpoint = c.cluster.server_port > 0 ? "tcp://*:" + std::to_string(c.cluster.server_port + rank) : "tcp://*:*";
  o.advertise_host = c.cluster.server_hosts.at(static_cast<std::size_t>(rank));
}

// run_dir/metrics/server-<rank>.json (docs/run_directory.md).
void write_server_metrics(const std::string& run_dir, const pstrain::Server& server,
                          const pstrain::Transport& transport) {
  if (run_dir.empty()) return;
  // cluster.transport "shm": how many workers' connections used shared memory, and what went through it.
  pstrain::ShmTransport::Stats shm;
  if (const auto* t = dynamic_cast<const pstrain::ShmTransport*>(&transport)) shm = t->stats();
  const pstrain::StoreStats& s = server.stats();
  std::string histogram = "{";
  for (const auto& [staleness, count] : s.staleness_histogram) {
    histogram += (histogram.size() > 1 ? "," : "") + ("\"" + std::to_string(staleness) + "\":" + std::to_string(count));
  }
  histogram += "}";
  std::string lost_by_chunk = "{";
  for (const auto& [chunk, count] : s.lost_updates_by_chunk) {
    lost_by_chunk += (lost_by_chunk.size() > 1 ? "," : "") + ("\"" + std::to_string(chunk) + "\":" + std::to_string(count));
  }
  lost_by_chunk += "}";
  std::string refused = "{";
  for (const auto& [worker, count] : s.refused_by_worker) {
    refused += (refused.size() > 1 ? "," : "") + ("\"" + std::to_string(worker) + "\":" + std::to_string(count));
  }
  refused += "}";
  const std::string line = pstrain::JsonLine()
                               .add("rank", server.rank())
                               .add("updates", s.updates_applied)
                               .add("pushes_accepted", s.pushes_accepted)
                               .add("pushes_rejected", s.pushes_rejected)
                               .add("partial_updates", s.partial_updates)
                               .add("in_place_updates", s.in_place_updates)
                               .add("skip_pushes", s.skip_pushes)
                               .add("empty_updates", s.empty_updates)
                               .add("clock_gap_max", s.clock_gap_max)
                               .add("duplicate_pushes", s.duplicate_pushes)
                               .add("rejoined_from_step", s.rejoined_from_step)
                               .add("lost_updates", s.lost_updates)
                               .add("lost_pushes", s.lost_pushes)
                               .raw("lost_updates_by_chunk", lost_by_chunk)
                               .add("refused_steps", s.refused_steps)
                               .raw("refused_by_worker", refused)
                               .raw("staleness_histogram", histogram)
                               .add("apply_threads", static_cast<std::int64_t>(server.apply_threads()))
                               .add("apply_runs", server.apply_stats().runs)
                               .add("apply_split_runs", server.apply_stats().split_runs)
                               .add("apply_s", server.apply_stats().seconds)
                               .add("run_requests", server.run_requests())
                               .add("run_chunks", server.run_chunks())
                               .add("transport", std::string(transport.kind()))
                               .add("shm_connections", static_cast<std::int64_t>(shm.accepted))
                               .add("shm_refused", static_cast<std::int64_t>(shm.refused))
                               .add("shm_bodies_sent", static_cast<std::int64_t>(shm.shm_bodies))
                               .add("inline_bodies_sent", static_cast<std::int64_t>(shm.inline_bodies))
                               .add("shm_arenas", static_cast<std::int64_t>(shm.arenas_accepted))
                               .add("arena_pushes_read", static_cast<std::int64_t>(shm.arena_bodies_read))
                               .add("arena_replies_sent", static_cast<std::int64_t>(shm.arena_bodies))
                               .str();
  std::filesystem::create_directories(run_dir + "/metrics");
  const std::string path = run_dir + "/metrics/server-" + std::to_string(server.rank()) + ".json";
  // Whole or absent (a reader that starts before this process ends, as
  // pstrain-node.sh's summary, never sees half a file): written aside, renamed.
  const std::string part = path + ".part";
  {
    std::ofstream out(part);
    out << line << "\n";
    if (!out.flush()) throw pstrain::Error("cannot write " + part + ": " + std::strerror(errno));  // a full disk shows here
  }
  std::error_code ec;
  std::filesystem::rename(part, path, ec);
  if (ec) throw pstrain::Error("cannot rename " + part + " to " + path + ": " + ec.message());
}

// --rejoin: the newest complete checkpoint of the run, whose part for this
// rank the server reloads before it takes its rank back.
std::string rejoin_checkpoint(const pstrain::RunConfig& config, int rank, pstrain::Logger& log,
                              pstrain::ServerOptions& o) {
  if (rank < 0) throw pstrain::ConfigError("--rejoin needs --rank: the rank of the failed server to replace");
  if (config.checkpoint.interval_steps <= 0) {
    throw pstrain::ConfigError(config.source_path + ": --rejoin reloads the newest checkpoint, and "
                               "checkpoint.interval_steps is 0 (no checkpoints are written)");
  }
  std::vector<std::string> skipped;
  const std::filesystem::path root = pstrain::checkpoint_root(config);
  const auto found = pstrain::find_newest_checkpoint(root, &skipped);
  for (const std::string& why : skipped) log.warn("passed over checkpoint " + why);
  o.rejoin = true;
  if (found) return found->dir.string();
  // Failed before the first checkpoint: the shard as the workers' inits set it (server/checkpointing.h).
  if (const auto initial = pstrain::usable_initial_part(root, rank)) {
    log.info("no complete checkpoint under " + root.string() + " yet: server " + std::to_string(rank) +
             " comes back from its initial part");
    return initial->string();
  }
  throw pstrain::Error("--rejoin: no complete checkpoint under " + root.string() + " and no initial part of server " +
                       std::to_string(rank) + " to reload its shards from (it failed before its chunks were initialized)");
}

}  // namespace

int main(int argc, char** argv) {
  pstrain::close_to_other_processes();  // before any segment, key or secret is held (node_cli.h)
  CLI::App app{"pstrain server: holds a shard of the model and applies updates"};
  pstrain::NodeArgs args;
  bool print_servers = false;
  bool print_run_dir = false;
  pstrain::add_node_options(app, args);
  app.add_flag("--print-servers", print_servers, "print how many servers the config runs (0 for allreduce) and exit");
  app.add_flag("--print-run-dir", print_run_dir, "print the config's output.run_dir and exit");
  CLI11_PARSE(app, argc, argv);
  return pstrain::guarded_main("pstrain-server", [&] {
    const pstrain::RunConfig config = pstrain::load_node_config(args);
    if (print_run_dir) {
      std::printf("%s\n", config.output.run_dir.c_str());
      return 0;
    }
    if (print_servers) {
      std::printf("%d\n", config.mode == pstrain::Mode::kAllreduce ? 0 : config.cluster.num_servers);
      return 0;
    }
    if (config.mode == pstrain::Mode::kAllreduce) {
      throw pstrain::ConfigError(config.source_path + ": mode = \"allreduce\" runs no servers");
    }
    pstrain::check_scheduler_known(config, "server");
    const int rank = args.rank >= 0 ? args.rank
                                    : pstrain::role_rank_from_launcher(1, config.cluster.num_servers, "server");
    pstrain::Logger log("server", pstrain::parse_log_level(config.output.log_level));
    pstrain::TraceRecorder trace(pstrain::parse_trace_level(config.output.trace), log.clock());
    trace.set_process("server", rank);
    trace.name_this_thread("requests");
    const pstrain::TraceFileGuard trace_file(trace, pstrain::trace_dir(config.output.run_dir));
    double implicit = 0.0;
    pstrain::ServerOptions o = pstrain::server_options(config, &implicit);
    if (o.optimizer.momentum != config.optimizer.momentum) {
      char line[200];
      std::snprintf(line, sizeof(line),
                    "momentum %.4g on the servers: optimizer.momentum %.4g less the %.4g that asynchrony with %d "
                    "workers adds (optimizer.momentum_correction)",
                    o.optimizer.momentum, config.optimizer.momentum, implicit, config.cluster.num_workers);
      log.info(line);
    }
    o.requested_rank = rank;
    o.trace = &trace;
    const auto security = pstrain::SecurityContext::load(config.security, pstrain::Role::kServer);
    o.security = &security;
    o.resume_dir = pstrain::resume_checkpoint(args, config, [&log](const std::string& m) { log.warn(m); });
    if (args.rejoin) o.resume_dir = rejoin_checkpoint(config, rank, log, o);
    choose_endpoint(config, rank, o);
    pstrain::TrafficCounters traffic;
    std::unique_ptr<pstrain::ResourceSampler> sampler;  // from registration, when the rank is known
    o.traffic = &traffic;
    o.on_registered = [&](int r) { sampler = pstrain::start_resource_sampler(config.output, "server", r, &traffic, log); };
    const std::unique_ptr<pstrain::Transport> transport =
        pstrain::make_transport(config.cluster.transport, config.ps.partition_bytes,
                                pstrain::io_threads_for(config.security.mode == "curve"));
    pstrain::Server server(*transport, o, log);
    server.run();
    write_server_metrics(config.output.run_dir, server, *transport);
    return 0;
  });
}
