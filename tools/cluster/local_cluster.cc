#include "tools/cluster/local_cluster.h"

#include "common/wire/job_secret.h"

#include "common/base/errors.h"
#include "server/server_options.h"

#include <pthread.h>
#include <unistd.h>
#include <zmq.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <utility>

namespace pstrain {

namespace {
// Distinct inproc/ipc names per cluster object, without any global counter.
std::string unique_tag(const void* self) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%d-%p", static_cast<int>(getpid()), self);
  return buf;
}

// Names the calling thread (at most 15 characters), for per-node CPU time.
void name_thread(const std::string& name) { pthread_setname_np(pthread_self(), name.substr(0, 15).c_str()); }
}  // namespace

RunConfig run_config(const LocalClusterOptions& options) {
  RunConfig config;
  config.mode = options.mode;
  config.ps.staleness_bound = options.staleness_bound;
  config.ps.partition_bytes = options.partition_bytes;
  config.optimizer = options.optimizer;
  config.cluster = options.cluster;
  config.cluster.num_servers = options.num_servers;
  config.cluster.num_workers = options.num_workers;
  return config;
}

LocalCluster::LocalCluster(LocalClusterOptions options)
    : ctx_(std::make_unique<zmq::context_t>()), options_(std::move(options)),
      tag_(unique_tag(this)),
      log_("local", options_.log_level) {
  if (options_.zmq_max_sockets > 0 && zmq_ctx_set(ctx_->handle(), ZMQ_MAX_SOCKETS, options_.zmq_max_sockets) != 0) {
    throw ConfigError("local cluster: ZeroMQ refused " + std::to_string(options_.zmq_max_sockets) + " sockets: " +
                      zmq_strerror(zmq_errno()));
  }
  if (!options_.server_traffic.empty() &&
      options_.server_traffic.size() != static_cast<std::size_t>(options_.num_servers)) {
    throw ConfigError("local cluster: server_traffic has " + std::to_string(options_.server_traffic.size()) +
                      " counters for " + std::to_string(options_.num_servers) + " servers");
  }
  if (options_.transport == "fake") {
    auto fake = std::make_unique<FakeTransport>(options_.fake_seed);
    fake_ = fake.get();
    transport_ = std::move(fake);
  } else if (options_.transport == "inproc" || options_.transport == "ipc" || options_.transport == "tcp") {
    transport_ = std::make_unique<ZmqTransport>(*ctx_);
  } else if (options_.transport == "shm") {  // tcp endpoints, tensors through shared memory (one process here)
    ShmTransportOptions shm_options = shm_options_for(options_.partition_bytes);
    shm_options.min_bytes = 1;  // every payload through the slots, however small the test's chunks
    auto shm = std::make_unique<ShmTransport>(*ctx_, shm_options);
    shm_ = shm.get();
    transport_ = std::move(shm);
  } else {
    throw ConfigError("local cluster: unknown transport '" + options_.transport + "' (inproc, ipc, tcp, shm or fake)");
  }
  if (!options_.key_dir.empty()) {
    if (options_.transport != "tcp" && options_.transport != "ipc") {
      throw ConfigError("local cluster: CURVE needs transport tcp or ipc (each server gets a ZeroMQ context of its own)");
    }
    const SecurityConfig sec{"curve", options_.key_dir};
    scheduler_security_ = SecurityContext::load(sec, Role::kScheduler);
    server_security_ = SecurityContext::load(sec, Role::kServer);
    if (std::filesystem::exists(std::filesystem::path(options_.key_dir) / "worker.key")) {
      worker_security_ = SecurityContext::load(sec, Role::kWorker);
    }
    for (int w = 0; w < options_.num_workers; ++w) worker_security_of_rank_.push_back(SecurityContext::load(sec, Role::kWorker, w));
  } else if (!options_.open_registration) {  // mode "off": a fresh job secret, answered at registration as the node programs do
    const std::string secret = generate_job_secret();
    for (SecurityContext* s : {&scheduler_security_, &server_security_, &worker_security_}) s->job_secret = secret;
  }
  SchedulerOptions so;
  so.security = &scheduler_security_;
  so.num_servers = options_.num_servers;
  so.num_workers = options_.num_workers;
  so.cluster = options_.cluster;
  so.bind_endpoint = endpoint_for("scheduler");
  so.on_failure = options_.on_failure;
  so.traffic = options_.scheduler_traffic;
  so.ctl_file = options_.ctl_file;
  so.exits_file = options_.exits_file;
  // CURVE: one ZAP handler per context, so the scheduler and each server a transport (a context) of their own.
  scheduler_ = scheduler_security_.curve ? std::make_unique<Scheduler>(std::make_unique<ZmqTransport>(), so, log_)
                                         : std::make_unique<Scheduler>(*transport_, so, log_);
  scheduler_endpoint_ = scheduler_->endpoint();
  threads_.emplace_back([this] {
    name_thread("ps-scheduler");
    run_guarded([this] { scheduler_->run(); });
  });
  for (int s = 0; s < options_.num_servers; ++s) {
    threads_.emplace_back([this, s] {
      name_thread("ps-server-" + std::to_string(s));
      run_guarded([this, s] {
        ServerOptions opt = server_options(run_config(options_));
        opt.max_lr = 0.0;  // no lr bound: the tests' hand-written workers push rates of their own choosing
        opt.scheduler_endpoint = scheduler_endpoint_;
        opt.bind_endpoint = endpoint_for("server" + std::to_string(s));
        opt.requested_rank = s;
        opt.security = &server_security_;
        if (!options_.server_traffic.empty()) opt.traffic = &options_.server_traffic[static_cast<std::size_t>(s)];
        Logger log("server", options_.log_level);
        if (server_security_.curve) {  // one ZAP handler per context: a context of its own
          Server server(std::make_unique<ZmqTransport>(), opt, log);
          server.run();
        } else {
          Server server(*transport_, opt, log);
          server.run();
        }
      });
    });
  }
}

