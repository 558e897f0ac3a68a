// The GPU check's probe for GPU-side time (issue 36): a CUDA injection library
// (CUDA_INJECTION64_PATH) that records, through CUPTI's Activity API, when each kernel, copy and
// memset ran on the GPU, on CLOCK_MONOTONIC (the clock of eacgm's BPF timestamps), and
// optionally the runtime and driver API records that carry the same correlation ids and the
// launching thread's id. It answers on a real GPU what the design of issue 36 depends on and
// no machine without one can: whether CUDA loads the library and calls InitializeInjection,
// whether CUPTI's timestamp callback puts GPU times on our clock (a kernel starts after its
// launch call began), how each execution links to its launch, and what this costs a training.
// Not the product's library: it writes text lines, for scripts/gpu_check/compare.py.
//
// Environment: EACGM_CUPTI_OUT (path prefix; each process writes PREFIX.PID.tsv),
// EACGM_CUPTI_API=1 (also the runtime and driver API records; =launch: only the runtime's kernel
// launches, the cheapest way to learn each launch's correlation id and thread),
// EACGM_CUPTI_DUTY=ON_MS/PERIOD_MS (activity on for ON_MS of every PERIOD_MS, off between: does
// turning it off give the launching thread its 8-10 us back?), EACGM_CUPTI_KERNELS_ONLY=1 (no
// copies or memsets), EACGM_CUPTI_QUIET=1 (count the records, write only the totals: what the
// records cost without the writing), EACGM_CUPTI_LIB (libcupti to load; otherwise the first
// found beside the process's libcudart, then the toolkit's). bench/gpu_time_cost.sh times them.
// Lines: K start end device stream corr grid block name | M start end device stream corr
// bytes copykind | S start end device stream corr bytes | A kind cbid start end tid corr |
// E message.  Build: g++ -std=c++20 -shared -fPIC -O2 -I$CUDA/include -Isrc cupti_probe.cpp -ldl
#include <cupti_activity.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gputime/cupti_api.h"

