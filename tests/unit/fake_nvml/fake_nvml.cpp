// A fake libnvidia-ml.so.1 for the GPU sampler tests: NVML's C ABI subset, answers scripted per
// call by the file named in $EACGM_FAKE_NVML_SCRIPT (read at nvmlInit). Built twice: the full
// variant (newest function names; the older names exist but fail, so a caller that picks them
// is caught), and with FAKE_NVML_OLD an old driver's library (unversioned names only, no
// nvmlErrorString, nvmlDeviceGetProcessUtilization or nvmlDeviceGetFieldValues, throttle
// reasons under their old name, process info in the v1 layout). See README.md for the format.
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpu/nvml_abi.h"

namespace nv = eacgm::nvml;

namespace {

constexpr unsigned kMaxDevices = 16;

struct FakeDevice {
  unsigned index;
};
FakeDevice g_devices[kMaxDevices];
struct FakeEventSet {
  int unused;
} g_event_set;

struct Xid {
  unsigned dev;
  uint64_t due_ns;
  unsigned long long xid;
  bool delivered;
};

struct Parsed {
  nv::Return rc = nv::kSuccess;
  std::vector<unsigned long long> values;
  long long at_us = 0;  // "VALUE@us": the time NVML stamps on a field value
  bool per_us = false;  // "*R": values[0] is a rate per us since nvmlInit, read at the call
};

struct State {
  unsigned devices = 1;
  struct Answers {
    std::vector<std::string> tokens;
    size_t calls = 0;  // how many were taken
  };
  // metric -> per device; looked up by string_view, without building a key per call
  std::map<std::string, std::array<Answers, kMaxDevices>, std::less<>> calls;
  std::map<std::pair<std::string, unsigned>, std::string> text;  // name, uuid, pci
  std::vector<Xid> xids;
  uint64_t init_realtime_us = 0;
  std::unordered_map<const std::string*, Parsed> parsed;  // tokens of `calls`, parsed once
  bool registered[kMaxDevices] = {};
  std::vector<nv::ProcessUtilizationSample> last_util[kMaxDevices];
};

std::mutex g_mutex;
State g_state;
int g_init_count = 0;

uint64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void load_script(State& s) {
  const char* path = std::getenv("EACGM_FAKE_NVML_SCRIPT");
  if (!path) return;
  std::ifstream in(path);
  std::string line;
  uint64_t start = now_ns(CLOCK_MONOTONIC);
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    if (!(words >> key) || key[0] == '#') continue;
    if (key == "devices") {
      words >> s.devices;
      if (s.devices > kMaxDevices) s.devices = kMaxDevices;
      continue;
    }
    unsigned dev = 0;
    words >> dev;
    if (key == "name" || key == "uuid" || key == "pci") {
      std::string rest;
      std::getline(words >> std::ws, rest);
      s.text[{key, dev}] = rest;
    } else if (key == "xid") {
      uint64_t after_ms = 0;
      unsigned long long xid = 0;
      words >> after_ms >> xid;
      s.xids.push_back({dev, start + after_ms * 1000000, xid, false});
    } else {
      if (dev >= kMaxDevices) continue;
      std::vector<std::string>& tokens = s.calls[key][dev].tokens;
      for (std::string t; words >> t;) tokens.push_back(t);
    }
  }
}