LocalCluster::~LocalCluster() {
  try {
    join();
  } catch (...) {
    // join() is where failures are reported; a destructor must not throw.
  }
}

std::string LocalCluster::endpoint_for(const std::string& name) const {
  if (options_.transport == "tcp" || options_.transport == "shm") return "tcp://127.0.0.1:*";
  if (options_.transport == "ipc") return "ipc:///tmp/pstrain-" + tag_ + "-" + name;
  if (options_.transport == "fake") return "fake://" + name;
  return "inproc://pstrain-" + tag_ + "-" + name;
}

void LocalCluster::run_guarded(const std::function<void()>& body) {
  try {
    body();
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = std::current_exception();
  }
}

WorkerSessionOptions LocalCluster::worker_options(int requested_rank) const {
  WorkerSessionOptions w;
  w.scheduler_endpoint = scheduler_endpoint_;
  w.cluster = options_.cluster;
  w.partition_bytes = options_.partition_bytes;
  w.requested_rank = requested_rank;
  // Per-worker keys (worker-R.key) need the rank; the shared worker.key serves any.
  if (!options_.key_dir.empty() && requested_rank < 0 && !worker_security_.curve) {
    throw ConfigError("local cluster: the key dir has one key per worker: a worker needs a rank");
  }
  w.security = requested_rank >= 0 && static_cast<std::size_t>(requested_rank) < worker_security_of_rank_.size()
                   ? &worker_security_of_rank_[static_cast<std::size_t>(requested_rank)]
                   : &worker_security_;
  w.job_fingerprint = job_fingerprint(options_.mode, options_.partition_bytes, options_.num_servers, options_.num_workers);
  return w;
}

void LocalCluster::join() {
  if (!joined_) {
    for (auto& t : threads_) t.join();
    joined_ = true;
  }
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

}  // namespace pstrain
