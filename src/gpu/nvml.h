// NVML loaded at run time: dlopen, the functions eacgm calls resolved one by one, init/shutdown.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "gpu/nvml_abi.h"
#include "util/error.h"

namespace eacgm {

// The NVML functions eacgm calls. A null pointer is a function this library lacks (older drivers
// lack newer ones). Where NVML has versioned names, the newest one with a layout we declare wins.
struct NvmlApi {
  using Device = nvml::Device;
  using Return = nvml::Return;

  Return (*init)() = nullptr;  // nvmlInit_v2, else nvmlInit
  Return (*shutdown)() = nullptr;
  const char* (*error_string)(Return) = nullptr;
  Return (*device_get_count)(unsigned*) = nullptr;                    // _v2, else unversioned
  Return (*device_get_handle_by_index)(unsigned, Device*) = nullptr;  // _v2, else unversioned
  Return (*device_get_name)(Device, char*, unsigned) = nullptr;
  Return (*device_get_uuid)(Device, char*, unsigned) = nullptr;
  Return (*device_get_pci_info)(Device, nvml::PciInfo*) = nullptr;  // _v3, else _v2
  Return (*device_get_utilization_rates)(Device, nvml::Utilization*) = nullptr;
  Return (*device_get_memory_info)(Device, nvml::Memory*) = nullptr;
  Return (*device_get_memory_info_v2)(Device, nvml::MemoryV2*) = nullptr;  // optional: 510+
  Return (*device_get_temperature)(Device, int, unsigned*) = nullptr;
  Return (*device_get_power_usage)(Device, unsigned*) = nullptr;
  Return (*device_get_enforced_power_limit)(Device, unsigned*) = nullptr;
  Return (*device_get_clock_info)(Device, int, unsigned*) = nullptr;
  Return (*device_get_pcie_throughput)(Device, int, unsigned*) = nullptr;
  // nvmlDeviceGetCurrentClocksEventReasons, else nvmlDeviceGetCurrentClocksThrottleReasons
  Return (*device_get_clocks_event_reasons)(Device, unsigned long long*) = nullptr;
  Return (*device_get_total_ecc_errors)(Device, int, int, unsigned long long*) = nullptr;
  Return (*device_get_field_values)(Device, int, nvml::FieldValue*) = nullptr;
  Return (*device_get_process_utilization)(Device, nvml::ProcessUtilizationSample*, unsigned*,
                                           unsigned long long) = nullptr;
  // _v3, else _v2 (both take nvmlProcessInfo_v2_t) ...
  Return (*device_get_compute_running_processes_v2)(Device, unsigned*,
                                                    nvml::ProcessInfoV2*) = nullptr;
  // ... else the unversioned one with nvmlProcessInfo_v1_t.
  Return (*device_get_compute_running_processes_v1)(Device, unsigned*,
                                                    nvml::ProcessInfoV1*) = nullptr;
  Return (*event_set_create)(nvml::EventSet*) = nullptr;
  Return (*device_register_events)(Device, unsigned long long, nvml::EventSet) = nullptr;
  Return (*event_set_wait)(nvml::EventSet, nvml::EventData*, unsigned) = nullptr;  // _v2, else v1
  Return (*event_set_free)(nvml::EventSet) = nullptr;
};

// Why NVML could not be used. Not fatal by default: the GPU layer is optional.
struct NvmlLoadFailure {
  std::string path;            // what was given to dlopen
  std::string reason;          // dlerror() text, or the nvmlInit answer
  bool init_failed = false;    // the library loaded but nvmlInit failed
  bool explicit_path = false;  // the user named the library (--nvml-library / EACGM_NVML_LIBRARY)

  // One line for the recorder to print: "GPU layer: cannot load ...: is the NVIDIA driver ...".
  std::string warning() const;
  // The same problem as an error, for when the user asked for this library by name.
  Error error() const;
};

// The library to load: the command line's path, else $EACGM_NVML_LIBRARY, else the default
// soname. `explicit_path` says whether the user chose it.
struct NvmlLibraryChoice {
  std::string path;
  bool explicit_path = false;
};
NvmlLibraryChoice choose_nvml_library(const std::string& cli_path, const char* env_value);

class NvmlLibrary;
struct NvmlLoadResult {
  std::unique_ptr<NvmlLibrary> library;  // null on failure
  NvmlLoadFailure failure;               // meaningful when library is null
  explicit operator bool() const { return library != nullptr; }
};

class NvmlLibrary {
 public:
  static constexpr const char* kDefaultSoname = "libnvidia-ml.so.1";

  // dlopen + dlsym + nvmlInit. Never throws for a library that does not load or initialise.
  static NvmlLoadResult load(const NvmlLibraryChoice& choice);
  // As load(), but a failure is an eacgm::Error (for a library the user asked for).
  static std::unique_ptr<NvmlLibrary> load_or_throw(const NvmlLibraryChoice& choice);

  ~NvmlLibrary();  // nvmlShutdown, dlclose
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlApi& api() const { return api_; }
  const std::string& path() const { return path_; }
  // The preferred names of the functions this library lacks in every version we accept.
  const std::vector<std::string>& missing_functions() const { return missing_; }
  // "Not Supported (code 3)", from nvmlErrorString when the library has it.
  std::string error_text(nvml::Return code) const;

 private:
  NvmlLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void resolve();

  void* handle_ = nullptr;
  std::string path_;
  NvmlApi api_;
  std::vector<std::string> missing_;
  bool initialized_ = false;
};

}  // namespace eacgm