// The token for this call of `metric` on `dev` (the last one repeats); null if unscripted.
const std::string* peek(std::string_view metric, unsigned dev) {
  auto it = g_state.calls.find(metric);
  if (it == g_state.calls.end() || dev >= kMaxDevices) return nullptr;
  const State::Answers& a = it->second[dev];
  if (a.tokens.empty()) return nullptr;
  return &a.tokens[std::min(a.calls, a.tokens.size() - 1)];
}
const std::string* take(std::string_view metric, unsigned dev) {
  const std::string* t = peek(metric, dev);
  if (t) ++g_state.calls.find(metric)->second[dev].calls;
  return t;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

// "!N" is an error answer; otherwise the ':'-separated numbers, and the time after an '@'.
Parsed parse_token(const std::string& token) {
  Parsed p;
  if (token[0] == '!') {
    p.rc = std::atoi(token.c_str() + 1);
    return p;
  }
  if (token[0] == '*') {
    p.per_us = true;
    p.values.push_back(std::stoull(token.substr(1)));
    return p;
  }
  size_t at = token.find('@');
  if (at != std::string::npos) p.at_us = std::stoll(token.substr(at + 1));
  for (const std::string& part : split(token.substr(0, at), ':')) {
    p.values.push_back(part == "NA" ? nv::kValueNotAvailable : std::stoull(part));
  }
  return p;
}

nv::Return parse(const std::string& token, std::vector<unsigned long long>& values) {
  Parsed p = parse_token(token);
  values = std::move(p.values);
  return p.rc;
}

// A scripted answer, parsed once: the sampler benchmark measures eacgm, not this library's
// string handling (a driver's calls cost what they cost; see bench/README.md).
const Parsed& parsed(const std::string* token) {
  static const Parsed unscripted{nv::kErrorNotSupported, {}, 0};
  if (!token) return unscripted;
  auto it = g_state.parsed.find(token);
  if (it == g_state.parsed.end()) it = g_state.parsed.emplace(token, parse_token(*token)).first;
  return it->second;
}

nv::Return parse(const std::string* token, std::vector<unsigned long long>& values) {
  const Parsed& p = parsed(token);
  if (p.rc == nv::kSuccess) values = p.values;
  return p.rc;
}

int device_index(nv::Device h) {
  auto* d = reinterpret_cast<FakeDevice*>(h);
  if (d < g_devices || d >= g_devices + g_state.devices) return -1;
  return int(d - g_devices);
}

// One scripted scalar answer of `metric` for a device.
template <typename T>
nv::Return scalar(nv::Device h, const char* metric, T* out) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || !out) return nv::kErrorInvalidArgument;
  std::vector<unsigned long long> v;
  nv::Return rc = parse(take(metric, unsigned(dev)), v);
  if (rc == nv::kSuccess) *out = T(v.at(0));
  return rc;
}

nv::Return fake_init() {
  std::lock_guard lock(g_mutex);
  if (g_init_count++ > 0) return nv::kSuccess;
  g_state = State();  // a fresh script per initialisation, even if the library stayed loaded
  for (unsigned i = 0; i < kMaxDevices; ++i) g_devices[i].index = i;
  load_script(g_state);
  g_state.init_realtime_us = now_ns(CLOCK_REALTIME) / 1000;
  std::vector<unsigned long long> v;
  nv::Return rc = parse(take("init", 0), v);
  if (rc == nv::kErrorNotSupported) rc = nv::kSuccess;  // unscripted: works
  if (rc != nv::kSuccess) g_init_count = 0;
  return rc;
}

template <typename Info>
nv::Return running_processes(nv::Device h, unsigned* count, Info* infos) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || !count) return nv::kErrorInvalidArgument;
  const std::string* token = peek("procs", unsigned(dev));
  if (!token) return nv::kErrorNotSupported;
  if ((*token)[0] == '!') {
    take("procs", unsigned(dev));
    return std::atoi(token->c_str() + 1);
  }
  std::vector<std::string> items = *token == "-" ? std::vector<std::string>() : split(*token, ',');
  if (!infos || *count < items.size()) {  // a size query: the call is not consumed
    *count = unsigned(items.size());
    return nv::kErrorInsufficientSize;
  }
  take("procs", unsigned(dev));
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<unsigned long long> v;
    parse(items[i], v);
    infos[i] = Info{};
    infos[i].pid = unsigned(v.at(0));
    infos[i].used_gpu_memory = v.at(1);
  }
  *count = unsigned(items.size());
  return nv::kSuccess;
}

