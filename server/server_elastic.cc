// The server's side of elastic membership (docs/architecture.md, "Elastic
// membership"): the consistency policy has a slot per possible worker
// (max(cluster.workers, cluster.max_workers)); those past the job's workers
// are vacant until a worker joins one. A joiner (kWorkerJoining from the
// scheduler) is admitted from the step the scheduler announced on every
// chunk, its connection bound to its session token, and the scheduler told
// (a store set under kJoinAckPrefix) before it publishes the change. A
// resumed elastic job's slots are those of its checkpoint's members.
#include <algorithm>
#include <string>

#include "common/checkpoint/checkpoint_members.h"
#include "server/server.h"

namespace pstrain {

int Server::worker_slots(const RegisterReply& info) const {
  return std::max(info.num_workers, options_.cluster.max_workers);
}

void Server::vacate_slots(const RegisterReply& info) {
  // A fresh start: workers 0..num_workers-1. A resume (not a rejoin, which
  // follows the running job): the checkpoint's members (issue 29; a fixed-size
  // job's or a checkpoint without a record: 0..num_workers-1 again).
  std::vector<int> members;
  if (!options_.resume_dir.empty() && !options_.rejoin) {
    members = resume_members(read_checkpoint_manifest(options_.resume_dir), options_.cluster);
  } else {
    for (int w = 0; w < info.num_workers; ++w) members.push_back(w);
  }
  for (int w = 0; w < worker_slots(info); ++w) {
    if (!std::binary_search(members.begin(), members.end(), w)) store_->vacate(w);
  }
  if (members.back() + 1 != static_cast<int>(members.size()) || static_cast<int>(members.size()) != info.num_workers) {
    std::string ranks;
    for (const int w : members) ranks += (ranks.empty() ? "" : ",") + std::to_string(w);
    log_.info("resumed with the checkpoint's workers " + ranks + " (the other slots are vacant)");
  }
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
