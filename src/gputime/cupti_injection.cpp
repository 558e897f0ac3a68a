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
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <initializer_list>  // header-only: the library links no libstdc++

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

// Buffers for CUPTI's records. CUPTI hands each process one set of buffer callbacks: a second
// client in the job (torch.profiler's Kineto, Nsight Systems) that registers its own after ours
// is handed every buffer CUPTI completes from then on, ours too, and throws away the ones it
// did not allocate. The records in our buffers then (per thread: CUPTI keeps a buffer for each
// thread) are lost to both, so that the job's own profiler misses its first records. On an H200
// (bench/gpu_profiler_beside.sh, bench/README.md) torch.profiler saw 12% of a 150-step
// training's kernels beside 4 MB buffers, 93% beside 256 KB ones and 99.6% beside 32 KB ones,
// which cost the training no more: EACGM_GPUTIME_BUFFER_KB, 32 by default. eacgm's GPU time
// in that process stops there (CUPTI delivers to the other client): said at exit.
// The reverse (a client that registered before ours, whose buffers are in flight when we
// register, as a duty-cycled attach can) hands us buffers that are not ours: they are left to
// their owner, not read or freed, and said at exit.
size_t buffer_bytes = 32 << 10;  // set once, in InitializeInjection
constexpr int kOwnedSlots = 4096;
uint8_t* owned[kOwnedSlots];  // our buffers in CUPTI's hands (__atomic_*)
uint64_t buffers_given = 0, buffers_back = 0, buffers_foreign = 0, buffers_short = 0;  // __atomic_*

// Moves slot contents `from` -> `to` in the first slot that holds `from` (a plain load first: a
// locked exchange only where it can succeed, so a scan past busy slots costs loads alone).
bool swap_slot(uint8_t* from, uint8_t* to) {
  for (int i = 0; i < kOwnedSlots; ++i) {
    uint8_t* expected = from;
    if (__atomic_load_n(&owned[i], __ATOMIC_RELAXED) == from &&
        __atomic_compare_exchange_n(&owned[i], &expected, to, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST))
      return true;
  }
  return false;
}
bool own(uint8_t* b) { return swap_slot(nullptr, b); }
bool disown(uint8_t* b) { return swap_slot(b, nullptr); }

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  *size = 0;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, buffer_bytes));
  if (*buffer && !own(*buffer)) {  // 4,096 buffers out: CUPTI drops records (counted) instead
    free(*buffer);
    *buffer = nullptr;
    __atomic_add_fetch(&buffers_short, 1, __ATOMIC_SEQ_CST);
  }
  if (!*buffer) return;
  *size = buffer_bytes;
  __atomic_add_fetch(&buffers_given, 1, __ATOMIC_SEQ_CST);
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
  if (!disown(buffer)) {  // another client's, in flight when we registered: its owner's
    __atomic_add_fetch(&buffers_foreign, 1, __ATOMIC_SEQ_CST);
    return;
  }
  __atomic_add_fetch(&buffers_back, 1, __ATOMIC_SEQ_CST);
  CUpti_Activity* record = nullptr;
  while (cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) batcher.add(record);
  size_t dropped = 0;
  if (cupti.dropped && cupti.dropped(context, stream, &dropped) == CUPTI_SUCCESS && dropped)
    batcher.dropped(dropped);
  batcher.flush();
  free(buffer);
}

