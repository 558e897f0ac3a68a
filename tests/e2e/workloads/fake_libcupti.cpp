// A stand-in for libcupti (the activity API's functions eacgm's injection library calls), for
// the gputime layer's tests on a machine without a GPU, where the real CUPTI refuses to start.
// It keeps what the library turns on and off, and makes a kernel record (with its runtime launch
// record) for each fake_cupti_kernel() call while kernel records are on, in buffers the library
// hands it, given back at cuptiActivityFlushAll or when full, as CUPTI does. The injection
// library loads it through EACGM_CUPTI_LIB; the test program (gputime_duty_host.cpp) calls
// fake_cupti_kernel.
#include <cupti_activity.h>
#include <pthread.h>

#include <cstring>

namespace {

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
CUpti_BuffersCallbackRequestFunc request_buffer = nullptr;
CUpti_BuffersCallbackCompleteFunc complete_buffer = nullptr;
CUpti_TimestampCallbackFunc timestamp = nullptr;
bool kernels_on = false, launches_on = false;
uint8_t* buffer = nullptr;
size_t size = 0, used = 0;
uint32_t correlation = 0;

// Records lie back to back at this stride (GetNextRecord walks them by their kind).
constexpr size_t kStride = (sizeof(CUpti_ActivityKernel10) + 7) & ~size_t(7);
static_assert(sizeof(CUpti_ActivityAPI) <= kStride, "a stride that holds both kinds");

// Hands the buffer in use back (under mu: the library's callback takes its own lock only).
void complete_locked() {
  if (!buffer) return;
  uint8_t* b = buffer;
  size_t valid = used;
  buffer = nullptr, used = 0;
  if (complete_buffer) complete_buffer(nullptr, 0, b, size, valid);
}

uint8_t* slot_locked() {
  if (buffer && used + kStride > size) complete_locked();
  if (!buffer) {
    size_t max_records = 0;
    if (!request_buffer) return nullptr;
    request_buffer(&buffer, &size, &max_records);
    used = 0;
    if (!buffer || size < kStride) return buffer = nullptr, nullptr;
  }
  uint8_t* at = buffer + used;
  used += kStride;
  memset(at, 0, kStride);
  return at;
}

}  // namespace

extern "C" {

// One kernel of `dur_ns` launched now on stream 7: 1 when CUPTI would have recorded it.
__attribute__((visibility("default"))) int fake_cupti_kernel(uint64_t dur_ns, const char* name) {
  pthread_mutex_lock(&mu);
  int recorded = 0;
  if (kernels_on && timestamp) {
    uint64_t now = timestamp();
    ++correlation;
    if (launches_on)
      if (auto* api = reinterpret_cast<CUpti_ActivityAPI*>(slot_locked())) {
        api->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
        api->cbid = 211;
        api->start = now;
        api->end = now + 2'000;
        api->threadId = 4242;
        api->correlationId = correlation;
      }
    if (auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(slot_locked())) {
      k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      k->start = now + 5'000;
      k->end = k->start + dur_ns;
      k->streamId = 7;
      k->contextId = 1;
      k->correlationId = correlation;
      k->gridX = k->gridY = k->gridZ = 1;
      k->blockX = k->blockY = k->blockZ = 32;
      k->name = name;
      recorded = 1;
    }
  }
  pthread_mutex_unlock(&mu);
  return recorded;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                           CUpti_BuffersCallbackCompleteFunc complete) {
  pthread_mutex_lock(&mu);
  request_buffer = request, complete_buffer = complete;
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc callback) {
  timestamp = callback;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  pthread_mutex_lock(&mu);
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) kernels_on = true;
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  pthread_mutex_lock(&mu);
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) kernels_on = false;
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  if (cbid >= 500) return CUPTI_ERROR_INVALID_PARAMETER;  // as CUDA 12's CUPTI answers
  pthread_mutex_lock(&mu);
  if (cbid == 211) launches_on = enable;
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t) {
  pthread_mutex_lock(&mu);
  complete_locked();
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t* b, size_t valid, CUpti_Activity** record) {
  uint8_t* next = *record ? reinterpret_cast<uint8_t*>(*record) + kStride : b;
  if (next + kStride > b + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(next);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiSetThreadIdType(CUpti_ActivityThreadIdType) { return CUPTI_SUCCESS; }

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  *dropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult, const char** text) {
  *text = "fake CUPTI error";
  return CUPTI_SUCCESS;
}

}  // extern "C"
