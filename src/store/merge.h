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
  std::vector<int64_t> starts_ns;  // when each call began (same clock); empty if unknown
};

// What refining moved an input's clock by, on top of the wall-clock offset.
struct ClockFix {
  int64_t offset_ns = 0;     // add to the input's times (after the wall-clock offset)
  size_t instances = 0;      // collective instances it was measured on; 0: not refined
  int64_t residual_ns = -1;  // median distance of its ranks' completions from the others' after
  int64_t bound_ns = -1;     // the true offset is within +-bound_ns of offset_ns (causality);
                             // -1: no bound (no call starts, or they contradict the matching)
};

// Lines each input's collectives up with the inputs already placed (the first input is the
// reference): the k-th call of a collective on every rank of its communicator is one instance.
// No rank can complete an instance before every rank has begun it (it needs their data), so
// each instance bounds the offset o of an input against the placed ones:
//   max(placed starts) - min(its ends) <= o <= min(placed ends) - max(its starts).
// Where the instances' bounds agree, the correction is the middle of their intersection (as
// NTP takes the middle of a round trip; the 0.5% tightest on each side are set aside against
// a stray timestamp), and bound_ns is its half width. Completions alone are a poorer guide:
// on a busy host, ranks leave a collective up to a scheduling slice apart, and their median
// distance can sit between two modes. Where the bounds contradict (no starts, or instances
// that were not the same collective) the median distance of the completions is used.
// Groups that do not have exactly one stream per rank 0..nranks-1, all of one length, are left
// out (as report's matching does). Inputs that share no instance with a placed input get no
// correction.
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