// At exit, after the last flush: buffers of ours that never came back went to another client.
void note_buffers() {
  uint64_t given = __atomic_load_n(&buffers_given, __ATOMIC_SEQ_CST);
  uint64_t back = __atomic_load_n(&buffers_back, __ATOMIC_SEQ_CST);
  uint64_t foreign = __atomic_load_n(&buffers_foreign, __ATOMIC_SEQ_CST);
  uint64_t short_ = __atomic_load_n(&buffers_short, __ATOMIC_SEQ_CST);
  char text[400];
  if (given > back) {
    snprintf(text, sizeof(text),
             "%llu of %llu CUPTI record buffers never came back: another CUPTI client in this "
             "process (torch.profiler, Nsight Systems) took over CUPTI's records, and GPU time "
             "stopped then",
             (unsigned long long)(given - back), (unsigned long long)given);
    batcher.note(text);
  }
  if (foreign) {
    snprintf(text, sizeof(text),
             "%llu buffers of another CUPTI client in this process came to eacgm: left to it, "
             "unread", (unsigned long long)foreign);
    batcher.note(text);
  }
  if (short_) {
    snprintf(text, sizeof(text), "%llu CUPTI buffers refused (4,096 already out): records dropped",
             (unsigned long long)short_);
    batcher.note(text);
  }
}

