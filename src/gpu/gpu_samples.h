// What the GPU layer produces: per-GPU samples, per-process samples, XID events, device info;
// and the pure helpers that turn NVML's answers into them (units, clocks, bit names).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eacgm {

// Read once when sampling starts.
struct GpuDevice {
  uint32_t index = 0;      // NVML's index
  std::string name;        // "NVIDIA H100 80GB HBM3"
  std::string uuid;        // "GPU-..."
  std::string pci_bus_id;  // "00000000:17:00.0"
};

// One pass over one GPU. Absent: NVML does not support the metric here, or it failed (see
// GpuSampler::unavailable_metrics).
struct GpuSample {
  uint64_t ts_ns = 0;                    // CLOCK_MONOTONIC when the GPU was queried
  uint32_t gpu = 0;                      // GpuDevice::index
  std::optional<uint32_t> sm_util_pct;   // nvmlUtilization_t.gpu
  std::optional<uint32_t> mem_util_pct;  // nvmlUtilization_t.memory
  std::optional<uint64_t> mem_used_bytes;
  std::optional<uint64_t> mem_total_bytes;
  std::optional<uint32_t> temperature_c;
  std::optional<double> power_w;        // NVML: mW
  std::optional<double> power_limit_w;  // enforced limit; NVML: mW
  std::optional<uint32_t> sm_clock_mhz;
  std::optional<uint32_t> mem_clock_mhz;
  std::optional<uint64_t> pcie_tx_bytes_per_s;  // NVML: KB/s, taken as KiB (its 1 KB counter unit)
  std::optional<uint64_t> pcie_rx_bytes_per_s;
  std::optional<uint64_t> throttle_reasons;  // clocks event reason bits: throttle_reason_names()
  std::optional<uint64_t> ecc_corrected;     // volatile (since the driver loaded) totals
  std::optional<uint64_t> ecc_uncorrected;
  // From the cumulative NVLink data counters (all links): bytes between this pass and the
  // previous one over the time between NVML's readings. Absent on the first pass.
  std::optional<double> nvlink_tx_bytes_per_s;
  std::optional<double> nvlink_rx_bytes_per_s;
};

// One pass over one GPU for one kept process: utilization (when NVML had a sample newer than
// the previous pass) and memory (when the process holds a compute context).
struct GpuProcessSample {
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC of the pass, as GpuSample::ts_ns
  uint32_t gpu = 0;
  uint32_t pid = 0;                // as NVML reports it (eacgm's pid namespace, normally)
  std::optional<uint32_t> ns_pid;  // pid inside the process's own namespace, when different
  // NVML's utilization sample time (CLOCK_REALTIME us) mapped to CLOCK_MONOTONIC ns with the
  // clock offset measured in the same pass.
  std::optional<uint64_t> util_ts_ns;
  std::optional<uint32_t> sm_util_pct;
  std::optional<uint32_t> mem_util_pct;
  std::optional<uint32_t> enc_util_pct;
  std::optional<uint32_t> dec_util_pct;
  std::optional<uint64_t> used_memory_bytes;
};

// An XID (critical error) reported by the driver.
struct GpuXidEvent {
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC when eacgm received it
  uint32_t gpu = 0;
  uint64_t xid = 0;  // 999: the driver did not know the Xid
};

// The names of the set bits of a clocks event (throttle) reason mask, lowest bit first:
// gpu_idle, applications_clocks_setting, sw_power_cap, hw_slowdown, sync_boost,
// sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, display_clock_setting;
// other bits as "0x...".
std::vector<std::string> throttle_reason_names(uint64_t mask);
// The same joined with commas; "none" for 0.
std::string throttle_reasons_text(uint64_t mask);

// NVML units to eacgm's.
inline double milliwatts_to_watts(unsigned mw) { return mw / 1000.0; }
inline uint64_t kib_to_bytes(uint64_t kib) { return kib * 1024; }

// A CLOCK_REALTIME time in us mapped to CLOCK_MONOTONIC ns, given realtime - monotonic in ns.
// nullopt when it would fall before the monotonic epoch.
std::optional<uint64_t> realtime_us_to_monotonic_ns(uint64_t realtime_us,
                                                    int64_t realtime_minus_mono_ns);

// The innermost pid of the "NSpid:" line of a /proc/PID/status text; nullopt when absent.
std::optional<uint32_t> parse_ns_pid(std::string_view status_text);
// For /proc/PID/status: the pid inside the process's own namespace when it differs from `pid`.
std::optional<uint32_t> read_ns_pid(uint32_t pid);

uint64_t monotonic_now_ns();
uint64_t realtime_now_ns();
// CLOCK_REALTIME - CLOCK_MONOTONIC now, from reads a few ns apart (never split by preemption).
int64_t realtime_minus_monotonic_ns();

}  // namespace eacgm
