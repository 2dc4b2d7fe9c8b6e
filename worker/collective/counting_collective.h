// A Collective that adds the bytes of every range it is given to a node's
// TrafficCounters (collective_bytes, common/observe/traffic_counters.h) and passes
// the operation on unchanged. Gloo and NCCL talk over their own connections,
// which the transport's counters never see; this records how much data each
// rank put through them: allreduce and broadcast count num_elems * 4 bytes on
// every rank (the payload, not the algorithm's wire traffic), barriers nothing.
#pragma once

#include <memory>

#include "common/observe/traffic_counters.h"
#include "worker/collective/collective.h"

namespace pstrain {

class CountingCollective final : public Collective {
 public:
  // `traffic` must outlive this collective.
  CountingCollective(std::unique_ptr<Collective> inner, TrafficCounters& traffic)
      : inner_(std::move(inner)), traffic_(traffic) {}

  std::string name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  bool device_memory() const override { return inner_->device_memory(); }
  void start_allreduce_mean(float* data, std::size_t num_elems) override {
    inner_->start_allreduce_mean(data, num_elems);
    traffic_.add_collective(num_elems * sizeof(float));
  }
  bool wait_all(std::chrono::milliseconds timeout) override { return inner_->wait_all(timeout); }
  void broadcast(float* data, std::size_t num_elems, int root) override {
    inner_->broadcast(data, num_elems, root);
    traffic_.add_collective(num_elems * sizeof(float));
  }
  void barrier() override { inner_->barrier(); }

 private:
  std::unique_ptr<Collective> inner_;
  TrafficCounters& traffic_;
};

}  // namespace pstrain
