#include "worker/collective/gloo_collective.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <map>

#include "common/base/errors.h"
#include "worker/collective/comm_thread.h"

namespace pstrain {
namespace {

using std::chrono::milliseconds;

// Gloo's store interface over a RendezvousStore, keys under a prefix. Gloo
// waits for keys before reading them: the values fetched by wait() are kept
// so that get() does not ask twice.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(RendezvousStore& store, std::string prefix, milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    auto it = fetched_.find(key);
    if (it == fetched_.end()) it = fetched_.emplace(key, store_.get(prefix_ + key, timeout_)).first;
    return std::vector<char>(it->second.begin(), it->second.end());
  }
  // Gloo passes its context's timeout, which may be the short connect one
  // (GlooCollective): the addresses are waited for under the store's timeout.
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& /*gloo's*/) override {
    for (const std::string& key : keys) {
      if (fetched_.count(key) == 0) fetched_.emplace(key, store_.get(prefix_ + key, timeout_));
    }
  }

 private:
  RendezvousStore& store_;
  std::string prefix_;
  milliseconds timeout_;
  std::map<std::string, std::string> fetched_;
};

// Sum -> mean with the sync servers' arithmetic (server/shard_store.cc).
void divide_by_ranks(float* data, std::size_t num_elems, int ranks) {
  if (ranks == 1) return;
  if ((ranks & (ranks - 1)) == 0) {
    const float inv = 1.0f / static_cast<float>(ranks);
    for (std::size_t i = 0; i < num_elems; ++i) data[i] *= inv;
  } else {
    const auto n = static_cast<float>(ranks);
    for (std::size_t i = 0; i < num_elems; ++i) data[i] /= n;
  }
}

class GlooCollective final : public Collective {
 public:
  GlooCollective(const CollectiveOptions& options, RendezvousStore& store) : options_(options) {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
      // The pairs take the context's timeout when made (their connect waits 5x it): a fifth of the
      // connect timeout then, once every rank has arrived.
      const bool short_connect = options.connect_timeout.count() > 0 && options.connect_timeout < 5 * options.timeout;
      if (short_connect) {
        meet(store);
        context_->setTimeout(std::max(milliseconds(1), options.connect_timeout / 5));
      } else {
        context_->setTimeout(options.timeout);
      }
      GlooStore gloo_store(store, options.key_prefix + "gloo/", options.timeout);
      context_->connectFullMesh(gloo_store, device_);
      context_->setTimeout(options.timeout);
    } catch (const gloo::Exception& e) {
      throw TransportError(where("rendezvous at " + options.host) + ": " + e.what());
    } catch (const gloo::EnforceNotMet& e) {
      throw TransportError(where("rendezvous at " + options.host) + ": " + e.what());
    }
  }

  std::string name() const override { return "gloo (tcp, " + options_.host + ")"; }
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  bool device_memory() const override { return false; }

  void start_allreduce_mean(float* data, std::size_t num_elems) override {
    if (num_elems == 0) return;
    const std::uint32_t tag = next_tag_++;
    comm_.submit([this, data, num_elems, tag] {
      TraceSpan span(options_.trace, TraceLevel::kAll, "allreduce bucket", "allreduce");
      if (span.active()) name_comm_thread();
      span.arg("elems", static_cast<std::int64_t>(num_elems))
          .arg("bytes", static_cast<std::int64_t>(num_elems * sizeof(float)))
          .arg("tag", static_cast<std::int64_t>(tag));
      gloo::AllreduceOptions o(context_);
      o.setOutput(data, num_elems);
      o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
      o.setTag(tag);
      o.setTimeout(options_.timeout);
      run("allreduce of " + std::to_string(num_elems) + " floats", [&] { gloo::allreduce(o); });
      divide_by_ranks(data, num_elems, options_.size);
    });
  }

  bool wait_all(milliseconds timeout) override { return comm_.wait_idle(timeout); }

  void broadcast(float* data, std::size_t num_elems, int root) override {
    if (root < 0 || root >= options_.size) {
      throw ConfigError(where("broadcast") + ": root " + std::to_string(root) + " outside [0, " +
                        std::to_string(options_.size) + ")");
    }
    if (num_elems == 0) return;
    const std::uint32_t tag = next_tag_++;
    blocking([this, data, num_elems, root, tag] {
      gloo::BroadcastOptions o(context_);
      o.setOutput(data, num_elems);
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(options_.timeout);
      run("broadcast of " + std::to_string(num_elems) + " floats from rank " + std::to_string(root),
          [&] { gloo::broadcast(o); });
    });
  }

  void barrier() override {
    const std::uint32_t tag = next_tag_++;
    blocking([this, tag] {
      gloo::BarrierOptions o(context_);
      o.setTag(tag);
      o.setTimeout(options_.timeout);
      run("barrier", [&] { gloo::barrier(o); });
    });
  }

 private:
  // Called on the comm thread only.
  void name_comm_thread() {
    if (comm_thread_named_) return;
    comm_thread_named_ = true;
    options_.trace->name_this_thread("allreduce (gloo)");
  }

  // Every rank sets its arrival key and waits for the others' (the store's
  // timeout; its watch may end a wait at a drop).
  void meet(RendezvousStore& store) const {
    const std::string prefix = options_.key_prefix + "gloo-arrived/";
    store.set(prefix + std::to_string(options_.rank), "1");
    for (int r = 0; r < options_.size; ++r) {
      if (r != options_.rank) store.get(prefix + std::to_string(r), options_.timeout);
    }
  }

  std::string where(const std::string& op) const {
    return "gloo " + op + " (rank " + std::to_string(options_.rank) + " of " + std::to_string(options_.size) + ")";
  }

  // Runs a Gloo call, turning its exceptions into TransportError naming `op`.
  template <class F>
  void run(const std::string& op, F call) const {
    try {
      call();
    } catch (const gloo::IoException& e) {
      throw TransportError(where(op) + ": " + e.what() + " (a peer failed or the " +
                           std::to_string(options_.timeout.count()) + " ms timeout passed)");
    } catch (const gloo::Exception& e) {
      throw TransportError(where(op) + ": " + e.what());
    } catch (const gloo::EnforceNotMet& e) {
      throw TransportError(where(op) + ": " + e.what());
    }
  }

  void blocking(std::function<void()> job) {
    comm_.submit(std::move(job));
    while (!comm_.wait_idle(milliseconds(1000))) {
    }
  }

  CollectiveOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::uint32_t next_tag_ = 0;
  bool comm_thread_named_ = false;  // comm thread only
  CommThread comm_;  // last: stops before the context goes
};

}  // namespace

std::unique_ptr<Collective> make_gloo_collective(const CollectiveOptions& options, RendezvousStore& store) {
  return std::make_unique<GlooCollective>(options, store);
}

}  // namespace pstrain