nv::Return wait_event(nv::EventSet set, nv::EventData* data, unsigned timeout_ms) {
  if (set != reinterpret_cast<nv::EventSet>(&g_event_set) || !data) {
    return nv::kErrorInvalidArgument;
  }
  uint64_t deadline = now_ns(CLOCK_MONOTONIC) + uint64_t(timeout_ms) * 1000000;
  for (;;) {
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    uint64_t wake = deadline;  // like the driver, sleep until something is due: no polling
    {
      std::lock_guard lock(g_mutex);
      for (Xid& x : g_state.xids) {
        if (x.delivered || !g_state.registered[x.dev]) continue;
        if (x.due_ns > now) {
          wake = std::min(wake, x.due_ns);
          continue;
        }
        x.delivered = true;
        data->device = reinterpret_cast<nv::Device>(&g_devices[x.dev]);
        data->event_type = nv::kEventTypeXidCriticalError;
        data->event_data = x.xid;
        return nv::kSuccess;
      }
    }
    if (now >= deadline) return nv::kErrorTimeout;
    std::this_thread::sleep_for(std::chrono::nanoseconds(wake - now));
  }
}

}  // namespace

extern "C" {

#define FAKE_EXPORT __attribute__((visibility("default")))

FAKE_EXPORT nv::Return nvmlShutdown() {
  std::lock_guard lock(g_mutex);
  if (g_init_count == 0) return nv::kErrorUninitialized;
  --g_init_count;
  return nv::kSuccess;
}

FAKE_EXPORT nv::Return nvmlDeviceGetName(nv::Device h, char* name, unsigned length) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || !name) return nv::kErrorInvalidArgument;
  auto it = g_state.text.find({"name", unsigned(dev)});
  std::string value = it != g_state.text.end() ? it->second : "Fake GPU " + std::to_string(dev);
  if (value.size() + 1 > length) return nv::kErrorInsufficientSize;
  std::memcpy(name, value.c_str(), value.size() + 1);
  return nv::kSuccess;
}

FAKE_EXPORT nv::Return nvmlDeviceGetUUID(nv::Device h, char* uuid, unsigned length) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || !uuid) return nv::kErrorInvalidArgument;
  auto it = g_state.text.find({"uuid", unsigned(dev)});
  if (it == g_state.text.end()) return nv::kErrorNotSupported;
  if (it->second.size() + 1 > length) return nv::kErrorInsufficientSize;
  std::memcpy(uuid, it->second.c_str(), it->second.size() + 1);
  return nv::kSuccess;
}

static nv::Return pci_info(nv::Device h, nv::PciInfo* pci) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || !pci) return nv::kErrorInvalidArgument;
  auto it = g_state.text.find({"pci", unsigned(dev)});
  if (it == g_state.text.end()) return nv::kErrorNotSupported;
  *pci = nv::PciInfo{};
  std::strncpy(pci->bus_id, it->second.c_str(), sizeof(pci->bus_id) - 1);
  return nv::kSuccess;
}

FAKE_EXPORT nv::Return nvmlDeviceGetUtilizationRates(nv::Device h, nv::Utilization* u) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || !u) return nv::kErrorInvalidArgument;
  std::vector<unsigned long long> v;
  nv::Return rc = parse(take("utilization", unsigned(dev)), v);
  if (rc == nv::kSuccess) *u = {unsigned(v.at(0)), unsigned(v.at(1))};
  return rc;
}

FAKE_EXPORT nv::Return nvmlDeviceGetMemoryInfo(nv::Device h, nv::Memory* m) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || !m) return nv::kErrorInvalidArgument;
  std::vector<unsigned long long> v;
  nv::Return rc = parse(take("memory", unsigned(dev)), v);
  // script: used:total[:reserved]; v1's used counts the reserved memory too, as NVML's does
  if (rc != nv::kSuccess) return rc;
  unsigned long long used = v.size() > 2 ? v.at(0) + v.at(2) : v.at(0);
  *m = {v.at(1), v.at(1) - used, used};
  return rc;
}

