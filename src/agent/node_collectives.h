// The collectives of this node's ranks, matched once, instance by instance as their calls end
// (report/collectives.h's CollectiveMatcher, one per job: two jobs' communicators never mix),
// for every sink of the agent that counts or judges them: the metrics count each instance's
// waits (a listener), the detector names the straggler in the anomalies of matched calls
// (find()). A sink in the agent's fanout, before those that use it.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/sink.h"
#include "report/collectives.h"

namespace eacgm {

class NodeCollectives final : public Sink {
 public:
  using Listener = std::function<void(std::string_view op, const CollectiveMatcher::Instance&)>;
  // `job_of` names a process's job ("" when its launcher did not say).
  explicit NodeCollectives(std::function<std::string(uint32_t pid)> job_of)
      : job_of_(std::move(job_of)) {}
  // Called with every instance matched, on the pipeline's thread.
  void on_instance(Listener l) { listeners_.push_back(std::move(l)); }

  // NCCL calls of a process whose NCCL operations come with their GPU times (the gputime
  // layer's NCCL plugin) are matched by those instead: each rank joins when its kernels started
  // on the GPU (report/gpu_collective_calls.h); the call row only names them.
  void add(const CommCallRow& r) override;
  void add(const GpuCollectiveRow& r) override;
  void add(const ProcessExitRow& r) override;

  // The peer wait of the call that `pid` started at `ts_ns`, if its instance was matched among
  // every rank of its communicator in the last minute of calls; nullptr otherwise.
  const PeerWait* find(uint32_t pid, uint64_t ts_ns) const;
  // The same for an NCCL operation timed on the GPU, by when its kernels started there.
  const PeerWait* find_on_gpu(uint32_t pid, uint64_t gpu_start_ns) const;
  // Whether `pid`'s NCCL operations come with their GPU times (its ranks known from them, even
  // where the agent did not see its communicators created).
  bool gpu_timed(uint32_t pid) const { return gpu_timed_.count(pid) > 0; }

 private:
  void matched(std::string_view op, const std::vector<CollectiveMatcher::Instance>& done,
               uint64_t now_ns);
  const std::string& job(uint32_t pid);
  struct CallSpan {
    uint64_t ts, end;
    int64_t run_delay;
    std::string_view name;  // the decoder's (it outlives the rows)
  };
  std::function<std::string(uint32_t)> job_of_;
  std::set<uint32_t> gpu_timed_;  // processes whose NCCL operations come with GPU times
  std::map<std::pair<uint32_t, uint32_t>, std::deque<CallSpan>> nccl_calls_;  // their last calls
  std::vector<Listener> listeners_;
  std::map<uint32_t, std::string> jobs_;               // pid -> job, for the live processes
  std::map<std::string, CollectiveMatcher> matchers_;  // by job
  std::map<std::pair<uint32_t, uint64_t>, PeerWait> peer_waits_;  // (pid, start)
  std::deque<std::pair<uint32_t, uint64_t>> order_;  // as they came, to forget them
  std::map<std::pair<uint32_t, uint64_t>, PeerWait> gpu_waits_;  // (pid, GPU start), likewise
  std::deque<std::pair<uint32_t, uint64_t>> gpu_order_;
};

}  // namespace eacgm
