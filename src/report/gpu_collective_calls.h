// NCCL operations timed on the GPU (gpu_collectives, NCCL's profiler plugin) as the calls that
// collectives are matched from (report/collectives.h): for NCCL, when a rank's kernels started
// on the GPU is when it joined, and when they ended is when the collective completed there; the
// host-side API call only enqueued it. Each is tied to its API call's comm_calls row (same
// thread, its span holding the enqueue), whose row the waits belong to and whose thread's CPU
// wait says what kept the rank late.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "report/collectives.h"

namespace eacgm {

class RecordingReader;
struct CommCallRow;

struct GpuTimedCall {
  std::string name;  // as the API: ncclAllReduce, ...
  int64_t nranks = -1;
  uint64_t comm_hash = 0;  // NCCL's, the same on every rank
  RankCall call;           // ts/end on the GPU; row_ts, tid and run_delay from its API call
};

class GpuTimedCollectives {
 public:
  // Reads the recording's gpu_collectives (collectives with a GPU time, rank and size).
  explicit GpuTimedCollectives(const RecordingReader& rec);
  // Whether `pid`'s NCCL collectives come from here instead of its comm_calls rows.
  bool covers(uint32_t pid) const { return pids_.count(pid) > 0; }
  // An NCCL call row of a covered process (comm_calls are read in time order).
  void add_call(const CommCallRow& r);
  // The operations in enqueue order, each linked to its call where one holds it (else row_ts is
  // the operation's own enqueue time, and the CPU wait unknown). Previous-call fields unset.
  std::vector<GpuTimedCall> calls() const;

 private:
  struct Span {
    uint64_t ts, end;
    int64_t run_delay;
    std::string name;
  };
  std::vector<GpuTimedCall> ops_;
  std::vector<uint64_t> enqueue_ts_;  // as ops_
  std::set<uint32_t> pids_;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<Span>> spans_;  // (pid, tid), by ts
};

}  // namespace eacgm