namespace {

eacgm::gputime::CuptiApi cupti;  // (src/gputime/cupti_api.h, as the product loads it)
FILE* out = nullptr;
bool quiet = false;
std::mutex out_mutex;
std::atomic<uint64_t> kernels{0}, copies{0}, memsets{0}, apis{0}, buffers{0};

uint64_t CUPTIAPI monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

void error(const char* what, CUptiResult r) {
  const char* s = "?";
  if (cupti.result_string) cupti.result_string(r, &s);
  std::lock_guard lock(out_mutex);
  if (out) fprintf(out, "E %s: %s\n", what, s);
  fprintf(stderr, "cupti_probe: %s: %s\n", what, s);
}

bool load_cupti() {
  void* h = eacgm::gputime::open_cupti();
  if (!h) {
    fprintf(out, "E no libcupti found (set EACGM_CUPTI_LIB)\n");
    return false;
  }
  char path[4096] = "?";
  dlinfo(h, RTLD_DI_ORIGIN, path);
  fprintf(out, "E loaded CUPTI (from %s)\n", path);
  cupti = eacgm::gputime::cupti_api(h);
  return cupti.usable();
}

constexpr size_t kBufferBytes = 4 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  ++buffers;
  CUpti_Activity* record = nullptr;
  std::lock_guard lock(out_mutex);
  while (cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (quiet) {
      auto k = record->kind;
      ++(k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ? kernels
         : k == CUPTI_ACTIVITY_KIND_MEMCPY          ? copies
         : k == CUPTI_ACTIVITY_KIND_MEMSET          ? memsets
                                                    : apis);
      continue;
    }
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        ++kernels;
        fprintf(out, "K %llu %llu %u %u %u %dx%dx%d %dx%dx%d %s\n", (unsigned long long)k->start,
                (unsigned long long)k->end, k->deviceId, k->streamId, k->correlationId, k->gridX,
                k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ, k->name ? k->name : "?");
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
        ++copies;
        fprintf(out, "M %llu %llu %u %u %u %llu %u\n", (unsigned long long)m->start,
                (unsigned long long)m->end, m->deviceId, m->streamId, m->correlationId,
                (unsigned long long)m->bytes, unsigned(m->copyKind));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(record);
        ++memsets;
        fprintf(out, "S %llu %llu %u %u %u %llu\n", (unsigned long long)m->start,
                (unsigned long long)m->end, m->deviceId, m->streamId, m->correlationId,
                (unsigned long long)m->bytes);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        auto* a = reinterpret_cast<CUpti_ActivityAPI*>(record);
        ++apis;
        fprintf(out, "A %c %u %llu %llu %u %u\n", record->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? 'R' : 'D',
                unsigned(a->cbid), (unsigned long long)a->start, (unsigned long long)a->end,
                a->threadId, a->correlationId);
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  if (cupti.dropped && cupti.dropped(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped)
    fprintf(out, "E dropped %zu records\n", dropped);
  free(buffer);
}

void at_exit() {
  if (cupti.flush_all) cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard lock(out_mutex);
  if (out) {
    fprintf(out, "E done: %llu kernels, %llu copies, %llu memsets, %llu API records, %llu buffers\n",
            (unsigned long long)kernels, (unsigned long long)copies, (unsigned long long)memsets,
            (unsigned long long)apis, (unsigned long long)buffers);
    fclose(out);
    out = nullptr;
  }
}

// Turns the kinds on for on_ms of every period_ms; the records of an "on" slice arrive in the
// buffers as usual. Detached: the process's exit ends it.
void duty_cycle(std::vector<CUpti_ActivityKind> kinds, unsigned on_ms, unsigned period_ms) {
  std::thread([=] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(on_ms));
      for (auto k : kinds) cupti.disable(k);
      std::this_thread::sleep_for(std::chrono::milliseconds(period_ms - on_ms));
      for (auto k : kinds) cupti.enable(k);
    }
  }).detach();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::atomic<bool> once{false};
  if (once.exchange(true)) return 1;
  const char* prefix = getenv("EACGM_CUPTI_OUT");
  std::string path = std::string(prefix ? prefix : "/tmp/eacgm-cupti") + "." +
                     std::to_string(getpid()) + ".tsv";
  out = fopen(path.c_str(), "w");
  if (!out) return 0;
  fprintf(out, "E InitializeInjection at %llu (CLOCK_MONOTONIC ns)\n",
          (unsigned long long)monotonic_ns());
  if (!load_cupti()) {
    fflush(out);
    return 0;
  }
  CUptiResult r;
  if (cupti.timestamp_callback && (r = cupti.timestamp_callback(monotonic_ns)) != CUPTI_SUCCESS)
    error("cuptiActivityRegisterTimestampCallback", r);
  else if (!cupti.timestamp_callback)
    fprintf(out, "E no cuptiActivityRegisterTimestampCallback: times on CUPTI's own clock\n");
  if (cupti.thread_id_type &&
      (r = cupti.thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)) != CUPTI_SUCCESS)
    error("cuptiSetThreadIdType", r);
  if ((r = cupti.register_callbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS) {
    error("cuptiActivityRegisterCallbacks", r);
    return 0;
  }
  auto set = [](const char* name) {
    const char* v = getenv(name);
    return v && *v == '1';
  };
  quiet = set("EACGM_CUPTI_QUIET");
  std::vector<CUpti_ActivityKind> kinds = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};
  if (!set("EACGM_CUPTI_KERNELS_ONLY")) {
    kinds.push_back(CUPTI_ACTIVITY_KIND_MEMCPY);
    kinds.push_back(CUPTI_ACTIVITY_KIND_MEMSET);
  }
  const char* api = getenv("EACGM_CUPTI_API");
  if (api && std::string(api) == "launch" && cupti.enable_runtime_api) {
    // cupti_runtime_cbid.h's ids (stable; numbers, so a CUDA 12 toolkit builds it too):
    // cudaLaunchKernel 211, _ptsz 214, cudaLaunchKernelExC 430, _ptsz 431, CUDA 13's
    // __cudaLaunchKernel 505, _ptsz 506.
    for (CUpti_CallbackId cbid : {211u, 214u, 430u, 431u, 505u, 506u})
      if ((r = cupti.enable_runtime_api(cbid, 1)) != CUPTI_SUCCESS)
        error("cuptiActivityEnableRuntimeApi", r);
  } else if (set("EACGM_CUPTI_API")) {
    kinds.push_back(CUPTI_ACTIVITY_KIND_RUNTIME);
    kinds.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
  }
  for (auto kind : kinds)
    if ((r = cupti.enable(kind)) != CUPTI_SUCCESS) error("cuptiActivityEnable", r);
  unsigned on_ms = 0, period_ms = 0;
  if (const char* duty = getenv("EACGM_CUPTI_DUTY");
      duty && sscanf(duty, "%u/%u", &on_ms, &period_ms) == 2 && on_ms > 0 && on_ms < period_ms &&
      cupti.disable) {
    fprintf(out, "E duty cycle: on %u ms of every %u ms\n", on_ms, period_ms);
    duty_cycle(kinds, on_ms, period_ms);
  }
  atexit(at_exit);
  fflush(out);
  return 1;
}