FAKE_EXPORT nv::Return nvmlDeviceGetTemperature(nv::Device h, int sensor, unsigned* t) {
  if (sensor != nv::kTemperatureGpu) return nv::kErrorInvalidArgument;
  return scalar(h, "temperature", t);
}
FAKE_EXPORT nv::Return nvmlDeviceGetPowerUsage(nv::Device h, unsigned* mw) {
  return scalar(h, "power", mw);
}
FAKE_EXPORT nv::Return nvmlDeviceGetEnforcedPowerLimit(nv::Device h, unsigned* mw) {
  return scalar(h, "power_limit", mw);
}
FAKE_EXPORT nv::Return nvmlDeviceGetClockInfo(nv::Device h, int type, unsigned* mhz) {
  if (type == nv::kClockSm) return scalar(h, "clock_sm", mhz);
  if (type == nv::kClockMem) return scalar(h, "clock_mem", mhz);
  return nv::kErrorInvalidArgument;
}
FAKE_EXPORT nv::Return nvmlDeviceGetPcieThroughput(nv::Device h, int counter, unsigned* kbps) {
  if (counter == nv::kPcieTxBytes) return scalar(h, "pcie_tx", kbps);
  if (counter == nv::kPcieRxBytes) return scalar(h, "pcie_rx", kbps);
  return nv::kErrorInvalidArgument;
}
FAKE_EXPORT nv::Return nvmlDeviceGetTotalEccErrors(nv::Device h, int error_type, int counter_type,
                                                   unsigned long long* count) {
  if (counter_type != nv::kVolatileEcc) return nv::kErrorInvalidArgument;
  if (error_type == nv::kMemoryErrorCorrected) return scalar(h, "ecc_corrected", count);
  if (error_type == nv::kMemoryErrorUncorrected) return scalar(h, "ecc_uncorrected", count);
  return nv::kErrorInvalidArgument;
}

FAKE_EXPORT nv::Return nvmlEventSetCreate(nv::EventSet* set) {
  if (!set) return nv::kErrorInvalidArgument;
  *set = reinterpret_cast<nv::EventSet>(&g_event_set);
  return nv::kSuccess;
}
FAKE_EXPORT nv::Return nvmlDeviceRegisterEvents(nv::Device h, unsigned long long types,
                                                nv::EventSet set) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || set != reinterpret_cast<nv::EventSet>(&g_event_set)) {
    return nv::kErrorInvalidArgument;
  }
  std::vector<unsigned long long> v;
  nv::Return rc = parse(take("register_events", unsigned(dev)), v);
  if (rc == nv::kErrorNotSupported && !peek("register_events", unsigned(dev))) rc = nv::kSuccess;
  if (rc == nv::kSuccess && (types & nv::kEventTypeXidCriticalError)) {
    g_state.registered[dev] = true;
  }
  return rc;
}
FAKE_EXPORT nv::Return nvmlEventSetFree(nv::EventSet set) {
  if (set != reinterpret_cast<nv::EventSet>(&g_event_set)) return nv::kErrorInvalidArgument;
  return nv::kSuccess;
}

#ifndef FAKE_NVML_OLD

FAKE_EXPORT nv::Return nvmlInit_v2() { return fake_init(); }
FAKE_EXPORT nv::Return nvmlInit() { return nv::kErrorUnknown; }

FAKE_EXPORT const char* nvmlErrorString(nv::Return rc) {
  switch (rc) {
    case nv::kSuccess:
      return "Success";
    case nv::kErrorInvalidArgument:
      return "Invalid Argument";
    case nv::kErrorNotSupported:
      return "Not Supported";
    case nv::kErrorNotFound:
      return "Not Found";
    case nv::kErrorInsufficientSize:
      return "Insufficient Size";
    case nv::kErrorDriverNotLoaded:
      return "Driver Not Loaded";
    case nv::kErrorTimeout:
      return "Timeout";
    case nv::kErrorGpuIsLost:
      return "GPU is lost";
    case nv::kErrorUnknown:
      return "Unknown Error";
    default:
      return "Fake NVML error";
  }
}

FAKE_EXPORT nv::Return nvmlDeviceGetCount_v2(unsigned* count) {
  std::lock_guard lock(g_mutex);
  if (!count) return nv::kErrorInvalidArgument;
  *count = g_state.devices;
  return nv::kSuccess;
}
FAKE_EXPORT nv::Return nvmlDeviceGetCount(unsigned*) { return nv::kErrorUnknown; }

