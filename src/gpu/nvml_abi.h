// The subset of NVML's C ABI that eacgm calls, declared by us (no NVIDIA headers at build time).
// Layouts and values follow NVIDIA's public NVML API reference (nvml.h, CUDA 11.x to 13.x);
// the static_asserts pin the sizes and offsets that reference implies on x86-64 and aarch64.
#pragma once
#include <cstddef>
#include <cstdint>

namespace eacgm::nvml {

// nvmlReturn_t is a C enum: an int.
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorArgumentVersionMismatch = 25;
inline constexpr Return kErrorUnknown = 999;

// Opaque handles (nvmlDevice_t, nvmlEventSet_t).
struct DeviceOpaque;
struct EventSetOpaque;
using Device = DeviceOpaque*;
using EventSet = EventSetOpaque*;

// Enum arguments (C enums: ints).
inline constexpr int kTemperatureGpu = 0;          // nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU
inline constexpr int kClockSm = 1;                 // nvmlClockType_t NVML_CLOCK_SM
inline constexpr int kClockMem = 2;                // nvmlClockType_t NVML_CLOCK_MEM
inline constexpr int kPcieTxBytes = 0;             // nvmlPcieUtilCounter_t NVML_PCIE_UTIL_TX_BYTES
inline constexpr int kPcieRxBytes = 1;             // nvmlPcieUtilCounter_t NVML_PCIE_UTIL_RX_BYTES
inline constexpr int kMemoryErrorCorrected = 0;    // nvmlMemoryErrorType_t
inline constexpr int kMemoryErrorUncorrected = 1;  // nvmlMemoryErrorType_t
inline constexpr int kVolatileEcc = 0;             // nvmlEccCounterType_t NVML_VOLATILE_ECC

inline constexpr unsigned long long kEventTypeXidCriticalError =
    0x8;  // nvmlEventTypeXidCriticalError

// Field ids for nvmlDeviceGetFieldValues: cumulative NVLink data counters in KiB; a scopeId of
// UINT_MAX sums all links.
inline constexpr unsigned kFieldNvlinkThroughputDataTx =
    138;  // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
inline constexpr unsigned kFieldNvlinkThroughputDataRx =
    139;  // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
inline constexpr unsigned kScopeAllLinks = 0xFFFFFFFFu;
// Instantaneous power in mW (nvmlDeviceGetPowerUsage averages over 1 s on Ampere and newer).
inline constexpr unsigned kFieldPowerInstant = 186;  // NVML_FI_DEV_POWER_INSTANT
// Cumulative PCIe bytes, in newer drivers (nvmlDeviceGetPcieThroughput measures for 20 ms).
inline constexpr unsigned kFieldPcieTxBytes = 197;  // NVML_FI_DEV_PCIE_COUNT_TX_BYTES
inline constexpr unsigned kFieldPcieRxBytes = 198;  // NVML_FI_DEV_PCIE_COUNT_RX_BYTES

// nvmlValueType_t
inline constexpr int kValueDouble = 0;
inline constexpr int kValueUnsignedInt = 1;
inline constexpr int kValueUnsignedLong = 2;
inline constexpr int kValueUnsignedLongLong = 3;
inline constexpr int kValueSignedLongLong = 4;
inline constexpr int kValueSignedInt = 5;
inline constexpr int kValueUnsignedShort = 6;

// NVML_VALUE_NOT_AVAILABLE as an unsigned long long (process memory under WDDM, for example).
inline constexpr unsigned long long kValueNotAvailable = ~0ull;

inline constexpr unsigned kDeviceNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kDeviceUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

struct Memory {  // nvmlMemory_t (v1: used includes reserved memory)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlMemory_v2_t (nvmlDeviceGetMemoryInfo_v2, drivers 510+): used without the memory the
// driver and firmware reserve, as nvidia-smi and DCGM's FB_USED report it (on an H100 with
// driver 580, v1's used was ~510 MiB above nvidia-smi's)
struct MemoryV2 {
  unsigned int version;  // kMemoryV2Version
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2): the struct's size, version in the top byte
inline constexpr unsigned kMemoryV2Version = unsigned(sizeof(MemoryV2)) | (2u << 24);

struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t: nvmlDeviceGetComputeRunningProcesses
  unsigned int pid;
  unsigned long long used_gpu_memory;
};

// nvmlProcessInfo_v2_t, also nvmlProcessInfo_t: the _v2 and _v3 functions.
struct ProcessInfoV2 {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct ProcessUtilizationSample {  // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long timestamp_us;  // CPU time (CLOCK_REALTIME) in microseconds
  unsigned int sm_util;
  unsigned int mem_util;
  unsigned int enc_util;
  unsigned int dec_util;
};

struct PciInfo {  // nvmlPciInfo_t, as the _v2 and _v3 functions fill it
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};

union Value {  // nvmlValue_t
  double d;
  int si;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  long long sll;
  unsigned short us;
};

struct FieldValue {  // nvmlFieldValue_t
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp_us;  // CPU time (CLOCK_REALTIME) in microseconds
  long long latency_us;
  int value_type;  // nvmlValueType_t
  Return ret;
  Value value;
};

// nvmlEventData_t as nvmlEventSetWait_v2 fills it; the unversioned function fills only the
// first three members.
struct EventData {
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid for kEventTypeXidCriticalError
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

static_assert(sizeof(Utilization) == 8);
static_assert(sizeof(Memory) == 24);
static_assert(sizeof(ProcessInfoV1) == 16 && offsetof(ProcessInfoV1, used_gpu_memory) == 8);
static_assert(sizeof(ProcessInfoV2) == 24 && offsetof(ProcessInfoV2, gpu_instance_id) == 16);
static_assert(sizeof(ProcessUtilizationSample) == 32);
static_assert(offsetof(ProcessUtilizationSample, timestamp_us) == 8);
static_assert(offsetof(ProcessUtilizationSample, sm_util) == 16);
static_assert(sizeof(PciInfo) == 68 && offsetof(PciInfo, bus_id) == 36);
static_assert(sizeof(Value) == 8);
static_assert(sizeof(MemoryV2) == 40 && offsetof(MemoryV2, used) == 32);
static_assert(sizeof(FieldValue) == 40 && offsetof(FieldValue, value) == 32);
static_assert(sizeof(EventData) == 32 && offsetof(EventData, event_data) == 16);

}  // namespace eacgm::nvml
