// Collectives of this node's ranks matched once for all of the agent's sinks.
#include "agent/node_collectives.h"

namespace eacgm {

void NodeCollectives::add(const CommCallRow& r) {
  auto job = jobs_.find(r.pid);
  if (job == jobs_.end()) job = jobs_.emplace(r.pid, job_of_ ? job_of_(r.pid) : "").first;
  for (const auto& inst : matchers_[job->second].add(r)) {
    for (auto& l : listeners_) l(r.name, inst);
    // the detector judges by every rank's calls only: a job across nodes is named by the fleet
    // rules or by `eacgm merge` + detect
    for (size_t i = 0; i < inst.calls.size() && inst.all_ranks; ++i) {
      std::pair<uint32_t, uint64_t> key{inst.calls[i].pid, inst.calls[i].ts};
      if (peer_waits_.insert_or_assign(key, inst.waits[i]).second) order_.push_back(key);
    }
  }
  // a minute of calls is kept: a reported anomaly is at most a burst window old
  while (!order_.empty() && order_.front().second + 60'000'000'000ull < r.ts_ns) {
    peer_waits_.erase(order_.front());
    order_.pop_front();
  }
}

const PeerWait* NodeCollectives::find(uint32_t pid, uint64_t ts_ns) const {
  auto it = peer_waits_.find({pid, ts_ns});
  return it == peer_waits_.end() ? nullptr : &it->second;
}

}  // namespace eacgm
