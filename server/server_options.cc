#include "server/server_options.h"

#include "common/checkpoint/checkpoint.h"
#include "common/config/job_fingerprint.h"
#include "common/math/lr_schedule.h"
#include "common/math/optimizer.h"

namespace pstrain {

ServerOptions server_options(const RunConfig& config, double* implicit_momentum) {
  ServerOptions o;
  o.mode = config.mode;
  o.staleness_bound = config.ps.staleness_bound;
  o.optimizer = server_optimizer(config, implicit_momentum);
  o.max_lr = schedule_max_lr(config);
  o.partition_bytes = config.ps.partition_bytes;
  o.cluster = config.cluster;
  o.scheduler_endpoint = config.cluster.scheduler;
  o.job_fingerprint = job_fingerprint(config.mode, config.ps.partition_bytes, config.cluster.num_servers,
                                      config.cluster.num_workers);
  o.checkpoint_interval = config.checkpoint.interval_steps;
  o.checkpoint_root = checkpoint_root(config).string();
  o.fingerprint = checkpoint_fingerprint(config);
  o.apply_threads = config.ps.apply_threads;
  o.apply_split_bytes = config.ps.apply_split_bytes;
  return o;
}

}  // namespace pstrain
