// What a local launch will run: the resolved config and the command line of
// every node. plan_launch() does every check that can fail before a process
// starts, so a bad config never leaves a half-started job.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint.h"
#include "common/config/config.h"
#include "tools/launcher/supervisor.h"

namespace pstrain::launcher {

struct LaunchRequest {
  std::string config_path;
  std::vector<std::string> overrides;  // "section.key=value", applied in order
  std::string run_dir;                 // empty: output.run_dir of the config
  std::filesystem::path bin_dir;       // holds pstrain-scheduler, -server, -worker
  std::string ssh_command = "ssh -o BatchMode=yes";  // starts nodes on other hosts (remote.h)
  std::string resume;                  // --resume RUN_DIR (or a checkpoint); empty = a fresh run
};

struct LaunchPlan {
  RunConfig config;  // overrides applied; output.run_dir = run_dir
  std::filesystem::path run_dir;  // absolute
  std::filesystem::path bin_dir;  // absolute
  int num_servers = 0;            // 0 with mode = "allreduce"
  int num_workers = 0;
  std::string ssh_command;        // from the request
  std::filesystem::path work_dir; // the launcher's current directory: remote nodes start there
  // The scheduler's host as the other hosts dial it (cluster.scheduler's);
  // set when some node is on another host.
  std::string scheduler_host;
  // security.mode = "curve" without a key_dir: the launcher writes fresh keys
  // here (RUN_DIR/keys, also config.security.key_dir) before starting anyone.
  std::filesystem::path generate_keys_in;
  // security.mode = "off" without a secret_file of the user's: the launcher
  // writes a fresh job secret here (RUN_DIR/secret, mode 0600, also
  // config.security.secret_file) before starting anyone (common/wire/job_secret.h).
  std::filesystem::path generate_secret_in;
  // Non-empty: one line the launcher says before starting: security.mode is
  // not set and the job's nodes are not all on loopback (what it chose, why).
  std::string security_note;
  // --resume: the checkpoint every node starts from, its step, and why newer
  // ones were passed over ("step-N: why").
  std::filesystem::path resume_dir;
  std::int64_t resume_step = 0;
  std::vector<std::string> resume_skipped;
  // --resume of an elastic job's checkpoint with a membership record: the
  // ranks it resumes (common/checkpoint/checkpoint_members.h; num_workers is
  // their count). Empty: workers 0..num_workers-1.
  std::vector<int> resume_workers;
  // Lines for the launcher to print before it starts anyone (e.g. that the
  // workers train on the CPU: tools/launcher/gpu_check.h).
  std::vector<std::string> notes;

  bool remote(const std::string& host) const;
  // The worker ranks the launch starts: resume_workers, else 0..num_workers-1.
  std::vector<int> worker_ranks() const;
  // cluster.worker_hosts' entry for `rank`, "" (this machine) past its end.
  std::string worker_host(int rank) const;
  std::filesystem::path config_file() const { return run_dir / "config.toml"; }
  std::filesystem::path endpoint_file() const { return run_dir / "scheduler.endpoint"; }
  // The nodes the scheduler declared failed (tools/launcher/fencing.h).
  std::filesystem::path failures_file() const { return run_dir / "failures.jsonl"; }
  // Node exits the launcher tells the scheduler of (common/node/exit_report.h).
  std::filesystem::path exits_file() const { return run_dir / "exits.txt"; }
  // Requests to resize the job (pstrain-ctl; the scheduler's --ctl-file).
  std::filesystem::path ctl_file() const { return run_dir / "ctl.txt"; }
};

// Loads and checks the config (ConfigError "FILE:LINE: key 'a.b': ...", or
// "--set ...: key ..." for an override): the parser's rules, plus that the
// model is known, that the dataset directory exists (unless synthetic), that
// workload.batch_size fits a worker's shard of the training set, that every host in
// cluster.server_hosts / worker_hosts is this machine, and that the node
// programs exist in bin_dir; with security.mode = "curve" and a key_dir,
// that every role's key files are there and readable; with "off" and a
// security.secret_file, that the secret file is usable (read_secret_file).
// With request.resume: the config defaults to RESUME/config.toml and the run
// directory to RESUME; the newest complete checkpoint is chosen and must
// match the config (ConfigError naming the differences, or saying that
// there is no checkpoint).
LaunchPlan plan_launch(const LaunchRequest& request);
// The highest worker rank in a checkpoint's epoch segments (the worker part's
// `epoch_members`: [epoch, count, ranks...] for an epoch's first segment,
// [epoch, -from_step, count, ranks...] for a later one); -1 when empty.
// CheckpointError for a list not of that form.
int highest_member_rank(const std::vector<std::int64_t>& epoch_members);
// Why checkpoint `m` in `dir` cannot be resumed with `workers` workers, or ""
// when it can: a job that grew (issue 29, elastic membership) and then
// checkpointed has a worker at or past `workers` in its segments (or a part
// of one), whose share of the interrupted epoch a resume at the initial size
// would leave untrained. Asked only where the checkpoint has no membership
// record to resume at (one of an older build).
std::string grown_checkpoint_refusal(const CheckpointManifest& m, const std::filesystem::path& dir, int workers);

NodeSpec scheduler_spec(const LaunchPlan& plan);
// Servers (none with allreduce), then workers, each told the scheduler's endpoint.
// `extra_args` go after each node's own (a restart's "--rejoin").
std::vector<NodeSpec> node_specs(const LaunchPlan& plan, const std::string& scheduler_endpoint,
                                 const std::vector<std::string>& extra_args = {});

}  // namespace pstrain::launcher
