// libeacgm_cupti.so: eacgm's CUDA injection library (the gputime layer). CUDA loads the file
// named by CUDA_INJECTION64_PATH at a process's first CUDA call and calls InitializeInjection;
// `eacgm record -- CMD` sets it for the command it launches, and a job eacgm does not launch
// sets it itself (docs/layers.md). It turns on CUPTI's activity records of kernels, copies and
// memsets (when each ran on the GPU) and of the runtime's kernel launches (each launch's
// correlation id and thread, which link an execution to the launch that eacgm's uprobes see),
// puts CUPTI's times on CLOCK_MONOTONIC (eacgm's clock) and hands every record to
// eacgm_gputime_batch (activity_batch.h), where eacgm's uprobe reads it.
//
// Cost, measured on an H200 (bench/README.md, "On a real GPU"): kernel records cost a
// launch-bound training 8-17% (CUPTI's work on the launching thread); the launch records add
// nothing measurable beyond that, the full runtime and driver API records as much again (so
// they are not asked for).
//
// CUPTI is loaded with dlopen, not linked: the library must load in a process whose CUPTI lives
// wherever its CUDA came from (a wheel's nvidia/ folder, the toolkit), or nowhere (then it says
// so in a note and does nothing). EACGM_CUPTI_LIB names a libcupti to use instead.
#include <cupti_activity.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <initializer_list>  // header-only: the library links no libstdc++

#include "gputime/activity_batch.h"
#include "gputime/cupti_api.h"
#include "gputime/library.h"

eacgm::gputime::ActivityBatcher eacgm::gputime::library_batcher;

namespace {

eacgm::gputime::CuptiApi cupti;
eacgm::gputime::ActivityBatcher& batcher = eacgm::gputime::library_batcher;

uint64_t CUPTIAPI monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

void note_error(const char* what, CUptiResult r) {
  const char* s = "?";
  if (cupti.result_string) cupti.result_string(r, &s);
  char text[512];
  snprintf(text, sizeof(text), "%s: %s", what, s);
  batcher.note(text);
}

bool load_cupti() {
  void* h = eacgm::gputime::open_cupti();
  if (!h) {
    batcher.note("no libcupti found beside the CUDA runtime (set EACGM_CUPTI_LIB to one)");
    return false;
  }
  char origin[4096] = "?", text[4200];
  dlinfo(h, RTLD_DI_ORIGIN, origin);
  snprintf(text, sizeof(text), "CUPTI from %s", origin);
  batcher.note(text);
  cupti = eacgm::gputime::cupti_api(h);
  if (!cupti.usable()) {
    batcher.note("this libcupti lacks the activity API's functions");
    return false;
  }
  return true;
}

constexpr size_t kBufferBytes = 4 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) batcher.add(record);
  size_t dropped = 0;
  if (cupti.dropped && cupti.dropped(context, stream, &dropped) == CUPTI_SUCCESS && dropped)
    batcher.dropped(dropped);
  batcher.flush();
  free(buffer);
}

void at_exit() {
  if (cupti.flush_all) cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  batcher.flush();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static bool once = false;
  if (once) return 1;
  once = true;
  if (!load_cupti()) {
    batcher.flush();
    return 0;
  }
  CUptiResult r;
  if (!cupti.timestamp_callback)
    batcher.note(
        "no cuptiActivityRegisterTimestampCallback (CUPTI before 12.6?): GPU times "
        "are on CUPTI's clock, not the recording's");
  else if ((r = cupti.timestamp_callback(monotonic_ns)) != CUPTI_SUCCESS)
    note_error("cuptiActivityRegisterTimestampCallback", r);
  if (cupti.thread_id_type &&
      (r = cupti.thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)) != CUPTI_SUCCESS)
    note_error("cuptiSetThreadIdType", r);
  if ((r = cupti.register_callbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS) {
    note_error("cuptiActivityRegisterCallbacks", r);
    batcher.flush();
    return 0;
  }
  for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                    CUPTI_ACTIVITY_KIND_MEMSET})
    if ((r = cupti.enable(kind)) != CUPTI_SUCCESS) note_error("cuptiActivityEnable", r);
  // Only the runtime's kernel launches (cupti_runtime_cbid.h's ids, as numbers so that a CUDA
  // 12 toolkit builds this too): cudaLaunchKernel 211, _ptsz 214, cudaLaunchKernelExC 430,
  // _ptsz 431; CUDA 13's __cudaLaunchKernel 505, _ptsz 506 (unknown to CUDA 12's CUPTI).
  if (cupti.enable_runtime_api)
    for (CUpti_CallbackId cbid : {211u, 214u, 430u, 431u, 505u, 506u})
      if ((r = cupti.enable_runtime_api(cbid, 1)) != CUPTI_SUCCESS && cbid < 500)
        note_error("cuptiActivityEnableRuntimeApi", r);
  atexit(at_exit);
  batcher.flush();
  return 1;
}
