// NVML loaded at run time: dlopen, the functions eacgm calls resolved one by one, init/shutdown.
#include "gpu/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstring>
#include <initializer_list>

namespace eacgm {
namespace {

// Looks up the first of `names` the library has; null if none. The function pointer is copied
// out of the void* dlsym returns (POSIX guarantees the two have the same representation).
template <typename Fn>
bool bind(void* handle, Fn& slot, std::initializer_list<const char*> names) {
  static_assert(sizeof(Fn) == sizeof(void*));
  for (const char* name : names) {
    void* sym = dlsym(handle, name);
    if (sym) {
      std::memcpy(&slot, &sym, sizeof(slot));
      return true;
    }
  }
  return false;
}

}  // namespace

std::string NvmlLoadFailure::warning() const {
  if (init_failed) {
    return fmt::format(
        "GPU layer: cannot initialise NVML from {} ({}): is the NVIDIA driver loaded? "
        "(nvidia-smi should work)",
        path, reason);
  }
  return fmt::format(
      "GPU layer: cannot load {} ({}): is the NVIDIA driver installed? use --nvml-library PATH",
      path, reason);
}

Error NvmlLoadFailure::error() const {
  if (init_failed) {
    return Error(fmt::format(
        "cannot initialise NVML from {} ({}): is the NVIDIA driver loaded? (nvidia-smi should "
        "work)",
        path, reason));
  }
  return Error(
      fmt::format("cannot load the NVML library {} ({}): give the path of libnvidia-ml.so.1 with "
                  "--nvml-library PATH or EACGM_NVML_LIBRARY",
                  path, reason));
}

NvmlLibraryChoice choose_nvml_library(const std::string& cli_path, const char* env_value) {
  if (!cli_path.empty()) return {cli_path, true};
  if (env_value && *env_value) return {env_value, true};
  return {NvmlLibrary::kDefaultSoname, false};
}

NvmlLoadResult NvmlLibrary::load(const NvmlLibraryChoice& choice) {
  NvmlLoadResult result;
  result.failure.path = choice.path;
  result.failure.explicit_path = choice.explicit_path;
  dlerror();
  void* handle = dlopen(choice.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    result.failure.reason = why ? why : "dlopen failed";
    return result;
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary(handle, choice.path));
  lib->resolve();
  if (!lib->api_.init) {
    result.failure.reason = "it has neither nvmlInit_v2 nor nvmlInit: not an NVML library?";
    return result;
  }
  nvml::Return rc = lib->api_.init();
  if (rc != nvml::kSuccess) {
    result.failure.reason = "nvmlInit: " + lib->error_text(rc);
    result.failure.init_failed = true;
    return result;
  }
  lib->initialized_ = true;
  result.library = std::move(lib);
  return result;
}

std::unique_ptr<NvmlLibrary> NvmlLibrary::load_or_throw(const NvmlLibraryChoice& choice) {
  NvmlLoadResult result = load(choice);
  if (!result) throw result.failure.error();
  return std::move(result.library);
}

NvmlLibrary::~NvmlLibrary() {
  if (initialized_ && api_.shutdown) api_.shutdown();
  if (handle_) dlclose(handle_);
}

void NvmlLibrary::resolve() {
  void* h = handle_;
  NvmlApi& a = api_;
  // The name reported when a function is missing is the preferred (newest) one.
  auto need = [this](bool found, const char* name) {
    if (!found) missing_.emplace_back(name);
  };
  need(bind(h, a.init, {"nvmlInit_v2", "nvmlInit"}), "nvmlInit_v2");
  need(bind(h, a.shutdown, {"nvmlShutdown"}), "nvmlShutdown");
  need(bind(h, a.error_string, {"nvmlErrorString"}), "nvmlErrorString");
  need(bind(h, a.device_get_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}),
       "nvmlDeviceGetCount_v2");
  need(bind(h, a.device_get_handle_by_index,
            {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}),
       "nvmlDeviceGetHandleByIndex_v2");
  need(bind(h, a.device_get_name, {"nvmlDeviceGetName"}), "nvmlDeviceGetName");
  need(bind(h, a.device_get_uuid, {"nvmlDeviceGetUUID"}), "nvmlDeviceGetUUID");
  need(bind(h, a.device_get_pci_info, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"}),
       "nvmlDeviceGetPciInfo_v3");
  need(bind(h, a.device_get_utilization_rates, {"nvmlDeviceGetUtilizationRates"}),
       "nvmlDeviceGetUtilizationRates");
  need(bind(h, a.device_get_memory_info, {"nvmlDeviceGetMemoryInfo"}), "nvmlDeviceGetMemoryInfo");
  bind(h, a.device_get_memory_info_v2, {"nvmlDeviceGetMemoryInfo_v2"});  // used without reserved
  need(bind(h, a.device_get_temperature, {"nvmlDeviceGetTemperature"}), "nvmlDeviceGetTemperature");
  need(bind(h, a.device_get_power_usage, {"nvmlDeviceGetPowerUsage"}), "nvmlDeviceGetPowerUsage");
  need(bind(h, a.device_get_enforced_power_limit, {"nvmlDeviceGetEnforcedPowerLimit"}),
       "nvmlDeviceGetEnforcedPowerLimit");
  need(bind(h, a.device_get_clock_info, {"nvmlDeviceGetClockInfo"}), "nvmlDeviceGetClockInfo");
  need(bind(h, a.device_get_pcie_throughput, {"nvmlDeviceGetPcieThroughput"}),
       "nvmlDeviceGetPcieThroughput");
  need(
      bind(h, a.device_get_clocks_event_reasons,
           {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"}),
      "nvmlDeviceGetCurrentClocksEventReasons");
  need(bind(h, a.device_get_total_ecc_errors, {"nvmlDeviceGetTotalEccErrors"}),
       "nvmlDeviceGetTotalEccErrors");
  need(bind(h, a.device_get_field_values, {"nvmlDeviceGetFieldValues"}),
       "nvmlDeviceGetFieldValues");
  need(bind(h, a.device_get_process_utilization, {"nvmlDeviceGetProcessUtilization"}),
       "nvmlDeviceGetProcessUtilization");
  // Two layouts: the versioned functions take nvmlProcessInfo_v2_t, the old one _v1_t.
  bool v2 =
      bind(h, a.device_get_compute_running_processes_v2,
           {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
  bool v1 = !v2 && bind(h, a.device_get_compute_running_processes_v1,
                        {"nvmlDeviceGetComputeRunningProcesses"});
  need(v2 || v1, "nvmlDeviceGetComputeRunningProcesses_v3");
  need(bind(h, a.event_set_create, {"nvmlEventSetCreate"}), "nvmlEventSetCreate");
  need(bind(h, a.device_register_events, {"nvmlDeviceRegisterEvents"}), "nvmlDeviceRegisterEvents");
  need(bind(h, a.event_set_wait, {"nvmlEventSetWait_v2", "nvmlEventSetWait"}),
       "nvmlEventSetWait_v2");
  need(bind(h, a.event_set_free, {"nvmlEventSetFree"}), "nvmlEventSetFree");
}

std::string NvmlLibrary::error_text(nvml::Return code) const {
  const char* text = api_.error_string ? api_.error_string(code) : nullptr;
  if (text && *text) return fmt::format("{} (code {})", text, code);
  return fmt::format("NVML error {}", code);
}

}  // namespace eacgm
