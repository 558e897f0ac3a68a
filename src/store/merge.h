// `eacgm merge`: recordings of one distributed job, made on several hosts, as one recording.
// Processes keep their pids where no two hosts share one (else a host's pids are renumbered,
// and processes.host_pid keeps the original); processes.host names each one's host. Each
// host's CLOCK_MONOTONIC is mapped onto the first recording's: first by the recordings' wall
// clock offsets, then refined on the collectives every rank completes together.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace eacgm {

// One process's calls of one collective (by name and communicator size), in call order, with
// the time each completed on the reference clock as the wall-clock offsets put it.
struct CollectiveStream {
  size_t input = 0;  // the recording it came from
  std::string name;
  int64_t rank = -1, nranks = -1;
  std::vector<int64_t> ends_ns;
};

// What refining moved an input's clock by, on top of the wall-clock offset.
struct ClockFix {
  int64_t offset_ns = 0;     // add to the input's times (after the wall-clock offset)
  size_t instances = 0;      // collective instances it was measured on; 0: not refined
  int64_t residual_ns = -1;  // median distance of its ranks' completions from the others' after
};

// Lines each input's collective completions up with the inputs already placed (the first
// input is the reference): the k-th call of a collective on every rank of its communicator is
// one instance, and all ranks complete it within the network's latency of one another. The
// correction of an input is the median of its completions' distances from the placed inputs'
// (robust to a straggler, which joins late but completes with the others). Groups that do not
// have exactly one stream per rank 0..nranks-1, all of one length, are left out (as report's
// matching does). Inputs that share no instance with a placed input get no correction.
std::vector<ClockFix> refine_clocks(const std::vector<CollectiveStream>& streams, size_t inputs);

struct MergeOptions {
  bool force = false;    // replace an existing output (a regular file only)
  bool any_job = false;  // merge recordings whose job ids differ
};

struct MergedHost {
  std::string file, host;
  size_t processes = 0;
  std::vector<int64_t> ranks;
  int64_t pid_base = 0;        // added to its pids (0: kept)
  int64_t wall_offset_ns = 0;  // from the recordings' wall clocks
  ClockFix fix;                // refined on collectives
  std::string job;             // its job id, "" if none was seen
};

struct MergeResult {
  std::vector<MergedHost> hosts;
  uint64_t rows = 0;
  std::vector<std::string> notes;  // what the user should know (unrefined clocks, ...)
};

// Throws eacgm::Error (or UsageError) naming the problem: fewer than two inputs, an input that
// is not a recording, an output that exists (without force, or not a regular file), recordings
// of different jobs (without any_job). The output is written beside its final name and renamed
// into place only when complete.
MergeResult merge_recordings(const std::vector<std::string>& inputs, const std::string& output,
                             const MergeOptions& options);

}  // namespace eacgm
