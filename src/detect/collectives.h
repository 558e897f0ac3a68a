// Collectives matched across ranks: every rank of a communicator issues its collectives in
// the same order, so the k-th all_reduce of each rank is one instance, and the ranks that joined
// it early waited for the last one. That wait is a straggler's doing, not the collective's.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "detect/detector.h"

namespace eacgm {
class RecordingReader;
}

namespace eacgm::detect {

// How long one rank's call waited for the last rank to join the same instance.
// Of that wait, what the last rank's own progress since the previous instance explains: a rank
// that is late only because the previous instance completed later there (its collective was
// slow), or because it waited for a CPU (CPU interference), is no straggler.
struct PeerWait {
  uint64_t wait_ns = 0;     // last rank's start minus this call's start
  uint64_t carried_ns = 0;  // the previous instance completed this much later on the last rank
  uint64_t cpu_ns = 0;      // the last rank waited this much longer for a CPU since then
  int64_t last_rank = -1;   // the rank that joined last
  uint32_t last_pid = 0;
  uint64_t straggling_ns() const { return wait_ns - carried_ns - cpu_ns; }
};

// Is `name` (as in comm_calls) an operation that every rank of the communicator joins?
// Point-to-point calls, groups and communicator set-up are not.
bool is_collective(const std::string& name);

class Collectives {
 public:
  // Reads comm_calls. A collective is matched where exactly one stream of calls per rank
  // 0..nranks-1 exists for it (one communicator of that size), the streams hold the same
  // number of calls, and, for c10d calls (whose durations run to completion), no rank finished
  // an instance before another had joined it. Otherwise it is left unmatched, and why is in
  // notes().
  explicit Collectives(const RecordingReader& rec);

  // The peer wait of the call that `pid` started at `ts_ns`; nullptr if it was not matched.
  const PeerWait* find(uint32_t pid, uint64_t ts_ns) const;

  const std::vector<std::string>& notes() const { return notes_; }
  size_t matched_instances() const { return instances_; }

  // Adds the late rank to the cause of each collective anomaly that spent a quarter or more
  // of its duration waiting for it: "...; waited 10.1 ms for rank 1 (pid 4242) to join".
  void explain(std::vector<Anomaly>& anomalies) const;

 private:
  std::map<std::pair<uint32_t, uint64_t>, PeerWait> waits_;  // (pid, ts_ns)
  std::vector<std::string> notes_;
  size_t instances_ = 0;
};

}  // namespace eacgm::detect
