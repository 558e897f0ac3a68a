// The library side of the gputime layer: CUPTI activity records packed into batches
// (gputime/gpu_batch.h) and handed to eacgm_gputime_batch(), where eacgm's uprobe reads them.
// Used by the injection library (cupti_injection.cpp) and, with records made up, by the tests
// (tests/e2e/workloads/gputime_emitter.cpp), which have no GPU to make real ones.
// No C++ library here (no allocation, no exceptions): the injection library is loaded into any
// CUDA process, next to whatever libstdc++ that process has, or none.
#pragma once
#include <cupti_activity.h>
#include <pthread.h>

#include <cstdint>

#include "gputime/gpu_batch.h"

extern "C" {
// What eacgm probes: called with each full batch and at each flush. It does nothing itself;
// without eacgm attached, the records go nowhere.
void eacgm_gputime_batch(const void* batch, uint32_t bytes);
}

namespace eacgm::gputime {

class ActivityBatcher {
 public:
  // One CUPTI record: kernels (CONCURRENT_KERNEL, KERNEL), copies, memsets and runtime API
  // records are packed; other kinds are ignored. Thread-safe, as are the others.
  void add(const CUpti_Activity* record);
  // An NCCL operation (nccl_profiler.cpp), completed at `now_ns`, with NCCL's strings. What is
  // packed is handed over at once when the batch's first collective is kMaxHoldNs old (the
  // plugin also flushes whenever nothing is in flight).
  void add(GpuCollective c, const char* func, const char* datatype, const char* algo,
           const char* proto, uint64_t now_ns);
  static constexpr uint64_t kMaxHoldNs = 100'000'000;
  void note(const char* text);
  void dropped(uint64_t records);
  // A span in which CUPTI's records were on (duty-cycled; gpu_batch.h's GpuSlice), the next due
  // at next_ns (0: none).
  void slice(uint64_t start_ns, uint64_t end_ns, uint64_t next_ns);
  // Hands what is packed to eacgm_gputime_batch.
  void flush();

 private:
  void put(const void* entry, uint32_t bytes);  // flushes first when it does not fit
  void put_text(EntryKind kind, uint32_t id, const char* text);
  uint32_t name_id(const char* name);
  void flush_locked();

  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  alignas(8) unsigned char buffer_[kGpuBatchBytes] = {};
  uint32_t used_ = 0;
  uint64_t held_since_ns_ = 0;  // the oldest collective waiting in the buffer; 0: none
  // CUPTI shares one name string among the records of one kernel: its address is the key
  // (open addressing; when full, a name is sent again with each use under a new id).
  static constexpr uint32_t kNameSlots = 8192;
  const char* name_keys_[kNameSlots] = {};
  uint32_t name_ids_[kNameSlots] = {};
  uint32_t last_name_id_ = 0;  // ids from 1 (0 is "no name"); all zero: the batcher is in .bss
};

}  // namespace eacgm::gputime
