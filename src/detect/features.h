// Feature extraction from a recording: one table per layer and operation (each call a sample),
// and one table of time windows across layers (host, GPU, call activity), so that different
// operations are never mixed in one model.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

namespace eacgm {
class Collectives;
class RecordingReader;
}

namespace eacgm::detect {

// Samples of one group: an operation ("cuda/cudaMemcpy") or the cross-layer windows
// ("window"). Row i of `values` is the sample that starts at ts_ns[i] and lasts dur_ns[i].
struct FeatureTable {
  std::string group;  // "cuda/cudaLaunchKernel", "comm/ncclAllReduce", "window"
  std::string layer;  // "cuda", "comm", "window"
  std::string name;   // the operation, or "window"
  std::vector<std::string> feature_names;
  std::vector<uint64_t> ts_ns, dur_ns;
  std::vector<uint32_t> pid;      // calls: the process of each row (empty for windows)
  std::vector<uint32_t> tid;      // calls: and its thread
  std::vector<int64_t> runq_ns;   // calls: the thread's wait for a CPU during it; -1: unknown
  // collectives matched across ranks: the pid of the rank that joined last (0: unmatched);
  // empty where no row was matched (find_anomalies then takes the waiting process for it)
  std::vector<uint32_t> late_pid;
  // Rows left out of training where set (1): calls already reported before any model judged
  // them (a straggler's late joins from the job's start, young_stragglers.h), which are no
  // normal to learn. Empty: none.
  std::vector<uint8_t> left_out;
  Eigen::MatrixXd values;  // rows x features
  // The window features other than durations are log(1 + rate) (the agent's windows), not
  // rates: for saying what was measured in its units (detect::Measured)
  bool log_rates = false;
};

// Per call of each (layer, name): log duration (us), net of the thread's wait for a CPU; log2
// of bytes where the operation moves data (a size unlike the usual ones is itself worth a
// look); for collectives matched across ranks (`collectives`), the duration net of the wait for
// the last rank to join, and log(1 + that wait the late rank straggled, in units of
// kStragglerWaitUnitUs: see PeerWait).
// Waits of a few microseconds are the cost of a wakeup, not a rank straggling: in units of 1 us
// their spread (0-10 us beside the usual 0.1-2 ms) widened the wait's normal so much that a
// rank 25 ms late, ten times any training wait, stayed inside it (a third of the demo's late
// steps missed in one run of three); in units of 10 us all were found.
constexpr double kStragglerWaitUnitUs = 10;
std::vector<FeatureTable> call_features(const RecordingReader& rec,
                                        const Collectives* collectives = nullptr);

// Fixed windows over the recording (whole windows only): per window, the traced processes' run-queue wait, CPU,
// involuntary switches, socket and block throughput; interface throughput; GPU utilization,
// memory, power, temperature, clocks; the GPU's idle share where the gputime layer recorded
// executions (detect::GpuIdle, as the agent's windows); call counts and mean log durations per
// layer. Features
// that never vary are dropped; a window without samples of a metric gets 0 for counts and the
// last value for levels (GPU state persists between readings).
// Host samples count over their interval, and each window gets the share it overlaps.
FeatureTable window_features(const RecordingReader& rec, uint64_t window_ns);

// The windows (index from start_ns, of window_ns) that [from_ns, to_ns) overlaps, each with
// the share of the interval in it (summing to 1; an empty interval: its window, share 1).
std::vector<std::pair<int64_t, double>> window_shares(int64_t from_ns, int64_t to_ns,
                                                     int64_t start_ns, int64_t window_ns);

}  // namespace eacgm::detect
