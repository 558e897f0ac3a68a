// The metrics sink: decoded calls and samples as Prometheus metrics (prometheus-cpp's registry
// and text format), for the agent's /metrics. Names follow Prometheus conventions; GPU gauges
// carry DCGM-exporter's names and labels so that existing dashboards keep working.
#pragma once
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "store/sink.h"
#include "probe/job_identity.h"
#include "report/collectives.h"

namespace eacgm {

// What the agent says about itself, set by its loop.
struct AgentStats {
  uint64_t events = 0, dropped = 0, probes = 0, processes = 0;
  double cpu_seconds = 0;
  uint64_t rss_bytes = 0;
};

// One model of the online detector, as /metrics shows it.
struct ModelState {
  std::string layer, name;  // "window", "window" for the window models (the job nearest its threshold)
  double last_score, threshold;
};

class MetricsSink final : public Sink {
 public:
  explicit MetricsSink(std::string hostname);

  void add(const CudaCallRow& r) override;
  void add(const CommCallRow& r) override;
  void add(const TorchCallRow& r) override;
  void add(const PythonCallRow& r) override;
  void add(const ProcessRow& r) override;
  void add(const ProcessExitRow& r) override;
  void add(const HostSampleRow& r) override;
  void add(const GpuDevice& r) override;
  void add(const GpuSample& r) override;
  void add(const GpuXidEvent& r) override;
  void add(const GpuActivityRow& r) override;
  void add(const GpuCollectiveRow& r) override;

  // Where a traced process's job identity comes from (the agent: /proc/PID); asked once per
  // process, at its first call. Without it, the job labels stay empty.
  std::function<JobIdentity(uint32_t pid)> identify;
  // The job a process belongs to, as its labels say ("" when its launcher did not say).
  std::string job_of(uint32_t pid);
  // One collective instance of the ranks on this node (the agent's NodeCollectives matches
  // them): each rank's wait for the last one, and that one's join and straggling.
  void add_instance(std::string_view op, const CollectiveMatcher::Instance& inst);

  // --gpu-kernel-names K: the GPU kernel counters get a `kernel` label (short_kernel_name()),
  // at most K names and "other" per set of process labels. Each set counts its kernels under
  // "other" for their first CHOOSE_AFTER_NS (by the kernels' start times), tallying each name's
  // GPU time, then gives its own label to the K names with the most; slots left over go to
  // later names, first come. Not simply the first K names to run: those are a job's set-up
  // (weight fills, casts), not its steps. A name keeps its label for good: a counter must never
  // move to another series. 0: no label. Set it before the first row.
  static constexpr uint64_t kKernelChoiceNs = 30'000'000'000ull;  // 30 s
  void set_kernel_names(size_t k, uint64_t choose_after_ns = kKernelChoiceNs) {
    kernel_names_ = k, kernel_choice_ns_ = choose_after_ns;
  }

  void set_agent_stats(const AgentStats& s);
  // The share of the time the duty-cycled probes are on (--call-duty; 1: always).
  void set_call_duty(double ratio);
  // The online detector: an anomaly of a layer with a cause kind (detect::cause_kind), and the
  // models' last scores and thresholds (not those of Python functions: unbounded names).
  void count_anomaly(const std::string& layer, const std::string& cause_kind);
  // Exports these (layer, cause kind) counters at 0 (detect::cause_kinds(): every one that can
  // occur), so that the first anomaly of each is an increase that alerts see.
  void zero_anomalies(const std::vector<std::pair<std::string, std::string>>& kinds);
  void set_models(const std::vector<ModelState>& models, size_t fitted);
  // What the online detector scored as unusual and did not report, in all so far.
  struct Dismissed {
    size_t no_burst = 0;        // slow calls that no burst of their kind carried
    size_t lone_window = 0;     // anomalous windows alone, no run of them
    size_t brief_slowdown = 0;  // windows of a slowdown too brief to report (SymptomRuns)
  };
  void set_dismissed(const Dismissed& d);
  // The exposition text (thread-safe: the HTTP thread calls it while the loop adds).
  std::string text() const;
  // Processes that made traced calls and have not exited.
  size_t traced_processes() const { return calls_by_pid_.size(); }

  // Removes the series that carry a process's labels (its calls, bus bytes and collective
  // counters: name, job, rank, container) once no process has used them for LINGER_NS: a node
  // that runs job after job must not export every finished job's series forever. They stay
  // that long after the last one exits so that the last scrapes read their final values and a
  // rank restarted with the same labels goes on counting in them. The agent's loop calls it
  // with its monotonic clock.
  static constexpr uint64_t kSeriesLingerNs = 300'000'000'000ull;  // 5 min
  void expire_series(uint64_t now_ns, uint64_t linger_ns = kSeriesLingerNs);
  // Series that carry process labels (live or lingering).
  size_t process_series() const { return tracked_.size(); }

 private:
  // The metrics of one operation of one process name, found once per (op, process) and kept:
  // a label lookup in the registry costs more than the probe that made the call.
  struct CallMetrics {
    prometheus::Counter* calls;
    prometheus::Counter* errors;
    prometheus::Counter* bytes;
    prometheus::Histogram* seconds;
  };
  struct HostMetrics {
    prometheus::Counter *runq, *cpu, *involuntary, *retransmits, *reclaim, *stall;
  };
  // A series that carries a process's labels, and the live processes that use it.
  struct Tracked {
    std::function<void()> remove;
    std::unordered_set<uint32_t> pids;
    std::optional<uint64_t> idle_since_ns;  // set by the first expire_series() with no pid
  };
  // ON_REMOVE: also run when expire_series() removes the series
  template <class T>
  T& track(prometheus::Family<T>& family, T& series, uint32_t pid,
           std::function<void()> on_remove = {});
  // PID no longer uses its series (it exited, or exec'd under another name).
  void release(uint32_t pid);
  CallMetrics& call_metrics(const char* layer, std::string_view op, uint32_t pid);
  void count_call(const char* layer, std::string_view op, uint32_t pid, uint64_t dur_ns,
                  bool failed, int64_t bytes);
  const std::string& process_name(uint32_t pid) const;
  // process name, pid (for per-process series) and the job identity's labels
  prometheus::Labels process_labels(uint32_t pid, bool with_pid);

