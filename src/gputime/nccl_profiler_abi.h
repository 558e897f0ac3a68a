// NCCL's profiler plugin interface, versions 5 (NCCL 2.28) and 4 (NCCL 2.26-2.27): the layout of
// what NCCL passes a plugin, written down from NCCL's published interface (ext-profiler/README.md
// and its profiler_v4.h/profiler_v5.h) for the parts eacgm reads. NCCL's headers are not
// installed with the library (only its source tree has them), so the library carries its own.
// Plain C layouts; the static_asserts pin the offsets on x86_64 and aarch64 (LP64).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace eacgm::nccl_abi {

using Result = int;  // ncclResult_t; 0 is ncclSuccess
inline constexpr Result kSuccess = 0;
inline constexpr Result kInternalError = 3;

// Event types (the activation mask's bits)
inline constexpr uint64_t kColl = 1 << 1;
inline constexpr uint64_t kP2p = 1 << 2;
inline constexpr uint64_t kKernelCh = 1 << 6;
// recordEventState's state for a channel's kernel that stopped (its GPU timer in the args)
inline constexpr int kKernelChStop = 22;

// The part of an event descriptor after its header; the same in v4 and v5 for what eacgm reads.
struct CollDescr {
  uint64_t seq;  // NCCL's sequence number of the collective in its communicator
  const char* func;
  const void* send_buffer;
  void* recv_buffer;
  size_t count;
  int root;
  const char* datatype;
  uint8_t channels;
  uint8_t warps;
  const char* algo;
  const char* proto;
};
struct P2pDescr {
  const char* func;
  void* buffer;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t channels;
};
struct KernelChDescr {
  uint8_t channel;
  uint64_t gpu_timer;  // the GPU's globaltimer when the channel's kernel started
};
union EventDetail {
  CollDescr coll;
  P2pDescr p2p;
  KernelChDescr kernel_channel;
  unsigned char v5_size[96];  // v5's union has larger members eacgm does not read
};

struct EventDescrV5 {
  uint64_t type;
  void* parent;  // the handle the plugin gave the parent event (a KernelCh's: its coll or p2p)
  int rank;
  EventDetail detail;
};
struct EventDescrV4 {
  uint8_t type;
  void* parent;
  int rank;
  EventDetail detail;
};
static_assert(offsetof(EventDescrV5, detail) == 24 && offsetof(EventDescrV4, detail) == 24);
static_assert(offsetof(CollDescr, datatype) == 48 && offsetof(CollDescr, channels) == 56 &&
              offsetof(CollDescr, algo) == 64 && offsetof(CollDescr, proto) == 72);
static_assert(offsetof(P2pDescr, peer) == 32 && offsetof(P2pDescr, channels) == 36);
static_assert(offsetof(KernelChDescr, gpu_timer) == 8);

// recordEventState's arguments: for kKernelChStop, the GPU's globaltimer when the kernel stopped
union EventStateArgs {
  struct {
    uint64_t gpu_timer;
  } kernel_channel;
  unsigned char size[16];
};

using StartEvent = Result (*)(void* context, void** handle, void* descr);
using StopEvent = Result (*)(void* handle);
using RecordEventState = Result (*)(void* handle, int state, EventStateArgs* args);
using Finalize = Result (*)(void* context);

struct ProfilerV5 {
  const char* name;
  Result (*init)(void** context, uint64_t comm_hash, int* activation_mask, const char* comm_name,
                 int nodes, int nranks, int rank, void* log);
  StartEvent start_event;
  StopEvent stop_event;
  RecordEventState record_event_state;
  Finalize finalize;
};
struct ProfilerV4 {
  const char* name;
  Result (*init)(void** context, int* activation_mask, const char* comm_name, uint64_t comm_hash,
                 int nodes, int nranks, int rank, void* log);
  StartEvent start_event;
  StopEvent stop_event;
  RecordEventState record_event_state;
  Finalize finalize;
};

}  // namespace eacgm::nccl_abi
