// The GPU layer's sampler: a thread that polls NVML for every GPU each interval, and a second
// one that waits for XID events; results go to a GpuSink.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpu/gpu_samples.h"
#include "gpu/nvml.h"
#include "util/stop_flag.h"

namespace eacgm {

// Receives what the sampler produces. Calls come from the sampler's own threads (the polling
// thread and the XID thread), one at a time (the sampler serialises them), never from the
// caller of start(): a receiver shared with other threads must protect itself, for example by
// pushing into a mutex-protected queue that its consumer drains. Calls should return quickly:
// the next pass waits for them.
class GpuSink {
 public:
  virtual ~GpuSink() = default;
  virtual void on_gpu_sample(const GpuSample& sample) = 0;
  virtual void on_gpu_process_sample(const GpuProcessSample& sample) = 0;
  virtual void on_gpu_xid(const GpuXidEvent& event) = 0;
};

struct GpuSamplerOptions {
  std::chrono::nanoseconds interval = std::chrono::milliseconds(100);
  // What NVML refreshes slowly or what changes slowly (utilization, which NVML averages over
  // 1/6 s to 1 s; temperature; the power limit; ECC counts; per-process utilization, which
  // NVML buffers, and memory) is read at most this often, on the first pass due; the rows of
  // the other passes leave those columns empty. 0: at every pass.
  std::chrono::nanoseconds slow_interval{0};
  // Which processes to report (called on the sampler thread with NVML's pid); empty: all.
  std::function<bool(uint32_t pid)> keep_pid;
  bool xid_events = true;
};

// A metric the sampler cannot deliver, and why (a missing function, or the first error other
// than NOT_SUPPORTED). NOT_SUPPORTED alone is not listed: many GPUs lack some metrics.
struct UnavailableMetric {
  std::string metric;  // "temperature", "process_utilization", ...
  std::string reason;  // "GPU 0: nvmlDeviceGetTemperature: Unknown Error (code 999)"
};

struct GpuSamplerStats {
  uint64_t passes = 0;
  uint64_t total_pass_ns = 0;  // time spent querying NVML and calling the sink
  uint64_t max_pass_ns = 0;
  uint64_t skipped_passes = 0;  // deadlines missed because a pass ran late
};

class GpuSampler {
 public:
  // Reads the device list (names, UUIDs, PCI ids). `nvml` and `sink` must outlive the sampler.
  GpuSampler(const NvmlLibrary& nvml, GpuSink& sink, GpuSamplerOptions options = {});
  ~GpuSampler();  // stop()
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  const std::vector<GpuDevice>& devices() const { return devices_; }

  // Starts the threads; the first pass runs at once, the next ones every interval.
  void start();
  // For an owner that drives the passes from a sampling thread of its own (one wakeup per
  // interval for all sampled layers): start() without the polling thread, the XID thread
  // still runs; then sample_once() every interval, from one thread at a time.
  void start_events_only();
  void sample_once();
  // Stops and joins both threads: returns within about one interval (at most 100 ms of XID wait).
  void stop();

  // Safe to call from any thread at any time; each metric is listed once.
  std::vector<UnavailableMetric> unavailable_metrics() const;
  GpuSamplerStats stats() const;

  enum Metric : unsigned {
    kDevices,
    kUtilization,
    kMemory,
    kTemperature,
    kPower,
    kPowerLimit,
    kSmClock,
    kMemClock,
    kPcieTx,
    kPcieRx,
    kThrottleReasons,
    kEccCorrected,
    kEccUncorrected,
    kNvlink,
    kProcessUtilization,
    kProcessMemory,
    kXidEvents,
    kMetricCount
  };
  static const char* metric_name(Metric m);

 private:
  // A pair of cumulative TX/RX counters read at each pass: a rate needs two readings.
  struct Counters {
    bool have = false;  // the previous pass read both
    uint64_t tx = 0, rx = 0;
    long long tx_us = 0, rx_us = 0;  // NVML's times of the previous readings (0: none)
    uint64_t pass_ns = 0;
  };
  struct DeviceState {
    nvml::Device handle = nullptr;
    unsigned long long last_seen_us = 0;  // newest process utilization sample seen
    // Power and PCIe come from nvmlDeviceGetFieldValues (instant power; PCIe byte counters)
    // where the driver has those fields, else from nvmlDeviceGetPowerUsage (a 1 s average on
    // Ampere and newer) and nvmlDeviceGetPcieThroughput (measures for 20 ms per call).
    enum class Source : uint8_t { kUnknown, kField, kFunction };
    Source power_source = Source::kUnknown, pcie_source = Source::kUnknown;
    Counters pcie;    // bytes
    Counters nvlink;  // KiB
  };

  void read_devices();
  void note_missing_functions();
  void note(Metric m, std::string reason);
  // True on success; remembers the first error other than NOT_SUPPORTED for the metric.
  bool ok(Metric m, uint32_t gpu, const char* function, nvml::Return rc);

  void run();
  void run_pass();
  void sample_device(DeviceState& d, uint32_t gpu, uint64_t ts_ns, bool slow);
  void sample_fields(DeviceState& d, uint32_t gpu, GpuSample& s);
  void sample_memory(nvml::Device h, uint32_t gpu, GpuSample& s);
  void sample_power_and_pcie(DeviceState& d, uint32_t gpu, bool slow, GpuSample& s);
  void sample_throttling_and_ecc(nvml::Device h, uint32_t gpu, bool slow, GpuSample& s);
  struct Growth {
    uint64_t tx, rx;
    double tx_seconds, rx_seconds;
  };
  static std::optional<Growth> counter_growth(Counters& c, const nvml::FieldValue& tx,
                                              const nvml::FieldValue& rx, uint64_t pass_ns);
  void sample_processes(DeviceState& d, uint32_t gpu, uint64_t ts_ns, int64_t rt_minus_mono);
  void read_process_memory(DeviceState& d, uint32_t gpu);
  void read_process_utilization(DeviceState& d, uint32_t gpu, int64_t rt_minus_mono);
  GpuProcessSample* process_row(uint32_t pid);
  std::optional<uint32_t> ns_pid_of(uint32_t pid);

  void start_xid();
  void run_xid();

  const NvmlLibrary& nvml_;
  GpuSink& sink_;
  GpuSamplerOptions options_;
  std::vector<GpuDevice> devices_;
  std::vector<DeviceState> states_;

  // Reused buffers of the polling thread: no allocation per pass once they have grown.
  std::vector<nvml::ProcessUtilizationSample> util_buffer_;
  std::vector<nvml::ProcessInfoV2> procs_v2_buffer_;
  std::vector<nvml::ProcessInfoV1> procs_v1_buffer_;
  std::vector<GpuProcessSample> rows_;
  uint64_t pass_ts_ns_ = 0;
  uint64_t last_slow_ns_ = 0;  // when the slow metrics were last read (0: never)
  uint32_t pass_gpu_ = 0;
  std::unordered_map<uint32_t, uint32_t> ns_pid_cache_;  // pid -> ns pid, 0: same or unknown

  std::array<std::atomic<bool>, kMetricCount> noted_{};
  mutable std::mutex reasons_mutex_;
  std::array<std::string, kMetricCount> reasons_;

  std::mutex sink_mutex_;  // one sink call at a time
  StopFlag stop_;  // ends the sampler's and the XID thread's waits
  nvml::EventSet event_set_ = nullptr;
  std::thread sampler_thread_;
  std::thread xid_thread_;

  std::atomic<uint64_t> passes_{0}, total_pass_ns_{0}, max_pass_ns_{0}, skipped_passes_{0};
};

}  // namespace eacgm
