// The agent's window features: what `eacgm detect` computes per window from a recording
// (detect::window_features), accumulated as rows arrive, over the traced processes (those that
// made traced calls) of one job: the agent keeps one per job (DetectionSink). Windows are
// aligned to multiples of their length on CLOCK_MONOTONIC and handed out once complete. Unlike
// detect's, every rate and level is log(1 + x) (the names stay detect's, so that causes are
// named the same way): see take_complete().
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "detect/features.h"
#include "detect/gpu_time.h"
#include "gpu/gpu_samples.h"
#include "store/rows.h"

namespace eacgm {

// When the duty-cycled calls were traced (the agent's --call-duty: the torch layer's and the cuda
// layer's hot probes on for ON of every PERIOD): how much of a window their probes covered.
// Until the first pause, always: a window is all covered.
class CallDutyTimeline {
 public:
  // The probes went on (`on`) or off at `ts_ns` (CLOCK_MONOTONIC), in time order.
  void set(bool on, uint64_t ts_ns);
  bool cycled() const { return cycled_; }
  // The share of [from_ns, to_ns) the probes were on, 0 to 1.
  double on_share(uint64_t from_ns, uint64_t to_ns) const;

 private:
  bool cycled_ = false, on_ = true;
  uint64_t on_since_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> spans_;  // the recent closed spans on, in order
};

class OnlineWindows {
 public:
  // `lag_ns`: how long after a window's end its last samples may still arrive (the sampling
  // interval and the loop's latency).
  OnlineWindows(uint64_t window_ns, uint64_t lag_ns);

  // Every window has these features, in this order (detect's names, so that causes map the
  // same way; a feature that never varies costs nothing).
  static const std::vector<std::string>& feature_names();

  // A call of a traced process; `layer` is cuda, comm, torch or python. Its duration counts net
  // of `runq_ns`, the thread's wait for a CPU during it (-1: unknown), as in detect's call
  // features: a CPU hog is the run-queue features' to show, not the calls'.
  void add_call(const char* layer, uint32_t pid, uint64_t ts_ns, uint64_t dur_ns,
                int64_t runq_ns = -1);
  void add(const HostSampleRow& r);
  void add(const GpuSample& r);
  // An execution of the gputime layer (kernel, copy, memset): the GPU's idle share of its
  // process's windows (detect::GpuIdle, as detect's).
  void add(const GpuActivityRow& r);
  void add(const GpuSliceRow& r);  // a duty-cycled process's GPU time collected
  void exited(uint32_t pid, uint64_t ts_ns);
  // The agent itself was busy from `from_ns` to `to_ns` (writing a flight recording: on a small
  // node that takes CPUs from the jobs): the windows it overlaps count as changes, neither
  // judged nor learnt, so that the agent never reports its own interference as the jobs'.
  void quiet(uint64_t from_ns, uint64_t to_ns);
  // The duty-cycled calls' timeline (it outlives the windows). A window the cuda and torch
  // probes covered half or more of counts their calls as made at that rate all along; one
  // covered less keeps the last such window's rates and durations (as NVML's levels are kept
  // between readings), so that an off phase is neither a lull nor a change. Until a job had
  // one covered window, its windows are neither judged nor learnt.
  void use_duty(const CallDutyTimeline* duty) { duty_ = duty; }

  // The windows complete at `now_ns` that can be judged: at least one traced process, and no
  // traced process started or ended in them or in the two before (a job starting or ending is a
  // change of regime, not an anomaly of its resources). A process counts from its third window
  // on (see established()): short-lived tools count neither as change nor as load. Rows in
  // time order.
  //
  // A lull (the traced processes made fewer than a tenth of the calls of recent windows, or
  // none) is held back, up to `kHoldNs`: a job tearing down (its ranks finalise and flush for
  // seconds after their last step, calling nothing) ends in an exit, and then its lull is
  // dropped with the exit's windows, never judged; a pause the job returns from (a checkpoint
  // write) is judged once calls resume, as before; a lull that lasts while the processes live
  // (a stalled job) is judged once it is kHoldNs old. Only lulls wait: a CPU hog that halves
  // the calls is judged at once.
  //
  // A job with GPU time waits for its GPU's rows too (CUPTI hands them over as its buffers
  // fill): a window is complete once each of its processes with GPU time had an execution end
  // after it, or it ended, or kHoldNs after the window; a window whose GPU share is still not
  // known then keeps the last known share (missing rows are no idle GPU).
  detect::FeatureTable take_complete(uint64_t now_ns);
  static constexpr uint64_t kHoldNs = 10'000'000'000;

  size_t traced_processes() const { return traced_.size(); }
  std::vector<uint32_t> pids() const;  // the traced processes', in order
  uint64_t window_ns() const { return window_ns_; }

 private:
  static constexpr size_t kFeatures = 27;
  struct Window {
    std::array<double, kFeatures> sum{};
    std::array<uint32_t, kFeatures> n{};
    bool changed = false;
  };
  Window& at(uint64_t ts_ns);
  bool established(uint32_t pid, uint64_t ts_ns);
  static constexpr uint64_t kEstablish = 3;  // windows a process must have run to count
  void add_value(Window& w, size_t f, double v) { w.sum[f] += v, w.n[f] += 1; }

  uint64_t window_ns_, lag_ns_;
  std::map<uint64_t, Window> windows_;  // by index (ts / window_ns), open ones
  struct Traced {
    uint64_t first_window;
    bool counted;  // its rows count (it is established)
  };
  std::map<uint32_t, Traced> traced_;
  std::set<uint64_t> changes_;  // recent windows in which a traced process started or ended
  struct Held {
    uint64_t index;
    std::array<double, kFeatures> x;
  };
  std::vector<Held> held_;  // lulls waiting for an exit, calls resuming or kHoldNs (in order)
  double calls_mean_ = 0;   // calls per window in recent judged windows (a moving mean)
  uint64_t next_ = 0;           // the first window not handed out
  std::array<double, kFeatures> gpu_last_{};  // GPU levels persist between readings
  detect::GpuIdle gpu_idle_;
  double gpu_idle_last_ = 0;  // percent: the last window's known share
  const CallDutyTimeline* duty_ = nullptr;
  struct DutyLast {
    double rate = 0, log_duration = 0, calls = 0;
  };
  std::array<DutyLast, 4> duty_last_{};  // per layer, of the last covered window
  bool duty_known_ = false;              // (a covered window was seen)
};

}  // namespace eacgm
