// pstrain-scheduler: the rendezvous of one job. See scheduler/scheduler.h.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/base/endpoint_address.h"
#include "common/base/errors.h"
#include "common/base/log.h"
#include "common/checkpoint/checkpoint_members.h"
#include "common/node/node_cli.h"
#include "common/observe/resource_sampler.h"
#include "common/observe/trace.h"
#include "common/transport/make_transport.h"
#include "scheduler/scheduler.h"

namespace {

// Where to listen for a configured scheduler endpoint: port 0 means any free
// port; a non-loopback host means every interface of this machine.
std::string bind_endpoint_for(const std::string& endpoint) {
  if (!endpoint.starts_with("tcp://")) return endpoint;
  const std::optional<pstrain::EndpointAddress> address = pstrain::parse_endpoint(endpoint);
  if (!address) throw pstrain::ConfigError("cluster.scheduler '" + endpoint + "': expected tcp://HOST:PORT");
  std::string host = address->host;
  std::string port = address->port;
  if (port == "0") port = "*";
  if (host != "localhost" && host.rfind("127.", 0) != 0) host = "*";
  if (host == "localhost") host = "127.0.0.1";
  return pstrain::tcp_endpoint(host, port);
}

// A job started without `launch` (by hand, SLURM or mpirun: tools/pstrain-node.sh)
// still gets the run directory's config.toml, the resolved config every node
// read, so that pstrain-summary and the experiment tool can read the run.
void write_resolved_config(const pstrain::RunConfig& config, pstrain::Logger& log) {
  if (config.output.run_dir.empty() || pstrain::started_by_launcher()) return;
  const std::filesystem::path dir(config.output.run_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::filesystem::path file = dir / "config.toml";
  const std::filesystem::path tmp = dir / "config.toml.tmp";
  {
    std::ofstream out(tmp);
    out << pstrain::to_toml(config);
    if (!out.flush()) throw pstrain::Error("cannot write " + tmp.string() + ": " + std::strerror(errno));
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) throw pstrain::Error("cannot rename " + tmp.string() + " to " + file.string() + ": " + ec.message());
  log.info("not started by launch: wrote the resolved config to " + file.string());
}

// Appends each failure the scheduler declares to `file` (one JSON line, then
// flushed), for the launcher to fence the node and for the record. A write
// that fails is said once in the log; the job goes on (the log has the same
// facts in words).
std::function<void(const pstrain::NodeFailure&)> failure_file_writer(const std::string& file, pstrain::Logger& log) {
  auto append = pstrain::json_line_appender(file, log, "failed nodes are not recorded there; the launcher cannot fence them");
  return [append = std::move(append)](const pstrain::NodeFailure& failure) mutable {
    append(pstrain::to_json_line(failure));
  };
}

}  // namespace

int main(int argc, char** argv) {
  pstrain::close_to_other_processes();  // before any segment, key or secret is held (node_cli.h)
  CLI::App app{"pstrain scheduler: rendezvous, barriers, liveness and the end of a job"};
  pstrain::NodeArgs args;
  std::string endpoint_file, failures_file, exits_file, ctl_file;
  pstrain::add_node_options(app, args);
  app.add_option("--endpoint-file", endpoint_file, "write the bound endpoint to this file once listening");
  app.add_option("--failures-file", failures_file,
                 "append each node declared failed to this file, one JSON object per line (docs/run_directory.md)");
  app.add_option("--exits-file", exits_file,
                 "read the launcher's reports of node exits from this file (common/node/exit_report.h)");
  app.add_option("--ctl-file", ctl_file,
                 "read requests to resize the job ('workers N', written by pstrain-ctl) from this file");
  CLI11_PARSE(app, argc, argv);
  return pstrain::guarded_main("pstrain-scheduler", [&] {
    const pstrain::RunConfig config = pstrain::load_node_config(args);
    pstrain::Logger log("scheduler", pstrain::parse_log_level(config.output.log_level));
    write_resolved_config(config, log);
    pstrain::TraceRecorder trace(pstrain::parse_trace_level(config.output.trace), log.clock());
    trace.set_process("scheduler", -1);
    trace.name_this_thread("scheduler");
    const pstrain::TraceFileGuard trace_file(trace, pstrain::trace_dir(config.output.run_dir));
    pstrain::SchedulerOptions options;
    options.num_servers = config.mode == pstrain::Mode::kAllreduce ? 0 : config.cluster.num_servers;
    options.num_workers = config.cluster.num_workers;
    options.cluster = config.cluster;
    // --resume of an elastic job: the rendezvous waits for the checkpoint's members (issue 29).
    if (const std::string dir = pstrain::resume_checkpoint(args, config, [&log](const std::string& m) { log.warn(m); });
        !dir.empty()) {
      const pstrain::CheckpointManifest manifest = pstrain::read_checkpoint_manifest(dir);
      options.initial_workers = pstrain::resume_members(manifest, config.cluster);
      // The epochs' segments every member restores (the lowest's part holds the same as the others').
      const std::string name = "worker-" + std::to_string(options.initial_workers.front()) + ".ckpt";
      for (const pstrain::CheckpointPartInfo& p : manifest.parts) {
        if (p.name != name) continue;  // a fixed-size job's worker dropped before the checkpoint has none
        const pstrain::CheckpointPart part = pstrain::read_checkpoint_part(dir, name);
        if (part.has("epoch_members")) options.resume_history = part.i64s("epoch_members");
      }
    }
    // The PS workers' checkpoints pass scheduler barriers ("checkpoint N") a joiner is counted in;
    // allreduce workers checkpoint without them (0: no such barrier is expected).
    options.checkpoint_interval = config.mode == pstrain::Mode::kAllreduce ? 0 : config.checkpoint.interval_steps;
    options.bind_endpoint = bind_endpoint_for(config.cluster.scheduler);
    pstrain::TrafficCounters traffic;
    options.traffic = &traffic;
    const auto sampler = pstrain::start_resource_sampler(config.output, "scheduler", 0, &traffic, log);
    options.trace = &trace;
    const auto security = pstrain::SecurityContext::load(config.security, pstrain::Role::kScheduler);
    options.security = &security;
    if (!failures_file.empty()) options.on_failure = failure_file_writer(failures_file, log);
    options.on_abandoned_join =
        pstrain::abandoned_join_writer(pstrain::scheduler_records_path(config.output.run_dir), log);
    options.exits_file = exits_file;
    options.ctl_file = ctl_file;
    pstrain::Scheduler scheduler(pstrain::make_zmq_transport(), options, log);
    if (!endpoint_file.empty()) {
      const std::string tmp = endpoint_file + ".tmp";
      std::ofstream(tmp) << scheduler.endpoint() << "\n";
      std::rename(tmp.c_str(), endpoint_file.c_str());  // readers never see a partial file
    }
    scheduler.run();
    return 0;
  });
}
