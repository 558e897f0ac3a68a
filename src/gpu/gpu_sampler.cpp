// The GPU sampler's polling thread and its per-GPU metrics; processes and XID events live in
// gpu_sampler_processes.cpp and gpu_sampler_xid.cpp.
#include "gpu/gpu_sampler.h"

#include <fmt/format.h>
#include <pthread.h>

namespace eacgm {

const char* GpuSampler::metric_name(Metric m) {
  static constexpr std::array<const char*, kMetricCount> kNames = {
      "devices",          "utilization",   "memory",          "temperature", "power",
      "power_limit",      "sm_clock",      "mem_clock",       "pcie_tx",     "pcie_rx",
      "throttle_reasons", "ecc_corrected", "ecc_uncorrected", "nvlink",      "process_utilization",
      "process_memory",   "xid_events",
  };
  return m < kMetricCount ? kNames[m] : "?";
}

GpuSampler::GpuSampler(const NvmlLibrary& nvml, GpuSink& sink, GpuSamplerOptions options)
    : nvml_(nvml), sink_(sink), options_(std::move(options)) {
  if (options_.interval <= std::chrono::nanoseconds(0))
    options_.interval = std::chrono::milliseconds(100);
  util_buffer_.resize(64);
  procs_v2_buffer_.resize(64);
  procs_v1_buffer_.resize(64);
  rows_.reserve(64);
  note_missing_functions();
  read_devices();
}

GpuSampler::~GpuSampler() { stop(); }

void GpuSampler::note(Metric m, std::string reason) {
  if (noted_[m].exchange(true)) return;
  std::lock_guard lock(reasons_mutex_);
  reasons_[m] = std::move(reason);
}

bool GpuSampler::ok(Metric m, uint32_t gpu, const char* function, nvml::Return rc) {
  if (rc == nvml::kSuccess) return true;
  if (rc != nvml::kErrorNotSupported && !noted_[m].load(std::memory_order_relaxed)) {
    note(m, fmt::format("GPU {}: {}: {}", gpu, function, nvml_.error_text(rc)));
  }
  return false;
}

void GpuSampler::note_missing_functions() {
  const NvmlApi& a = nvml_.api();
  struct Need {
    Metric metric;
    bool present;
    const char* function;
  };
  const Need needs[] = {
      {kDevices, a.device_get_count && a.device_get_handle_by_index, "nvmlDeviceGetCount_v2"},
      {kUtilization, a.device_get_utilization_rates != nullptr, "nvmlDeviceGetUtilizationRates"},
      {kMemory, a.device_get_memory_info != nullptr, "nvmlDeviceGetMemoryInfo"},
      {kTemperature, a.device_get_temperature != nullptr, "nvmlDeviceGetTemperature"},
      {kPower, a.device_get_power_usage || a.device_get_field_values, "nvmlDeviceGetPowerUsage"},
      {kPowerLimit, a.device_get_enforced_power_limit != nullptr,
       "nvmlDeviceGetEnforcedPowerLimit"},
      {kSmClock, a.device_get_clock_info != nullptr, "nvmlDeviceGetClockInfo"},
      {kMemClock, a.device_get_clock_info != nullptr, "nvmlDeviceGetClockInfo"},
      {kPcieTx, a.device_get_pcie_throughput || a.device_get_field_values,
       "nvmlDeviceGetPcieThroughput"},
      {kPcieRx, a.device_get_pcie_throughput || a.device_get_field_values,
       "nvmlDeviceGetPcieThroughput"},
      {kThrottleReasons, a.device_get_clocks_event_reasons != nullptr,
       "nvmlDeviceGetCurrentClocksEventReasons"},
      {kEccCorrected, a.device_get_total_ecc_errors != nullptr, "nvmlDeviceGetTotalEccErrors"},
      {kEccUncorrected, a.device_get_total_ecc_errors != nullptr, "nvmlDeviceGetTotalEccErrors"},
      {kNvlink, a.device_get_field_values != nullptr, "nvmlDeviceGetFieldValues"},
      {kProcessUtilization, a.device_get_process_utilization != nullptr,
       "nvmlDeviceGetProcessUtilization"},
      {kProcessMemory,
       a.device_get_compute_running_processes_v2 || a.device_get_compute_running_processes_v1,
       "nvmlDeviceGetComputeRunningProcesses_v3"},
      {kXidEvents,
       a.event_set_create && a.device_register_events && a.event_set_wait && a.event_set_free,
       "nvmlEventSetCreate/nvmlDeviceRegisterEvents/nvmlEventSetWait_v2/nvmlEventSetFree"},
  };
  for (const Need& n : needs) {
    if (!n.present) {
      note(n.metric, fmt::format("{} is not in {} (an older driver?)", n.function, nvml_.path()));
    }
  }
}

void GpuSampler::read_devices() {
  const NvmlApi& a = nvml_.api();
  if (!a.device_get_count || !a.device_get_handle_by_index) return;
  unsigned count = 0;
  if (!ok(kDevices, 0, "nvmlDeviceGetCount", a.device_get_count(&count))) return;
  for (unsigned i = 0; i < count; ++i) {
    DeviceState state;
    if (!ok(kDevices, i, "nvmlDeviceGetHandleByIndex",
            a.device_get_handle_by_index(i, &state.handle))) {
      continue;  // a lost GPU: sample the others
    }
    GpuDevice dev;
    dev.index = i;
    char text[nvml::kDeviceUuidBufferSize] = {};
    if (a.device_get_name &&
        a.device_get_name(state.handle, text, sizeof(text)) == nvml::kSuccess) {
      dev.name = text;
    }
    text[0] = '\0';
    if (a.device_get_uuid &&
        a.device_get_uuid(state.handle, text, sizeof(text)) == nvml::kSuccess) {
      dev.uuid = text;
    }
    nvml::PciInfo pci{};
    if (a.device_get_pci_info && a.device_get_pci_info(state.handle, &pci) == nvml::kSuccess) {
      pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
      dev.pci_bus_id = pci.bus_id;
    }
    devices_.push_back(std::move(dev));
    states_.push_back(state);
  }
}

void GpuSampler::start() {
  if (sampler_thread_.joinable()) return;
  start_events_only();
  sampler_thread_ = std::thread([this] { run(); });
}

void GpuSampler::start_events_only() {
  // Utilization samples from before the start belong to no recording.
  uint64_t now_us = realtime_now_ns() / 1000;
  for (DeviceState& d : states_) d.last_seen_us = now_us;
  start_xid();
}

void GpuSampler::sample_once() { run_pass(); }

void GpuSampler::stop() {
  stop_.request();
  if (sampler_thread_.joinable()) sampler_thread_.join();
  if (xid_thread_.joinable()) xid_thread_.join();
  if (event_set_) {
    nvml_.api().event_set_free(event_set_);
    event_set_ = nullptr;
  }
}

void GpuSampler::run() {
  pthread_setname_np(pthread_self(), "eacgm-gpu");
  using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC
  auto next = Clock::now();
  for (;;) {
    run_pass();
    next += options_.interval;
    auto now = Clock::now();
    while (next <= now) {  // late: skip the passes we missed rather than bunch them up
      next += options_.interval;
      skipped_passes_.fetch_add(1, std::memory_order_relaxed);
    }
    if (stop_.sleep_until(next)) return;
  }
}

void GpuSampler::run_pass() {
  uint64_t start = monotonic_now_ns();
  // realtime - monotonic, to place NVML's CLOCK_REALTIME stamps on eacgm's clock.
  int64_t rt_minus_mono = realtime_minus_monotonic_ns();
  // due within half a pass: at 10 ms passes and 100 ms for the slow metrics, every 10th pass
  uint64_t slow_ns = uint64_t(options_.slow_interval.count());
  bool slow = slow_ns == 0 || last_slow_ns_ == 0 ||
              start - last_slow_ns_ + uint64_t(options_.interval.count()) / 2 >= slow_ns;
  if (slow) last_slow_ns_ = start;
  for (size_t i = 0; i < states_.size(); ++i) {
    uint64_t ts = monotonic_now_ns();
    sample_device(states_[i], devices_[i].index, ts, slow);
    if (slow) sample_processes(states_[i], devices_[i].index, ts, rt_minus_mono);
  }
  uint64_t took = monotonic_now_ns() - start;
  passes_.fetch_add(1, std::memory_order_relaxed);
  total_pass_ns_.fetch_add(took, std::memory_order_relaxed);
  if (took > max_pass_ns_.load(std::memory_order_relaxed)) max_pass_ns_ = took;
}

void GpuSampler::sample_device(DeviceState& d, uint32_t gpu, uint64_t ts_ns, bool slow) {
  const NvmlApi& a = nvml_.api();
  nvml::Device h = d.handle;
  GpuSample s;
  s.ts_ns = ts_ns;
  s.gpu = gpu;
  if (nvml::Utilization u{};
      slow && a.device_get_utilization_rates &&
      ok(kUtilization, gpu, "nvmlDeviceGetUtilizationRates",
         a.device_get_utilization_rates(h, &u))) {
    s.sm_util_pct = u.gpu;
    s.mem_util_pct = u.memory;
  }
  sample_memory(h, gpu, s);
  unsigned v = 0;
  if (slow && a.device_get_temperature &&
      ok(kTemperature, gpu, "nvmlDeviceGetTemperature",
         a.device_get_temperature(h, nvml::kTemperatureGpu, &v))) {
    s.temperature_c = v;
  }
  if (slow && a.device_get_enforced_power_limit &&
      ok(kPowerLimit, gpu, "nvmlDeviceGetEnforcedPowerLimit",
         a.device_get_enforced_power_limit(h, &v))) {
    s.power_limit_w = milliwatts_to_watts(v);
  }
  if (a.device_get_clock_info) {
    if (ok(kSmClock, gpu, "nvmlDeviceGetClockInfo(SM)",
           a.device_get_clock_info(h, nvml::kClockSm, &v))) {
      s.sm_clock_mhz = v;
    }
    if (ok(kMemClock, gpu, "nvmlDeviceGetClockInfo(MEM)",
           a.device_get_clock_info(h, nvml::kClockMem, &v))) {
      s.mem_clock_mhz = v;
    }
  }
  sample_power_and_pcie(d, gpu, slow, s);
  sample_throttling_and_ecc(h, gpu, slow, s);
  std::lock_guard lock(sink_mutex_);
  sink_.on_gpu_sample(s);
}

void GpuSampler::sample_memory(nvml::Device h, uint32_t gpu, GpuSample& s) {
  const NvmlApi& a = nvml_.api();
  // _v2 where the driver has it (used as nvidia-smi counts it), else v1 (used with reserved)
  bool memory_asked = false;
  if (a.device_get_memory_info_v2) {
    nvml::MemoryV2 m2{};
    m2.version = nvml::kMemoryV2Version;
    nvml::Return rc = a.device_get_memory_info_v2(h, &m2);
    // a driver that has the function but not this struct version: v1 answers
    memory_asked = rc != nvml::kErrorArgumentVersionMismatch && rc != nvml::kErrorNotSupported &&
                   rc != nvml::kErrorFunctionNotFound;
    if (memory_asked && ok(kMemory, gpu, "nvmlDeviceGetMemoryInfo_v2", rc)) {
      s.mem_used_bytes = m2.used;
      s.mem_total_bytes = m2.total;
    }
  }
  if (nvml::Memory m{}; !memory_asked && a.device_get_memory_info &&
                        ok(kMemory, gpu, "nvmlDeviceGetMemoryInfo",
                           a.device_get_memory_info(h, &m))) {
    s.mem_used_bytes = m.used;
    s.mem_total_bytes = m.total;
  }
}

void GpuSampler::sample_power_and_pcie(DeviceState& d, uint32_t gpu, bool slow, GpuSample& s) {
  const NvmlApi& a = nvml_.api();
  nvml::Device h = d.handle;
  unsigned v = 0;
  // Power and PCIe from the field values where the driver has them (decided at the first pass),
  // else from their functions: nvmlDeviceGetPcieThroughput sleeps 20 ms per direction, so it
  // is read only with the slow metrics.
  using Source = DeviceState::Source;
  if (a.device_get_field_values) {
    sample_fields(d, gpu, s);
  } else {
    d.power_source = d.pcie_source = Source::kFunction;
  }
  if (d.power_source == Source::kFunction && a.device_get_power_usage &&
      ok(kPower, gpu, "nvmlDeviceGetPowerUsage", a.device_get_power_usage(h, &v))) {
    s.power_w = milliwatts_to_watts(v);
  }
  if (d.pcie_source == Source::kFunction && slow && a.device_get_pcie_throughput) {
    if (ok(kPcieTx, gpu, "nvmlDeviceGetPcieThroughput(TX)",
           a.device_get_pcie_throughput(h, nvml::kPcieTxBytes, &v))) {
      s.pcie_tx_bytes_per_s = kib_to_bytes(v);
    }
    if (ok(kPcieRx, gpu, "nvmlDeviceGetPcieThroughput(RX)",
           a.device_get_pcie_throughput(h, nvml::kPcieRxBytes, &v))) {
      s.pcie_rx_bytes_per_s = kib_to_bytes(v);
    }
  }
}

void GpuSampler::sample_throttling_and_ecc(nvml::Device h, uint32_t gpu, bool slow,
                                           GpuSample& s) {
  const NvmlApi& a = nvml_.api();
  unsigned long long big = 0;
  if (a.device_get_clocks_event_reasons &&
      ok(kThrottleReasons, gpu, "nvmlDeviceGetCurrentClocksEventReasons",
         a.device_get_clocks_event_reasons(h, &big))) {
    s.throttle_reasons = big;
  }
  if (slow && a.device_get_total_ecc_errors) {
    if (ok(kEccCorrected, gpu, "nvmlDeviceGetTotalEccErrors(corrected)",
           a.device_get_total_ecc_errors(h, nvml::kMemoryErrorCorrected, nvml::kVolatileEcc,
                                         &big))) {
      s.ecc_corrected = big;
    }
    if (ok(kEccUncorrected, gpu, "nvmlDeviceGetTotalEccErrors(uncorrected)",
           a.device_get_total_ecc_errors(h, nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc,
                                         &big))) {
      s.ecc_uncorrected = big;
    }
  }
}

namespace {

std::optional<uint64_t> counter_value(const nvml::FieldValue& f) {
  switch (f.value_type) {
    case nvml::kValueUnsignedLongLong:
      return f.value.ull;
    case nvml::kValueUnsignedLong:
      return f.value.ul;
    case nvml::kValueUnsignedInt:
      return f.value.ui;
    case nvml::kValueSignedLongLong:
      return f.value.sll >= 0 ? std::optional<uint64_t>(f.value.sll) : std::nullopt;
    default:
      return std::nullopt;
  }
}

// How much a counter grew: 32-bit counters wrap (right while under 4 GiB pass between two
// readings); a wider one that went down was reset and gives no rate.
std::optional<uint64_t> growth(uint64_t now, uint64_t before, int value_type) {
  if (value_type == nvml::kValueUnsignedInt) return uint32_t(now - before);
  if (now < before) return std::nullopt;
  return now - before;
}

// An answer that means "this driver has no such field" rather than "not this time".
bool field_absent(nvml::Return rc) {
  return rc == nvml::kErrorNotSupported || rc == nvml::kErrorInvalidArgument ||
         rc == nvml::kErrorFunctionNotFound;
}

}  // namespace

// Cumulative TX/RX counters: their growth since the previous pass and the time between NVML's
// two readings (or between our passes when NVML gives no time); none on the first reading, or
// when either counter was not read.
std::optional<GpuSampler::Growth> GpuSampler::counter_growth(Counters& c,
                                                             const nvml::FieldValue& tx,
                                                             const nvml::FieldValue& rx,
                                                             uint64_t pass_ns) {
  std::optional<uint64_t> t = counter_value(tx), r = counter_value(rx);
  bool had = c.have;
  c.have = false;
  if (!t || !r) return std::nullopt;
  std::optional<Growth> out;
  if (had) {
    // each field has its own time: the two counters are not read at the same instant
    auto seconds = [&](long long now_us, long long before_us) {
      return (now_us > 0 && before_us > 0) ? double(now_us - before_us) / 1e6
                                           : double(pass_ns - c.pass_ns) / 1e9;
    };
    double ts = seconds(tx.timestamp_us, c.tx_us), rs = seconds(rx.timestamp_us, c.rx_us);
    std::optional<uint64_t> dt = growth(*t, c.tx, tx.value_type);
    std::optional<uint64_t> dr = growth(*r, c.rx, rx.value_type);
    if (ts > 0 && rs > 0 && dt && dr) out = Growth{*dt, *dr, ts, rs};
  }
  c = {true, *t, *r, tx.timestamp_us, rx.timestamp_us, pass_ns};
  return out;
}

// One nvmlDeviceGetFieldValues call per GPU and pass: instant power and the PCIe byte counters
// (until the driver shows it has not got them: then their functions) and the NVLink counters.
void GpuSampler::sample_fields(DeviceState& d, uint32_t gpu, GpuSample& s) {
  using Source = DeviceState::Source;
  nvml::FieldValue f[5] = {};
  int n = 0, power = -1, pcie = -1;
  if (d.power_source != Source::kFunction) {
    power = n;
    f[n++].field_id = nvml::kFieldPowerInstant;
  }
  if (d.pcie_source != Source::kFunction) {
    pcie = n;
    f[n++].field_id = nvml::kFieldPcieTxBytes;
    f[n++].field_id = nvml::kFieldPcieRxBytes;
  }
  const int nvlink = n;
  f[n].field_id = nvml::kFieldNvlinkThroughputDataTx;
  f[n++].scope_id = nvml::kScopeAllLinks;
  f[n].field_id = nvml::kFieldNvlinkThroughputDataRx;
  f[n++].scope_id = nvml::kScopeAllLinks;

  nvml::Return rc = nvml_.api().device_get_field_values(d.handle, n, f);
  if (rc != nvml::kSuccess) {
    d.pcie.have = d.nvlink.have = false;
    if (field_absent(rc)) {  // not on this GPU: the functions, from this pass on
      if (d.power_source == Source::kUnknown) d.power_source = Source::kFunction;
      if (d.pcie_source == Source::kUnknown) d.pcie_source = Source::kFunction;
    }
    ok(kNvlink, gpu, "nvmlDeviceGetFieldValues", rc);
    return;
  }
  // The first answer decides where power and PCIe come from; later errors only lose a pass.
  auto decide = [&](Source& source, nvml::Return field_rc) {
    if (source == Source::kUnknown) {
      source = field_absent(field_rc) ? Source::kFunction : Source::kField;
    }
  };
  if (power >= 0) {
    decide(d.power_source, f[power].ret);
    std::optional<uint64_t> mw = counter_value(f[power]);
    if (ok(kPower, gpu, "nvmlDeviceGetFieldValues(POWER_INSTANT)", f[power].ret) && mw) {
      s.power_w = milliwatts_to_watts(unsigned(*mw));
    }
  }
  if (pcie >= 0) {
    nvml::Return tx_rc = f[pcie].ret, rx_rc = f[pcie + 1].ret;
    decide(d.pcie_source, tx_rc != nvml::kSuccess ? tx_rc : rx_rc);
    if (ok(kPcieTx, gpu, "nvmlDeviceGetFieldValues(PCIE_COUNT_TX_BYTES)", tx_rc) &&
        ok(kPcieRx, gpu, "nvmlDeviceGetFieldValues(PCIE_COUNT_RX_BYTES)", rx_rc)) {
      if (auto g = counter_growth(d.pcie, f[pcie], f[pcie + 1], s.ts_ns)) {
        s.pcie_tx_bytes_per_s = uint64_t(double(g->tx) / g->tx_seconds + 0.5);
        s.pcie_rx_bytes_per_s = uint64_t(double(g->rx) / g->rx_seconds + 0.5);
      }
    } else {
      d.pcie.have = false;
    }
  }
  if (ok(kNvlink, gpu, "nvmlDeviceGetFieldValues(NVLINK_THROUGHPUT_DATA_TX)", f[nvlink].ret) &&
      ok(kNvlink, gpu, "nvmlDeviceGetFieldValues(NVLINK_THROUGHPUT_DATA_RX)",
         f[nvlink + 1].ret)) {
    if (auto g = counter_growth(d.nvlink, f[nvlink], f[nvlink + 1], s.ts_ns)) {
      s.nvlink_tx_bytes_per_s = double(kib_to_bytes(g->tx)) / g->tx_seconds;
      s.nvlink_rx_bytes_per_s = double(kib_to_bytes(g->rx)) / g->rx_seconds;
    }
  } else {
    d.nvlink.have = false;
  }
}

std::vector<UnavailableMetric> GpuSampler::unavailable_metrics() const {
  std::vector<UnavailableMetric> out;
  std::lock_guard lock(reasons_mutex_);
  for (unsigned m = 0; m < kMetricCount; ++m) {
    if (!reasons_[m].empty()) out.push_back({metric_name(Metric(m)), reasons_[m]});
  }
  return out;
}

GpuSamplerStats GpuSampler::stats() const {
  return {passes_.load(), total_pass_ns_.load(), max_pass_ns_.load(), skipped_passes_.load()};
}

}  // namespace eacgm