  // The kernel names of one set of process labels (all its devices) that have a label.
  struct KernelChoice {
    uint64_t first_ts_ns = 0;
    std::unordered_map<std::string, uint64_t> gpu_ns;  // by short name, until the choice
    bool chosen = false;
    std::unordered_set<std::string> named;
    size_t series = 0;  // its live series: the choice goes with the last one
  };
  // A kernel's `kernel` label value under these process labels.
  std::string kernel_label(const prometheus::Labels& process, std::string_view name, uint64_t ts_ns,
                           uint64_t dur_ns);
  prometheus::Counter& kernel_series(prometheus::Family<prometheus::Counter>& family,
                                     const prometheus::Labels& labels,
                                     const prometheus::Labels& process, uint32_t pid);

  std::string hostname_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Counter>& errors_;
  prometheus::Family<prometheus::Counter>& bytes_;
  prometheus::Family<prometheus::Histogram>& seconds_;
  prometheus::Family<prometheus::Counter>& runq_;
  prometheus::Family<prometheus::Counter>& cpu_;
  prometheus::Family<prometheus::Counter>& involuntary_;
  prometheus::Family<prometheus::Counter>& retransmits_;
  prometheus::Family<prometheus::Counter>& reclaim_;
  prometheus::Family<prometheus::Counter>& stall_;
  // each CPU's stops, whatever it ran (at 0 from the start: increase() sees the first)
  prometheus::Family<prometheus::Counter>& node_stall_seconds_;
  prometheus::Family<prometheus::Counter>& node_stalls_;
  prometheus::Family<prometheus::Counter>& gpu_kernel_seconds_;
  prometheus::Family<prometheus::Counter>& gpu_kernels_;
  prometheus::Family<prometheus::Counter>& collective_gpu_seconds_;
  prometheus::Family<prometheus::Counter>& collectives_on_gpu_;
  prometheus::Family<prometheus::Gauge>& gpu_util_;
  prometheus::Family<prometheus::Gauge>& fb_used_;
  prometheus::Family<prometheus::Gauge>& power_;
  prometheus::Family<prometheus::Gauge>& temp_;
  prometheus::Family<prometheus::Gauge>& sm_clock_;
  prometheus::Family<prometheus::Gauge>& mem_clock_;
  prometheus::Family<prometheus::Gauge>& xid_;
  prometheus::Family<prometheus::Gauge>& throttle_;
  prometheus::Family<prometheus::Counter>& agent_events_;
  prometheus::Family<prometheus::Counter>& agent_dropped_;
  prometheus::Family<prometheus::Gauge>& agent_probes_;
  prometheus::Family<prometheus::Gauge>& agent_processes_;
  prometheus::Family<prometheus::Counter>& agent_cpu_;
  prometheus::Family<prometheus::Gauge>& agent_rss_;
  prometheus::Family<prometheus::Gauge>& call_duty_;
  prometheus::Family<prometheus::Counter>& peer_wait_;
  prometheus::Family<prometheus::Counter>& last_joined_;
  prometheus::Family<prometheus::Counter>& straggling_;
  prometheus::Family<prometheus::Counter>& bus_bytes_;
  prometheus::Family<prometheus::Counter>& anomalies_;
  prometheus::Family<prometheus::Gauge>& model_score_;
  prometheus::Family<prometheus::Gauge>& model_threshold_;
  prometheus::Family<prometheus::Gauge>& models_;
  prometheus::Family<prometheus::Counter>& dismissed_;
  AgentStats last_stats_;
  Dismissed last_dismissed_;

  // by pid, then by the op name's address (names are interned or static: stable for the
  // pipeline's life); a pid's entries go when it exits or execs (its process name changes)
  std::unordered_map<uint32_t, std::unordered_map<const char*, CallMetrics>> calls_by_pid_;
  std::unordered_map<uint32_t, std::string> process_names_;
  std::unordered_map<uint32_t, JobIdentity> identities_;
  // Processes that exited, with their identity, for the linger: a collective instance matched
  // after a rank's exit still counts under the rank's labels, and does not hold the series open
  // for a pid that will never exit again. `since`: the first expire_series() after the exit.
  struct Gone {
    JobIdentity identity;
    std::optional<uint64_t> since_ns;
  };
  std::unordered_map<uint32_t, Gone> gone_;
  std::unordered_map<uint32_t, HostMetrics> host_;
  std::unordered_map<uint32_t, GpuDevice> devices_;
  // by the series' address (a series lives until expire_series() removes it)
  std::unordered_map<const void*, Tracked> tracked_;
  std::unordered_map<uint32_t, std::vector<const void*>> tracked_by_pid_;
  size_t kernel_names_ = 0;
  uint64_t kernel_choice_ns_ = kKernelChoiceNs;
  std::map<prometheus::Labels, KernelChoice> kernel_choices_;
};

}  // namespace eacgm
