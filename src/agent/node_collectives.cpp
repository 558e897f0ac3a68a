// Collectives of this node's ranks matched once for all of the agent's sinks.
#include "agent/node_collectives.h"

namespace eacgm {

const std::string& NodeCollectives::job(uint32_t pid) {
  auto job = jobs_.find(pid);
  if (job == jobs_.end()) job = jobs_.emplace(pid, job_of_ ? job_of_(pid) : "").first;
  return job->second;
}

void NodeCollectives::add(const CommCallRow& r) {
  if (gpu_timed_.count(r.pid) && r.name.starts_with("nccl")) {
    auto& calls = nccl_calls_[{r.pid, r.tid}];
    calls.push_back({r.ts_ns, r.ts_ns + r.dur_ns, r.entry_run_delay_ns, r.name});
    if (calls.size() > 256) calls.pop_front();  // GPU rows come within a second of their call
    return;
  }
  matched(r.name, matchers_[job(r.pid)].add(r), r.ts_ns);
}

void NodeCollectives::add(const GpuCollectiveRow& g) {
  if (!g.has_gpu_time || g.seq < 0) return;
  gpu_timed_.insert(g.pid);
  RankCall c;
  c.rank = g.rank, c.pid = g.pid, c.tid = g.tid, c.seq = g.seq;
  c.ts = g.gpu_start_ns, c.end = g.gpu_start_ns + g.gpu_dur_ns;
  c.row_ts = g.ts_ns, c.on_gpu = true;
  // its API call: the thread's last NCCL call that started by the enqueue, if it held it and
  // is this collective (as offline: an operation a group's end enqueued names no call)
  if (auto it = nccl_calls_.find({g.pid, g.tid}); it != nccl_calls_.end())
    for (auto s = it->second.rbegin(); s != it->second.rend(); ++s)
      if (s->ts <= g.ts_ns) {
        if (g.ts_ns <= s->end && s->name == g.name) c.row_ts = s->ts, c.run_delay = s->run_delay;
        break;
      }
  std::string name(g.name);
  matched(name, matchers_[job(g.pid)].add(name, g.nranks, g.comm_hash, g.comm_hash, c), g.ts_ns);
}

void NodeCollectives::add(const ProcessExitRow& r) {
  jobs_.erase(r.pid);
  gpu_timed_.erase(r.pid);
  std::erase_if(nccl_calls_, [&](const auto& kv) { return kv.first.first == r.pid; });
}

void NodeCollectives::matched(std::string_view op,
                              const std::vector<CollectiveMatcher::Instance>& done,
                              uint64_t now_ns) {
  for (const auto& inst : done) {
    for (auto& l : listeners_) l(op, inst);
    // the detector judges by every rank's calls only: a job across nodes is named by the fleet
    // rules or by `eacgm merge` + detect
    for (size_t i = 0; i < inst.calls.size() && inst.all_ranks; ++i) {
      std::pair<uint32_t, uint64_t> key{inst.calls[i].pid, inst.calls[i].row_ts};
      if (peer_waits_.insert_or_assign(key, inst.waits[i]).second) order_.push_back(key);
      if (!inst.calls[i].on_gpu) continue;
      key.second = inst.calls[i].ts;
      if (gpu_waits_.insert_or_assign(key, inst.waits[i]).second) gpu_order_.push_back(key);
    }
  }
  while (!gpu_order_.empty() && gpu_order_.front().second + 60'000'000'000ull < now_ns) {
    gpu_waits_.erase(gpu_order_.front());
    gpu_order_.pop_front();
  }
  // a minute of calls is kept: a reported anomaly is at most a burst window old
  while (!order_.empty() && order_.front().second + 60'000'000'000ull < now_ns) {
    peer_waits_.erase(order_.front());
    order_.pop_front();
  }
}

const PeerWait* NodeCollectives::find_on_gpu(uint32_t pid, uint64_t gpu_start_ns) const {
  auto it = gpu_waits_.find({pid, gpu_start_ns});
  return it == gpu_waits_.end() ? nullptr : &it->second;
}

const PeerWait* NodeCollectives::find(uint32_t pid, uint64_t ts_ns) const {
  auto it = peer_waits_.find({pid, ts_ns});
  return it == peer_waits_.end() ? nullptr : &it->second;
}

}  // namespace eacgm
