// The server's side of elastic membership (docs/architecture.md, "Elastic
// membership"): the consistency policy has a slot per possible worker
// (max(cluster.workers, cluster.max_workers)); those past the job's workers
// are vacant until a worker joins one. A joiner (kWorkerJoining from the
// scheduler) is admitted from the step the scheduler announced on every
// chunk, its connection bound to its session token, and the scheduler told
// (a store set under kJoinAckPrefix) before it publishes the change.
#include <algorithm>
#include <string>

#include "server/server.h"

namespace pstrain {

int Server::worker_slots(const RegisterReply& info) const {
  return std::max(info.num_workers, options_.cluster.max_workers);
}

void Server::vacate_slots(const RegisterReply& info) {
  for (int w = info.num_workers; w < worker_slots(info); ++w) store_->vacate(w);
}

void Server::on_worker_joining(SchedulerClient& scheduler, const SchedulerClient::Joining& joining) {
  std::string answer = "ok";
  try {
    store_->join_worker(joining.rank, joining.step);
    admission_.rebind(joining.rank, joining.token);
    router_->set_members(admission_.connections());
    log_.info("worker " + std::to_string(joining.rank) + " joins the job from step " + std::to_string(joining.step) +
              " (membership change " + std::to_string(joining.change) + ")");
  } catch (const Error& e) {
    answer = e.what();
    log_.warn("could not admit joining worker " + std::to_string(joining.rank) + ": " + answer);
  }
  scheduler.store_set(std::string(kJoinAckPrefix) + std::to_string(joining.change) + "/" + std::to_string(rank_) + "/" +
                          std::to_string(joining.rank),
                      answer);
}

}  // namespace pstrain