FAKE_EXPORT nv::Return nvmlDeviceGetHandleByIndex_v2(unsigned index, nv::Device* h) {
  std::lock_guard lock(g_mutex);
  if (!h || index >= g_state.devices) return nv::kErrorInvalidArgument;
  std::vector<unsigned long long> v;
  nv::Return rc = parse(take("handle", index), v);
  if (rc != nv::kErrorNotSupported && rc != nv::kSuccess) return rc;
  *h = reinterpret_cast<nv::Device>(&g_devices[index]);
  return nv::kSuccess;
}
FAKE_EXPORT nv::Return nvmlDeviceGetHandleByIndex(unsigned, nv::Device*) {
  return nv::kErrorUnknown;
}

FAKE_EXPORT nv::Return nvmlDeviceGetMemoryInfo_v2(nv::Device h, nv::MemoryV2* m) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || !m) return nv::kErrorInvalidArgument;
  if (m->version != nv::kMemoryV2Version) return nv::kErrorArgumentVersionMismatch;
  std::vector<unsigned long long> v;
  nv::Return rc = parse(take("memory", unsigned(dev)), v);
  if (rc != nv::kSuccess) return rc;
  unsigned long long reserved = v.size() > 2 ? v.at(2) : 0;
  m->total = v.at(1), m->reserved = reserved, m->used = v.at(0);
  m->free = v.at(1) - v.at(0) - reserved;
  return rc;
}

FAKE_EXPORT nv::Return nvmlDeviceGetPciInfo_v3(nv::Device h, nv::PciInfo* pci) {
  return pci_info(h, pci);
}

FAKE_EXPORT nv::Return nvmlDeviceGetCurrentClocksEventReasons(nv::Device h,
                                                              unsigned long long* mask) {
  return scalar(h, "clocks_event", mask);
}
FAKE_EXPORT nv::Return nvmlDeviceGetCurrentClocksThrottleReasons(nv::Device, unsigned long long*) {
  return nv::kErrorUnknown;
}

FAKE_EXPORT nv::Return nvmlDeviceGetFieldValues(nv::Device h, int count, nv::FieldValue* values) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || !values || count <= 0) return nv::kErrorInvalidArgument;
  for (int i = 0; i < count; ++i) {
    nv::FieldValue& f = values[i];
    bool all_links = f.scope_id == nv::kScopeAllLinks;
    const char* metric = nullptr;
    switch (f.field_id) {
      case nv::kFieldNvlinkThroughputDataTx:
        metric = all_links ? "nvlink_tx" : nullptr;
        break;
      case nv::kFieldNvlinkThroughputDataRx:
        metric = all_links ? "nvlink_rx" : nullptr;
        break;
      case nv::kFieldPowerInstant:
        metric = "power_instant";
        break;
      case nv::kFieldPcieTxBytes:
        metric = "pcie_tx_count";
        break;
      case nv::kFieldPcieRxBytes:
        metric = "pcie_rx_count";
        break;
    }
    if (!metric) {
      f.ret = nv::kErrorInvalidArgument;
      continue;
    }
    // "VALUE@us", "VALUE" (no time), "*R": a counter growing R per us since nvmlInit, read now
    const Parsed& p = parsed(take(metric, unsigned(dev)));
    f.ret = p.rc;
    if (f.ret != nv::kSuccess) continue;
    f.value_type = nv::kValueUnsignedLongLong;
    if (p.per_us) {
      uint64_t us = now_ns(CLOCK_REALTIME) / 1000;
      f.value.ull = p.values.at(0) * (us - g_state.init_realtime_us);
      f.timestamp_us = (long long)us;
    } else {
      f.value.ull = p.values.at(0);
      f.timestamp_us = p.at_us;
    }
  }
  return nv::kSuccess;
}

