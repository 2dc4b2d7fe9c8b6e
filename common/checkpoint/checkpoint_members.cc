#include "common/checkpoint/checkpoint_members.h"

#include <algorithm>
#include <set>

namespace pstrain {
namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (const int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

std::vector<int> first_workers(int n) {
  std::vector<int> ranks;
  for (int w = 0; w < n; ++w) ranks.push_back(w);
  return ranks;
}

}  // namespace

std::vector<int> resume_members(const CheckpointManifest& m, const ClusterConfig& cluster) {
  if (!is_elastic(cluster) || m.members.empty()) return first_workers(cluster.num_workers);
  const std::string what = "step " + std::to_string(m.step) + "'s membership record (" + ranks_text(m.members) + ")";
  for (std::size_t i = 1; i < m.members.size(); ++i) {
    if (m.members[i] <= m.members[i - 1]) {
      throw CheckpointError(what + " is incomplete: its ranks are not ascending and distinct; cannot tell which "
                            "workers to resume");
    }
  }
  std::set<std::string> parts;
  for (const CheckpointPartInfo& p : m.parts) parts.insert(p.name);
  for (const int r : m.members) {
    if (!parts.count("worker-" + std::to_string(r) + ".ckpt")) {
      throw CheckpointError(what + " is incomplete: member " + std::to_string(r) +
                            " has no worker part in the manifest; cannot resume its progress");
    }
  }
  const int slots = std::max(cluster.num_workers, max_workers(cluster));
  if (m.members.back() >= slots) {
    throw CheckpointError(what + " has worker " + std::to_string(m.members.back()) + ", past the job's " +
                          std::to_string(slots) + " worker slots (cluster.max_workers = " +
                          std::to_string(max_workers(cluster)) + "); resume with cluster.max_workers >= " +
                          std::to_string(m.members.back() + 1) + " (--set cluster.max_workers=" +
                          std::to_string(m.members.back() + 1) + ")");
  }
  if (static_cast<int>(m.members.size()) < min_workers(cluster)) {
    throw CheckpointError(what + " has " + std::to_string(m.members.size()) + " workers, below cluster.min_workers = " +
                          std::to_string(min_workers(cluster)) + "; resume with a lower cluster.min_workers");
  }
  return m.members;
}

std::int64_t history_changes(const std::vector<std::int64_t>& v) {
  std::int64_t changes = 0;
  std::size_t i = 0;
  while (i < v.size()) {
    std::size_t at = i + 1;  // past the epoch
    if (at < v.size() && v[at] < 0) ++at, ++changes;  // a later segment's -from_step
    if (at >= v.size() || v[at] < 1 || v[at] > static_cast<std::int64_t>(v.size() - at - 1)) {
      throw CheckpointError("epoch_members: the segment at position " + std::to_string(i) +
                            " is not [epoch, (-from_step,) count, ranks...]");
    }
    i = at + 1 + static_cast<std::size_t>(v[at]);
  }
  return changes;
}

}  // namespace pstrain
