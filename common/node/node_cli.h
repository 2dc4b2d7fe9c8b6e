// What every pstrain process takes on its command line, and the one place
// that turns an exception into an exit code.
//
//   --config FILE         the run's TOML file (required)
//   --set KEY=VALUE       override a config key (repeatable), e.g. --set mode=async
//   --rank N              this node's rank within its role; default: from the
//                         launcher's environment (below) minus the role's offset,
//                         else assigned by the scheduler
//   --scheduler ENDPOINT  overrides cluster.scheduler (the launcher passes the
//                         scheduler's actual port when the config says port 0)
//   --resume PATH         (servers, workers) start from a checkpoint: PATH is
//                         a checkpoint directory (step-N), a checkpoint root or
//                         a run directory (its newest complete checkpoint);
//                         every node of the job must be given the same one
//   --rejoin              (servers, workers) this process replaces a failed
//                         one of the same --rank in a running job (the
//                         "restart" failure policies; the launcher passes it)
//   --join                (workers) take a vacant slot of a running elastic
//                         job (cluster.max_workers above cluster.workers):
//                         --rank R asks for slot R, else the lowest vacant
//                         one; it enters the job at the step boundary of the
//                         membership change its registration starts
//
// The launchers' environment (torchrun, SLURM, Open MPI, MPICH/PMI, PMIx):
//
//   global rank    the first set of RANK (torchrun), OMPI_COMM_WORLD_RANK,
//                  PMIX_RANK, PMI_RANK, SLURM_PROCID. Innermost launcher first:
//                  launchers nest as SLURM -> mpirun -> torchrun, and a process
//                  inherits the outer launchers' variables with the index of
//                  the outer task (`srun torchrun ...` gives every process of a
//                  node the same SLURM_PROCID), so disagreeing values later in
//                  the list are expected and ignored. A value that is not a
//                  non-negative integer is a ConfigError. --rank overrides all.
//                  Global rank 0 is the scheduler, 1..S the servers, S+1..S+W
//                  the workers (S = 0 in allreduce mode).
//   WORLD_SIZE     when the rank comes from the environment and WORLD_SIZE is
//                  set, it must equal the job's 1+S+W processes (ConfigError).
//   MASTER_ADDR,   the scheduler's endpoint tcp://MASTER_ADDR:MASTER_PORT when
//   MASTER_PORT    --scheduler is not given (precedence: --scheduler >
//                  MASTER_ADDR/MASTER_PORT > cluster.scheduler); both or
//                  neither, port 1..65535 (ConfigError otherwise).
//   LOCAL_RANK     a worker's GPU (worker/collective/gpu_assignment.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config/config.h"

namespace pstrain {

struct NodeArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  int rank = -1;
  std::string scheduler;
  std::string resume;  // --resume PATH; empty = a fresh start
  bool rejoin = false;  // --rejoin: replaces a failed node of rank `rank` in a running job
  bool join = false;    // --join: a worker joining a vacant slot of a running elastic job
};

void add_node_options(CLI::App& app, NodeArgs& args);
// Loads the config and applies the overrides, the scheduler endpoint
// (--scheduler, else MASTER_ADDR/MASTER_PORT) and, when the rank comes from
// the environment, the WORLD_SIZE check.
RunConfig load_node_config(const NodeArgs& args);

// The checkpoint directory --resume names (common/checkpoint/checkpoint.h,
// resolve_resume), or "" without --resume; each newer checkpoint passed over
// is told to `say` with the reason. ConfigError when there is none to use.
std::string resume_checkpoint(const NodeArgs& args, const RunConfig& config,
                              const std::function<void(const std::string&)>& say);

// The environment variables holding a launcher's global rank, in precedence order.
inline constexpr const char* kRankEnvVars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                               "SLURM_PROCID"};

// The global rank a launcher gave this process, if any (see above).
std::optional<int> launcher_rank();
// Rank within a role for a process launched as one of a job's global ranks:
// global rank 0 is the scheduler, 1..S the servers, S+1..S+W the workers.
// Returns -1 when no launcher rank is set.
int role_rank_from_launcher(int role_offset, int role_count, const char* role_name);

// For a server or worker: ConfigError at once when config.cluster.scheduler
// (after --scheduler and MASTER_ADDR/MASTER_PORT) has port 0 or '*', the
// scheduler's "pick a free port" that only it and the launcher can resolve,
// instead of a connection attempt that can only time out.
void check_scheduler_known(const RunConfig& config, const char* role);

// Set by `launch` in the environment of every process it starts (its pid).
// A scheduler without it was started by hand, SLURM or mpirun, and writes
// the run directory's config.toml itself (scheduler/main.cc).
inline constexpr const char* kLauncherEnv = "PSTRAIN_LAUNCHER_PID";
bool started_by_launcher();

// 1 + S + W: the processes of the job (S = 0 in allreduce mode).
int job_world_size(const RunConfig& config);
// ConfigError if WORLD_SIZE is set and is not `expected` (or not a number).
void check_world_size(int expected);
// "tcp://MASTER_ADDR:MASTER_PORT" when either is set (ConfigError unless
// both are, with a port in 1..65535); empty when neither is.
std::string scheduler_from_master_env();

// SIGTERM and SIGINT end the process as before (their default action, so
// its exit status still names the signal), but first every trace part
// alive in it is written (common/observe/trace.h, write_live_trace_files):
// an interrupted run keeps its timeline. Blocks both signals in the calling
// thread, which every later thread inherits, and starts one thread that
// waits for them: call it first thing in main, before any thread starts. A
// signal ignored at the start stays ignored; a forked child gets both back
// unblocked (no signal thread there). Once per process; guarded_main calls it.
void install_termination_watch(const char* program);
// Closes this process to the other processes of its user: not dumpable
// (prctl PR_SET_DUMPABLE 0), so /proc/<pid>/fd, /proc/<pid>/mem, environ
// and ptrace are refused to them (root keeps them) and the shared-memory
// segments and arenas it holds reach only the peers it hands them to
// (common/transport/shm/shm_memfd.h). It also stops core dumps: set
// PSTRAIN_KEEP_CORES=1 in the environment to keep them (and /proc/<pid>
// open to the user, e.g. for a debugger) while debugging. Every node's main
// calls it first; false when the environment kept it dumpable.
inline constexpr const char* kKeepCoresEnv = "PSTRAIN_KEEP_CORES";
bool close_to_other_processes();

// Runs `body`, mapping exceptions to one clear line on stderr and an exit
// code: 0 ok, 1 error, 2 job aborted by a peer's failure, 3 usage/config error.
// SIGPIPE is ignored from then on: a write to a closed connection fails with
// EPIPE instead of killing the process. Installs the fatal-signal report
// (common/base/fatal_signal.h) and the termination watch (above).
int guarded_main(const char* program, const std::function<int()>& body);

}  // namespace pstrain
