// Collectives matched across ranks: every rank of a communicator issues its collectives in
// the same order, so the k-th all_reduce of each rank is one instance, and the ranks that joined
// it early waited for the last one. That wait is a straggler's doing, not the collective's.
#pragma once
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "store/rows.h"  // is_collective

namespace eacgm {

class RecordingReader;
struct CommCallRow;

// How long one rank's call waited for the last rank to join the same instance, and how much of
// that the last rank's own progress since the previous collective explains: a rank late only
// because the previous collective completed later there (its collective was slow), or because
// it waited for a CPU (CPU interference), is no straggler.
struct PeerWait {
  uint64_t wait_ns = 0;     // last rank's start minus this call's start
  uint64_t carried_ns = 0;  // the previous collective completed this much later on the last rank
  uint64_t cpu_ns = 0;      // the last rank waited this much longer for a CPU since then
  int64_t last_rank = -1;   // the rank that joined last
  uint32_t last_pid = 0;
  bool on_gpu = false;  // measured on the GPU (NCCL's kernels): not part of the call's duration
  uint64_t straggling_ns() const { return wait_ns - carried_ns - cpu_ns; }
};

// One rank's call of a collective, with the process's previous collective on the same
// communicator (of any kind: every rank issues them in the same order), the last point where
// the ranks were in step.
struct RankCall {
  int64_t rank = -1;
  uint32_t pid = 0;
  uint64_t ts = 0, end = 0;
  int64_t tid = -1, run_delay = -1;  // the thread's whole wait for a CPU at entry; -1: unknown
  int64_t seq = -1;  // c10d, NCCL on the GPU: its sequence number, the same on every rank; -1: unknown
  uint64_t row_ts = 0;  // the comm_calls row it belongs to (its ts_ns): ts, but for GPU times
  bool on_gpu = false;  // ts and end are when NCCL's kernels ran on the GPU (gpu_collectives)
  bool has_prev = false;
  uint64_t prev_end = 0;
  int64_t prev_tid = -1, prev_run_delay = -1;
};

// The peer wait of each call of one instance (one call per rank, in any order), as detect and
// the agent both judge it: the wait for the rank that joined last, less what that rank's
// previous collective (completing later there) and its wait for a CPU since explain.
std::vector<PeerWait> instance_waits(const std::vector<const RankCall*>& calls);

// Collectives matched as their calls arrive (the agent: the ranks on one node), instance by
// instance as Collectives does for a recording: the k-th call of each rank of a communicator is
// one instance. A job across nodes is matched among the ranks seen here (two or more): its
// instances say so (all_ranks false), and their last rank is the last of this node's.
// Bounded: a rank whose peers stopped keeps its last 1,000 calls.
class CollectiveMatcher {
 public:
  struct Instance {
    std::vector<RankCall> calls;  // one per rank
    std::vector<PeerWait> waits;  // as calls
    bool all_ranks = false;       // every rank of the communicator is here
  };
  // Adds a call (collectives of a known rank and size only: others are ignored) and returns the
  // instances it completed.
  std::vector<Instance> add(const CommCallRow& r);
  // The same for a call given as a RankCall (NCCL's times on the GPU: ts/end there, row_ts its
  // API call's), of collective `name` on communicator `comm` (its identity `comm_id`).
  std::vector<Instance> add(const std::string& name, int64_t nranks, uint64_t comm,
                            uint64_t comm_id, RankCall c);