FAKE_EXPORT nv::Return nvmlDeviceGetProcessUtilization(nv::Device h,
                                                       nv::ProcessUtilizationSample* samples,
                                                       unsigned* count,
                                                       unsigned long long last_seen_us) {
  std::lock_guard lock(g_mutex);
  int dev = device_index(h);
  if (dev < 0 || !count) return nv::kErrorInvalidArgument;
  const std::string* token = peek("proc_util", unsigned(dev));
  if (!token) return nv::kErrorNotSupported;
  if ((*token)[0] == '!') {
    take("proc_util", unsigned(dev));
    return std::atoi(token->c_str() + 1);
  }
  std::vector<nv::ProcessUtilizationSample>& last = g_state.last_util[dev];
  std::vector<nv::ProcessUtilizationSample> now_samples;
  if (*token == "=") {
    now_samples = last;  // the same samples, the same times: nothing new for a careful caller
  } else if (*token != "-") {
    unsigned long long ts = now_ns(CLOCK_REALTIME) / 1000;
    for (const std::string& item : split(*token, ',')) {
      std::vector<unsigned long long> v;
      parse(item, v);
      now_samples.push_back({unsigned(v.at(0)), ts, unsigned(v.at(1)), unsigned(v.at(2)),
                             unsigned(v.at(3)), unsigned(v.at(4))});
    }
  }
  if (!samples || *count < now_samples.size()) {
    *count = unsigned(now_samples.size());
    return nv::kErrorInsufficientSize;
  }
  take("proc_util", unsigned(dev));
  last = now_samples;
  unsigned n = 0;
  for (const nv::ProcessUtilizationSample& s : now_samples) {
    if (s.timestamp_us > last_seen_us) samples[n++] = s;
  }
  *count = n;
  return n == 0 ? nv::kErrorNotFound : nv::kSuccess;
}

FAKE_EXPORT nv::Return nvmlDeviceGetComputeRunningProcesses_v3(nv::Device h, unsigned* count,
                                                               nv::ProcessInfoV2* infos) {
  return running_processes(h, count, infos);
}
FAKE_EXPORT nv::Return nvmlDeviceGetComputeRunningProcesses_v2(nv::Device, unsigned*,
                                                               nv::ProcessInfoV2*) {
  return nv::kErrorUnknown;
}
FAKE_EXPORT nv::Return nvmlDeviceGetComputeRunningProcesses(nv::Device, unsigned*,
                                                            nv::ProcessInfoV1*) {
  return nv::kErrorUnknown;
}

FAKE_EXPORT nv::Return nvmlEventSetWait_v2(nv::EventSet set, nv::EventData* data, unsigned ms) {
  return wait_event(set, data, ms);
}
FAKE_EXPORT nv::Return nvmlEventSetWait(nv::EventSet, nv::EventData*, unsigned) {
  return nv::kErrorUnknown;
}

#else  // FAKE_NVML_OLD: an old driver's library

FAKE_EXPORT nv::Return nvmlInit() { return fake_init(); }

FAKE_EXPORT nv::Return nvmlDeviceGetCount(unsigned* count) {
  std::lock_guard lock(g_mutex);
  if (!count) return nv::kErrorInvalidArgument;
  *count = g_state.devices;
  return nv::kSuccess;
}
FAKE_EXPORT nv::Return nvmlDeviceGetHandleByIndex(unsigned index, nv::Device* h) {
  std::lock_guard lock(g_mutex);
  if (!h || index >= g_state.devices) return nv::kErrorInvalidArgument;
  *h = reinterpret_cast<nv::Device>(&g_devices[index]);
  return nv::kSuccess;
}
FAKE_EXPORT nv::Return nvmlDeviceGetPciInfo_v2(nv::Device h, nv::PciInfo* pci) {
  return pci_info(h, pci);
}
FAKE_EXPORT nv::Return nvmlDeviceGetCurrentClocksThrottleReasons(nv::Device h,
                                                                 unsigned long long* mask) {
  return scalar(h, "clocks_event", mask);
}
FAKE_EXPORT nv::Return nvmlDeviceGetComputeRunningProcesses(nv::Device h, unsigned* count,
                                                            nv::ProcessInfoV1* infos) {
  return running_processes(h, count, infos);
}
// The unversioned wait fills only device, eventType and eventData (24 bytes).
FAKE_EXPORT nv::Return nvmlEventSetWait(nv::EventSet set, nv::EventData* data, unsigned ms) {
  nv::EventData full{};
  nv::Return rc = wait_event(set, data ? &full : nullptr, ms);
  if (rc == nv::kSuccess) std::memcpy(data, &full, offsetof(nv::EventData, gpu_instance_id));
  return rc;
}

#endif

}  // extern "C"
