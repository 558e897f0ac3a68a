// GPU time (the gputime layer's rows) as the detector sees it, one implementation for `detect`
// and the agent: which executions are modelled per kernel name and on which "thread", and each
// process's GPU idle share per window (a window feature).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/rows.h"

namespace eacgm::detect {

// A kernel's execution is a call of layer "gpu" named by the kernel (a slow kernel: throttling,
// contention for the GPU); copies, memsets and launch records are not modelled.
inline bool modelled_kernel(const GpuActivityRow& r) { return r.kind == "kernel"; }

// An execution's stream as its "thread": work on one stream never overlaps, so no kernel is taken
// for one nested in another; no real thread has such an id (Linux tids stay below 2^22).
inline uint32_t stream_thread(const GpuActivityRow& r) {
  return 0x40000000u + r.device * 65536u + (r.stream & 0xffffu);
}

// An NCCL collective's time on the GPU (NCCL's profiler plugin) is a call of its own, of layer
// "comm", named "<API name> on the GPU" (a slow collective there: the network, a link, the
// GPU; not the host's enqueue, which its API call's row times): from its kernels' start to
// their end, net of its wait there for the last rank to join (which the straggler rule judges,
// from its API call's row). Sends, receives and operations without a GPU time are not modelled.
inline bool modelled_collective(const GpuCollectiveRow& r) { return r.has_gpu_time && r.seq >= 0; }
inline std::string gpu_collective_name(std::string_view api) {
  return std::string(api) + " on the GPU";
}
// A communicator as the operations' "thread" (one communicator's run one after another); above
// the streams' ids (stream_thread).
inline uint32_t communicator_thread(const GpuCollectiveRow& r) {
  return 0x50000000u | (uint32_t(r.comm_hash ^ (r.comm_hash >> 32)) & 0x0fffffffu);
}
// Its time on the GPU net of `wait_ns` (the wait for the last rank), at least 1 ns.
inline uint64_t own_gpu_time(const GpuCollectiveRow& r, uint64_t wait_ns) {
  return r.gpu_dur_ns > wait_ns ? r.gpu_dur_ns - wait_ns : 1;
}

// Whether a row is GPU work that makes the GPU busy (kernels, copies, memsets; not launches,
// which are the host's API calls).
inline bool gpu_execution(const GpuActivityRow& r) { return r.kind != "launch"; }

// Per process, the share of each window (index from start_ns, of window_ns) in which none of its
// executions ran on the GPU: 1 - the union of their spans in the window / the window's length,
// on any of its devices. Only over the process's GPU span: from its first execution's start
// (its first window counts from there, not from the window's start: a job starting mid-window
// is not idle before it began), to the end of its last execution once its rows are all in
// (ended(): at its exit, or the recording's end), so its last window counts only up to there.
// While rows may still come (the agent: CUPTI hands over buffers when they fill), a window is
// known only once an execution of the process that ends at or after the window's end came: a
// window without executions before that one is idle 100%.
// A duty-cycled process (its GpuSliceRows: EACGM_GPUTIME_DUTY) counts only over what was
// collected: a window's share is 1 - its executions inside the slices / the slices' time in
// it, and a window no slice covers has none (not collected is not idle). Its windows are known
// up to its last slice's end, and up to the next slice once one says when that is due.
class GpuIdle {
 public:
  GpuIdle(int64_t start_ns, uint64_t window_ns);

  void add(uint32_t pid, uint64_t ts_ns, uint64_t dur_ns);
  // A slice in which `pid`'s GPU time was collected; next_ns: when the next one is due (0:
  // unknown or none).
  void collected(uint32_t pid, uint64_t ts_ns, uint64_t dur_ns, uint64_t next_ns);
  // No more rows of `pid` will come.
  void ended(uint32_t pid);

  // The idle share of window `w` for `pid` (0-1), nullopt where the window is outside its GPU
  // span or not known yet.
  std::optional<double> idle_share(uint32_t pid, int64_t w);
  // The mean idle share of window `w` over the processes where it is known.
  std::optional<double> mean_idle_share(int64_t w);
  // Whether `pid` has GPU time and rows of it may still come; then the last window index
  // known (its latest execution's end), to hold later windows for.
  std::optional<int64_t> known_until(uint32_t pid) const;
  std::vector<uint32_t> pids() const;
  // The windows with a known share of any process: [first, last], or nullopt.
  std::optional<std::pair<int64_t, int64_t>> window_range() const;
  // Drops the spans of windows before `w` (handed out), and the processes that ended before it.
  void forget_before(int64_t w);

 private:
  struct Process {
    int64_t first_ns = INT64_MAX, last_end_ns = INT64_MIN;
    bool ended = false;
    // per window, spans clipped to it (merged when the list grows: busy stretches only)
    std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> spans;
    // duty-cycled: the slices collected (by start), and until when nothing more will come
    std::vector<std::pair<int64_t, int64_t>> slices;
    int64_t known_ns = INT64_MIN;
    // what its rows say of the GPU up to (executions' ends; a duty-cycled one's slices too)
    int64_t known_to() const { return std::max(last_end_ns, known_ns); }
  };
  // The part of [from, to) in the process's slices, and the busy `spans` (merged) inside it.
  static std::pair<int64_t, int64_t> collected_in(const Process& p, int64_t from, int64_t to,
                                                  const std::vector<std::pair<int64_t, int64_t>>* spans);
  int64_t window_of(int64_t ts) const;
  static int64_t merge(
      std::vector<std::pair<int64_t, int64_t>>& spans);  // returns the union's length

  int64_t start_ns_;
  int64_t window_ns_;
  std::map<uint32_t, Process> processes_;
};

}  // namespace eacgm::detect