// EACGM_GPUTIME_BUFFER_KB into buffer_bytes (16 KB to 64 MB), said when it is not a size.
void set_buffer_bytes() {
  const char* set = getenv("EACGM_GPUTIME_BUFFER_KB");
  if (!set || !*set) return;
  char* end = nullptr;
  errno = 0;
  unsigned long long kb = strtoull(set, &end, 10);
  if (errno || *end || kb < 16 || kb > 65536) {
    char text[200];
    snprintf(text, sizeof(text),
             "EACGM_GPUTIME_BUFFER_KB=%.32s is not a size in KB from 16 to 65536: %zu used", set,
             buffer_bytes >> 10);
    batcher.note(text);
    return;
  }
  buffer_bytes = size_t(kb) << 10;
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

// CUPTI on this process: its clock, thread ids and our buffers. Again after each detach (CUPTI
// forgets everything at cuptiFinalize). False when it would not take our buffers.
bool attach(bool say) {
  CUptiResult r;
  if (!cupti.timestamp_callback) {
    if (say)
      batcher.note(
          "no cuptiActivityRegisterTimestampCallback (CUPTI before 12.6?): GPU times "
          "are on CUPTI's clock, not the recording's");
  } else if ((r = cupti.timestamp_callback(monotonic_ns)) != CUPTI_SUCCESS && say) {
    note_error("cuptiActivityRegisterTimestampCallback", r);
  }
  if (cupti.thread_id_type &&
      (r = cupti.thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)) != CUPTI_SUCCESS && say)
    note_error("cuptiSetThreadIdType", r);
  if ((r = cupti.register_callbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS) {
    note_error("cuptiActivityRegisterCallbacks", r);
    return false;
  }
  return true;
}

// Detaching between slices. On an H200, turning the records off (cuptiActivityDisable) gave back
// only a third of CUPTI's cost (a tenth of the kernels recorded, the job still 11% slower:
// bench/README.md): what costs the launching thread is CUPTI being attached. So at a slice's end
// the library detaches CUPTI (cuptiFinalize), where CUPTI says it is safe: at the exit of a CUDA
// runtime or driver call, in a callback of ours that is subscribed only while attached; the
// next slice attaches it again. The state moves attached -> wanted (the slice ended) ->
// detaching (a callback took it) -> detached -> attached (the next slice), by atomic exchanges:
// neither side holds a lock of ours while CUPTI runs the other's code. EACGM_GPUTIME_DETACH=0
// (or a CUPTI without the callback API, or another subscriber such as Nsight) keeps it attached
// and turns the records off instead.
// The slice that ended, handed over after its records (so that a reader that has the slice has
// its records): by the duty thread, or by the callback that detaches (which takes it over
// through detach_state's exchange, as it takes CUPTI).
struct Pending {
  uint64_t start_ns = 0, end_ns = 0, next_ns = 0;
  bool set = false;
} pending;  // under pending_mu (taken last: only the batcher's lock is taken inside it)
pthread_mutex_t pending_mu = PTHREAD_MUTEX_INITIALIZER;

void set_pending(uint64_t start_ns, uint64_t end_ns, uint64_t next_ns) {
  pthread_mutex_lock(&pending_mu);
  pending = {start_ns, end_ns, next_ns, true};
  pthread_mutex_unlock(&pending_mu);
}

void hand_over_slice() {
  pthread_mutex_lock(&pending_mu);
  if (pending.set) batcher.slice(pending.start_ns, pending.end_ns, pending.next_ns);
  pending.set = false;
  batcher.flush();
  pthread_mutex_unlock(&pending_mu);
}

enum : int { kAttached, kDetachWanted, kDetaching, kDetached };
int detach_state = kAttached;  // __atomic_*
bool detach_between = false;   // set before the duty thread starts
CUpti_SubscriberHandle subscriber = nullptr;
uint64_t detaches = 0;  // the duty thread's count, said at exit

int state() { return __atomic_load_n(&detach_state, __ATOMIC_SEQ_CST); }
bool move(int from, int to) {
  return __atomic_compare_exchange_n(&detach_state, &from, to, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST);
}

void CUPTIAPI at_api_exit(void*, CUpti_CallbackDomain domain, CUpti_CallbackId, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  if (static_cast<const CUpti_CallbackData*>(data)->callbackSite != CUPTI_API_EXIT) return;
  if (state() != kDetachWanted || !move(kDetachWanted, kDetaching)) return;
  cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // the slice's records, before CUPTI forgets
  hand_over_slice();
  cupti.finalize();
  __atomic_store_n(&detach_state, kDetached, __ATOMIC_SEQ_CST);
}

bool subscribe(bool say) {
  CUptiResult r = cupti.subscribe(&subscriber, at_api_exit, nullptr);
  if (r != CUPTI_SUCCESS) {
    if (say) note_error("cuptiSubscribe (detaching between slices; records turned off instead)", r);
    return false;
  }
  for (auto domain : {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API})
    if ((r = cupti.enable_domain(1, subscriber, domain)) != CUPTI_SUCCESS) {
      if (say) note_error("cuptiEnableDomain", r);
      return false;
    }
  return true;
}

// Waits out a callback that is detaching CUPTI; returns the state after.
int settled() {
  int s;
  while ((s = state()) == kDetaching) {
    timespec ms{0, 1'000'000};
    nanosleep(&ms, nullptr);
  }
  return s;
}

eacgm::gputime::Duty duty;
constexpr uint64_t kGraceNs = 100'000'000;  // for a slice's last kernels to complete
pthread_mutex_t duty_mu = PTHREAD_MUTEX_INITIALIZER;
bool collecting = false, exiting = false;  // under duty_mu
uint64_t slice_start_ns = 0;

void sleep_until(uint64_t t_ns) {
  timespec ts{time_t(t_ns / 1'000'000'000ull), long(t_ns % 1'000'000'000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// Ends the slice in progress (under duty_mu): its records off, its span to be handed over after
// them (hand_over_late); the next slice is due at next_ns.
void end_slice_locked(bool say, uint64_t next_ns) {
  if (!collecting) return;
  set_records(false, say);
  collecting = false;
  set_pending(slice_start_ns, monotonic_ns(), next_ns);
}

// A grace after a slice's end (its kernels still queued or running then complete: CUPTI hands
// over only buffers whose records are complete, and forgets the rest at a detach), then its
// records and its span handed over by this thread, whether or not the job calls CUDA (a stalled
// job's slice comes now, not at the next), and only then CUPTI to be detached at the next CUDA
// call's exit. False when the process is exiting (at_exit hands them over).
bool hand_over_late(uint64_t next_start_ns) {
  uint64_t now = monotonic_ns(), grace = kGraceNs;
  if (next_start_ns > now && (next_start_ns - now) / 2 < grace) grace = (next_start_ns - now) / 2;
  sleep_until(now + grace);  // (at most half the time to the next slice)
  pthread_mutex_lock(&duty_mu);
  bool go_on = !exiting;
  if (go_on) {
    cupti.flush_all(0);
    hand_over_slice();
    if (detach_between) __atomic_store_n(&detach_state, kDetachWanted, __ATOMIC_SEQ_CST);
  }
  pthread_mutex_unlock(&duty_mu);
  return go_on;
}

// Starts a slice (under duty_mu): CUPTI attached again where it was detached. False when it
// would not attach (said once): no more slices then.
bool start_slice_locked() {
  slice_start_ns = monotonic_ns();  // before its records can come: the slice holds them all
  if (detach_between && move(kDetachWanted, kAttached)) {  // no CUDA call since: still attached
    cupti.flush_all(0);  // (so the last slice's records, and then the slice, are handed over)
    hand_over_slice();
  } else if (detach_between) {
    if (settled() == kDetached) {
      if (!attach(false) || !subscribe(false)) {
        batcher.note("CUPTI would not attach again after detaching: no more GPU time");
        return false;
      }
      ++detaches;
      __atomic_store_n(&detach_state, kAttached, __ATOMIC_SEQ_CST);
    }
  }
  set_records(true, false);
  collecting = true;
  return true;
}

void* duty_loop(void*) {
  bool said = false;
  for (uint64_t period = slice_start_ns;;) {
    sleep_until(slice_start_ns + duty.on_ns);  // (written by this thread only: each lasts ON)
    period += duty.period_ns;
    if (uint64_t now = monotonic_ns(); period < now) period = now;  // a stalled process
    pthread_mutex_lock(&duty_mu);
    if (!exiting) end_slice_locked(!said, period);
    bool done = exiting;
    pthread_mutex_unlock(&duty_mu);
    said = true;
    if (done || !hand_over_late(period)) return nullptr;
    sleep_until(period);
    pthread_mutex_lock(&duty_mu);
    done = exiting || !start_slice_locked();
    pthread_mutex_unlock(&duty_mu);
    if (done) return nullptr;
  }
}

// EACGM_GPUTIME_DUTY into `duty`, said in a note; a duty-cycled one gets its thread. The
// records went on at `first_on_ns`.
void start_duty(uint64_t first_on_ns) {
  const char* set = getenv("EACGM_GPUTIME_DUTY");
  char text[320];
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
  const char* keep = getenv("EACGM_GPUTIME_DETACH");
  detach_between = cupti.can_detach() && !(keep && !strcmp(keep, "0")) && subscribe(true);
  snprintf(text, sizeof(text),
           "GPU time on for %.3g s of every %.3g s (EACGM_GPUTIME_DUTY=%s), CUPTI %s between",
           double(duty.on_ns) / 1e9, double(duty.period_ns) / 1e9,
           set && strcmp(set, "full") ? set : eacgm::gputime::kDefaultDuty,
           detach_between ? "detached" : "attached, its records off,");
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

pid_t owner = 0;  // the process that loaded the library (a forked child inherits at_exit only)

void at_exit() {
  // A child forked from the job has no duty thread, and its copies of our locks may have been
  // held by the parent's threads at the fork: it leaves CUPTI and our state alone.
  if (getpid() != owner) return;
  pthread_mutex_lock(&duty_mu);
  exiting = true;
  // no detach from here on; one under way is waited out (it hands its records over itself)
  bool detached = detach_between && !move(kDetachWanted, kAttached) && settled() == kDetached;
  if (collecting) {  // the slice in progress ends here, its records on to the end
    collecting = false;
    set_pending(slice_start_ns, monotonic_ns(), 0);
  }
  pthread_mutex_unlock(&duty_mu);
  if (!detached && cupti.flush_all) cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  hand_over_slice();
  note_buffers();
  if (detaches) {
    char text[96];
    snprintf(text, sizeof(text), "CUPTI detached and attached again %llu times",
             (unsigned long long)detaches);
    batcher.note(text);
  }
  batcher.flush();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static bool once = false;
  if (once) return 1;
  once = true;
  set_buffer_bytes();
  if (!load_cupti() || !attach(true)) {
    batcher.flush();
    return 0;
  }
  uint64_t on_ns = monotonic_ns();
  set_records(true, true);
  owner = getpid();
  atexit(at_exit);
  start_duty(on_ns);
  batcher.flush();
  return 1;
}
