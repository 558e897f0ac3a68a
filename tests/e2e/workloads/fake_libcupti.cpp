// A stand-in for libcupti (the activity and callback API functions eacgm's injection library
// calls), for the gputime layer's tests on a machine without a GPU, where the real CUPTI
// refuses to start. It keeps what the library turns on and off, and makes a kernel record (with
// its runtime launch record) for each fake_cupti_kernel() call while kernel records are on, in
// buffers the library hands it, given back at cuptiActivityFlushAll or when full, as CUPTI does.
// Each such call is a runtime API call to a subscriber's callback (entry and exit). As CUPTI,
// it is attached from any call of its API until cuptiFinalize, which forgets everything (records
// still in its buffer are lost, and counted). The injection library loads it through
// EACGM_CUPTI_LIB; the test program (gputime_duty_host.cpp) calls fake_cupti_kernel and reads
// fake_cupti_counts, and can play a second client of CUPTI (fake_cupti_second_client).
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <pthread.h>

#include <cstdlib>
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
CUpti_CallbackFunc callback = nullptr;
bool runtime_domain = false;
bool attached = false;
long attached_launches = 0, finalizes = 0, lost = 0;

// Any call of CUPTI's API attaches it (CUPTI initialises lazily).
void attach_locked() { attached = true; }

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

// A second client of CUPTI in the process (torch.profiler's Kineto, as it does): registers buffer
// callbacks of its own, which replace the first client's, and throws away any buffer it did not
// allocate that comes back to it. What it saw and what it threw away are counted.
uint8_t* second_buffers[64];
int second_count = 0;
long second_seen = 0, second_thrown = 0;

void CUPTIAPI second_request(uint8_t** b, size_t* sz, size_t* max_records) {
  *max_records = 0;
  *b = second_count < 64 ? static_cast<uint8_t*>(malloc(16 << 10)) : nullptr;
  *sz = *b ? 16 << 10 : 0;
  if (*b) second_buffers[second_count++] = *b;
}

long kernels_in(const uint8_t* b, size_t valid) {
  long n = 0;
  for (size_t at = 0; at + kStride <= valid; at += kStride)
    n += reinterpret_cast<const CUpti_Activity*>(b + at)->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  return n;
}

void CUPTIAPI second_complete(CUcontext, uint32_t, uint8_t* b, size_t, size_t valid) {
  for (int i = 0; i < second_count; ++i)
    if (second_buffers[i] == b) {
      second_seen += kernels_in(b, valid);
      return;
    }
  second_thrown += kernels_in(b, valid);
}

}  // namespace

extern "C" {

// The bytes each record takes in a buffer (what a buffer of N bytes holds: N / this).
__attribute__((visibility("default"))) long fake_cupti_stride() { return long(kStride); }

__attribute__((visibility("default"))) void fake_cupti_second_client() {
  pthread_mutex_lock(&mu);
  request_buffer = second_request, complete_buffer = second_complete;
  pthread_mutex_unlock(&mu);
}

// The second client's kernels: those it saw in its own buffers, and those it threw away.
__attribute__((visibility("default"))) void fake_cupti_second_counts(long* seen, long* thrown) {
  pthread_mutex_lock(&mu);
  *seen = second_seen, *thrown = second_thrown;
  pthread_mutex_unlock(&mu);
}

// What CUPTI saw: launches while it was attached, its detaches, records lost to them.
__attribute__((visibility("default"))) void fake_cupti_counts(long* attached_calls,
                                                              long* detached, long* lost_records) {
  pthread_mutex_lock(&mu);
  *attached_calls = attached_launches, *detached = finalizes, *lost_records = lost;
  pthread_mutex_unlock(&mu);
}

// A cudaLaunchKernel of a `dur_ns` kernel, now, on stream 7: 1 when CUPTI recorded it. A
// subscriber's callback runs at its entry and exit (outside our lock: it may call CUPTI).
__attribute__((visibility("default"))) int fake_cupti_kernel(uint64_t dur_ns, const char* name) {
  CUpti_CallbackData site{};
  pthread_mutex_lock(&mu);
  CUpti_CallbackFunc cb = runtime_domain ? callback : nullptr;
  if (attached) ++attached_launches;
  pthread_mutex_unlock(&mu);
  site.callbackSite = CUPTI_API_ENTER;
  if (cb) cb(nullptr, CUPTI_CB_DOMAIN_RUNTIME_API, 211, &site);
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
  site.callbackSite = CUPTI_API_EXIT;
  if (cb) cb(nullptr, CUPTI_CB_DOMAIN_RUNTIME_API, 211, &site);
  return recorded;
}

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc cb, void*) {
  pthread_mutex_lock(&mu);
  attach_locked();
  CUptiResult r = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  if (!callback) {
    callback = cb;
    *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&callback);
    r = CUPTI_SUCCESS;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                              CUpti_CallbackDomain domain) {
  pthread_mutex_lock(&mu);
  attach_locked();
  CUptiResult r = subscriber == reinterpret_cast<CUpti_SubscriberHandle>(&callback) && callback
                      ? CUPTI_SUCCESS
                      : CUPTI_ERROR_INVALID_PARAMETER;
  if (r == CUPTI_SUCCESS && domain == CUPTI_CB_DOMAIN_RUNTIME_API) runtime_domain = enable;
  pthread_mutex_unlock(&mu);
  return r;
}

// Detaches: every registration and setting forgotten, what is still buffered lost.
CUptiResult cuptiFinalize() {
  pthread_mutex_lock(&mu);
  if (buffer) lost += long(used / kStride);
  buffer = nullptr, used = 0;  // (the library's memory: leaked, as a real detach would)
  request_buffer = nullptr, complete_buffer = nullptr, timestamp = nullptr;
  kernels_on = launches_on = runtime_domain = false;
  callback = nullptr;
  attached = false;
  ++finalizes;
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                           CUpti_BuffersCallbackCompleteFunc complete) {
  pthread_mutex_lock(&mu);
  attach_locked();
  request_buffer = request, complete_buffer = complete;
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc cb) {
  pthread_mutex_lock(&mu);
  attach_locked();
  timestamp = cb;
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  pthread_mutex_lock(&mu);
  attach_locked();
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) kernels_on = true;
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  pthread_mutex_lock(&mu);
  attach_locked();
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) kernels_on = false;
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  if (cbid >= 500) return CUPTI_ERROR_INVALID_PARAMETER;  // as CUDA 12's CUPTI answers
  pthread_mutex_lock(&mu);
  attach_locked();
  if (cbid == 211) launches_on = enable;
  pthread_mutex_unlock(&mu);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t) {
  pthread_mutex_lock(&mu);
  attach_locked();
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