 private:
  // (name, nranks, communicator identity) -> rank -> calls not yet matched
  std::map<std::tuple<std::string, int64_t, uint64_t>, std::map<int64_t, std::deque<RankCall>>>
      pending_;
  std::map<std::pair<uint32_t, uint64_t>, RankCall> previous_;  // (pid, communicator)
  // communicators known to have ranks elsewhere (see add)
  std::set<std::tuple<std::string, int64_t, uint64_t>> partial_;
};

// One instance: what its earliest rank waited, and what the last rank straggled.
struct CollectiveInstance {
  uint64_t ts_ns = 0;  // the earliest rank's start
  uint64_t wait_ns = 0, straggling_ns = 0;
  int64_t last_rank = -1;
  uint32_t last_pid = 0;
};

// One rank's side of a collective's matched instances.
struct RankWaits {
  int64_t rank = -1;
  uint32_t pid = 0;
  size_t calls = 0;
  uint64_t waited_ns = 0;    // its calls' waits for the last rank to join
  size_t joined_last = 0;    // instances it joined last
  uint64_t straggled_ns = 0;  // in those: the longest wait its lateness caused, net of what its
                              // previous collective and CPU wait explain
  std::vector<uint64_t> waits_ns;  // its wait in each matched instance, in order (as instances())
};

// (is_collective: store/rows.h, beside the comm_calls row)
class Collectives {
 public:
  // Reads comm_calls, and for the processes with NCCL operations timed on the GPU
  // (gpu_collectives) those instead of their NCCL calls: each rank joins when its kernels
  // started on the GPU and leaves when they ended, and its waits belong to its API call's row
  // (find()). A collective is matched where exactly one stream of calls per rank
  // 0..nranks-1 exists for it (one communicator of that size), the streams hold the same
  // number of calls, and, for c10d calls (whose durations run to completion), no rank finished
  // an instance before another had joined it. Otherwise it is left unmatched, and why is in
  // notes().
  explicit Collectives(const RecordingReader& rec);

  // The peer wait of the call that `pid` started at `ts_ns`; nullptr if it was not matched.
  const PeerWait* find(uint32_t pid, uint64_t ts_ns) const;
  // The same for an NCCL operation timed on the GPU, by when its kernels started there
  // (gpu_collectives.gpu_start_ns).
  const PeerWait* find_on_gpu(uint32_t pid, uint64_t gpu_start_ns) const;

  const std::vector<std::string>& notes() const { return notes_; }
  // " on host NAME" for a process of a merged recording (eacgm merge), else "".
  std::string on_host(uint32_t pid) const;
  size_t matched_instances() const;
  // per (collective name, number of ranks), in time order
  const std::map<std::pair<std::string, int64_t>, std::vector<CollectiveInstance>>& instances()
      const {
    return instances_;
  }
  // per (collective name, number of ranks), each rank's side, by rank
  const std::map<std::pair<std::string, int64_t>, std::vector<RankWaits>>& rank_waits() const {
    return rank_waits_;
  }

 private:
  std::map<std::pair<uint32_t, uint64_t>, PeerWait> waits_;  // (pid, ts_ns)
  std::map<std::pair<uint32_t, uint64_t>, PeerWait> waits_on_gpu_;  // (pid, GPU start)
  std::map<std::pair<std::string, int64_t>, std::vector<CollectiveInstance>> instances_;
  std::map<std::pair<std::string, int64_t>, std::vector<RankWaits>> rank_waits_;
  std::vector<std::string> notes_;
  std::map<uint32_t, std::string> hosts_;  // pid -> host, in merged recordings
};

// What report shows of one collective's instances: the longest wait per instance (p50, p99,
// max), and the instances whose last rank straggled at least `min_straggling_ns`.
struct CollectiveSummary {
  uint64_t wait_p50_ns = 0, wait_p99_ns = 0, wait_max_ns = 0;
  std::vector<const CollectiveInstance*> straggled;
};
CollectiveSummary summarize(const std::vector<CollectiveInstance>& instances,
                            uint64_t min_straggling_ns = 1'000'000);

// Per collective, each rank's calls, total and mean wait, and the instances it joined last
// (all ranks up to 16; beyond, the 16 whose lateness cost most).
void print_rank_waits(const Collectives& c, FILE* out);

// `eacgm report`'s section: per collective, its instances, the longest wait per instance
// (p50, p99, max) and the instances a rank straggled at least `min_straggling_ns`, by rank.
void print_collectives(const Collectives& c, FILE* out, uint64_t min_straggling_ns = 1'000'000);

}  // namespace eacgm
