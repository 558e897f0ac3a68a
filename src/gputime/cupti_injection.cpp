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
// Duty cycle (EACGM_GPUTIME_DUTY, duty.h): "full" keeps the records on throughout (what `eacgm
// record` gives the command it launches); ON/PERIOD turns them on for the first ON of every
// PERIOD (1s/10s when the variable is unset: a job that names the library itself, for the
// agent), from a thread of the library's own that wakes twice a period. Each slice's end is
// handed over (a GpuSlice) with the slice's records, so what was not collected is not taken for
// an idle GPU.
//
// CUPTI is loaded with dlopen, not linked: the library must load in a process whose CUPTI lives
// wherever its CUDA came from (a wheel's nvidia/ folder, the toolkit), or nowhere (then it says
// so in a note and does nothing). EACGM_CUPTI_LIB names a libcupti to use instead.
#include <cupti_activity.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "gputime/activity_batch.h"
#include "gputime/cupti_api.h"
#include "gputime/duty.h"
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

// The records the library asks for: executions, and the runtime's kernel launches (their ids in
// cupti_runtime_cbid.h, as numbers so that a CUDA 12 toolkit builds this too: cudaLaunchKernel
// 211, _ptsz 214, cudaLaunchKernelExC 430, _ptsz 431; CUDA 13's __cudaLaunchKernel 505, _ptsz
// 506, unknown to CUDA 12's CUPTI).
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
constexpr CUpti_CallbackId kLaunches[] = {211u, 214u, 430u, 431u, 505u, 506u};

// Turns the records on or off; errors are said the first time only (`say`).
void set_records(bool on, bool say) {
  CUptiResult r;
  for (auto kind : kKinds) {
    r = on ? cupti.enable(kind) : cupti.disable ? cupti.disable(kind) : CUPTI_SUCCESS;
    if (r != CUPTI_SUCCESS && say) note_error(on ? "cuptiActivityEnable" : "cuptiActivityDisable", r);
  }
  if (cupti.enable_runtime_api)
    for (CUpti_CallbackId cbid : kLaunches)
      if ((r = cupti.enable_runtime_api(cbid, on)) != CUPTI_SUCCESS && cbid < 500 && say)
        note_error("cuptiActivityEnableRuntimeApi", r);
}

eacgm::gputime::Duty duty;
pthread_mutex_t duty_mu = PTHREAD_MUTEX_INITIALIZER;
bool collecting = false, exiting = false;  // under duty_mu
uint64_t slice_start_ns = 0;

void sleep_until(uint64_t t_ns) {
  timespec ts{time_t(t_ns / 1'000'000'000ull), long(t_ns % 1'000'000'000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// Ends the slice in progress (under duty_mu): its span handed over with its records.
void end_slice_locked(bool say) {
  if (!collecting) return;
  set_records(false, say);
  collecting = false;
  batcher.slice(slice_start_ns, monotonic_ns());
}

void* duty_loop(void*) {
  bool said = false;
  for (uint64_t period = slice_start_ns;;) {
    sleep_until(period + duty.on_ns);
    pthread_mutex_lock(&duty_mu);
    if (!exiting) end_slice_locked(!said);
    bool done = exiting;
    pthread_mutex_unlock(&duty_mu);
    said = true;
    if (done) return nullptr;
    cupti.flush_all(0);  // the slice's records now, not when a buffer fills periods later
    batcher.flush();
    period += duty.period_ns;
    if (uint64_t now = monotonic_ns(); period < now) period = now;  // a stalled process
    sleep_until(period);
    pthread_mutex_lock(&duty_mu);
    if (!exiting) {  // the slice starts before its records can: it holds them all
      slice_start_ns = monotonic_ns();
      set_records(true, false);
      collecting = true;
    }
    done = exiting;
    pthread_mutex_unlock(&duty_mu);
    if (done) return nullptr;
  }
}

// EACGM_GPUTIME_DUTY into `duty`, said in a note; a duty-cycled one gets its thread. The
// records went on at `first_on_ns`.
void start_duty(uint64_t first_on_ns) {
  const char* set = getenv("EACGM_GPUTIME_DUTY");
  char text[256];
  if (set && !eacgm::gputime::parse_duty(set, duty)) {
    eacgm::gputime::parse_duty(eacgm::gputime::kDefaultDuty, duty);
    snprintf(text, sizeof(text),
             "EACGM_GPUTIME_DUTY=%.64s is not 'full' or ON/PERIOD (e.g. 1s/10s): %s used", set,
             eacgm::gputime::kDefaultDuty);
    batcher.note(text);
  } else if (!set) {
    eacgm::gputime::parse_duty(eacgm::gputime::kDefaultDuty, duty);
  }
  if (duty.full()) return;
  if (!cupti.disable) {
    duty = {};
    batcher.note("this libcupti has no cuptiActivityDisable: GPU time on throughout");
    return;
  }
  snprintf(text, sizeof(text), "GPU time on for %.3g s of every %.3g s (EACGM_GPUTIME_DUTY=%s)",
           double(duty.on_ns) / 1e9, double(duty.period_ns) / 1e9,
           set && strcmp(set, "full") ? set : eacgm::gputime::kDefaultDuty);
  batcher.note(text);
  collecting = true;
  slice_start_ns = first_on_ns;
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&thread, &attr, duty_loop, nullptr) != 0) {
    duty = {};  // no thread to turn them off: on throughout, and said
    collecting = false;
    batcher.note("no thread for the duty cycle: GPU time on throughout");
  }
  pthread_attr_destroy(&attr);
}

void at_exit() {
  pthread_mutex_lock(&duty_mu);
  exiting = true;
  if (collecting) {  // the slice in progress ends here, its records on to the end
    collecting = false;
    batcher.slice(slice_start_ns, monotonic_ns());
  }
  pthread_mutex_unlock(&duty_mu);
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
  uint64_t on_ns = monotonic_ns();
  set_records(true, true);
  atexit(at_exit);
  start_duty(on_ns);
  batcher.flush();
  return 1;
}
