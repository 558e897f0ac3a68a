// The gputime layer without a GPU: CUDA never loads an injection library on a machine without
// a driver, so this program feeds the injection library's own batcher (src/gputime/
// activity_batch.cpp, linked in) with CUPTI records it makes up, as CUPTI would hand them over:
// KERNELS kernel executions alternating between two kernels, each with its runtime launch
// record, then a copy each way and a memset. Times are CLOCK_MONOTONIC now, as the library's
// timestamp callback gives them. It prints what it handed over (the test's truth) as JSON.
// With --paced, it runs in real time instead (as a job under the agent): for STEADY seconds the
// two kernels in turn, 190-210 us each, one every 1 ms on stream 7, handed over every 0.1 s;
// then for SLOW seconds the same with every 20th execution of the second kernel 5 ms long.
//   usage: gputime_emitter KERNELS | gputime_emitter --paced STEADY SLOW
#include <cupti_activity.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "gputime/activity_batch.h"

namespace {

eacgm::gputime::ActivityBatcher batcher;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// CUPTI's name strings are shared by the records of one kernel (the batcher keys on them).
const char* const kNames[2] = {"_Z15eacgm_test_axpyPfPKffi", "eacgm_plain_c_kernel"};

void sleep_until(uint64_t t) {
  timespec ts{time_t(t / 1'000'000'000), long(t % 1'000'000'000)};
  clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
}

// --paced: kernels as a steady job runs them, then a phase in which one of them is slow.
int paced(double steady_s, double slow_s) {
  uint64_t t = now_ns(), slow_from = t + uint64_t(steady_s * 1e9),
           end = slow_from + uint64_t(slow_s * 1e9), next_flush = t + 100'000'000;
  uint32_t correlation = 1;
  int slow = 0, kernels = 0;
  for (uint64_t i = 0; t < end; ++i, ++correlation, t += 1'000'000) {
    bool make_slow = t >= slow_from && i % 40 == 1;  // every 20th of the second kernel's
    CUpti_ActivityKernel10 k{};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = t;
    k.end = t + (make_slow ? 5'000'000 : 190'000 + (i * 7919) % 20'001);
    k.deviceId = 0, k.contextId = 1, k.streamId = 7, k.correlationId = correlation;
    k.name = kNames[i % 2];
    if (k.end > t + 1'000'000) t = k.end;  // (one stream: the next starts after it)
    batcher.add(reinterpret_cast<CUpti_Activity*>(&k));
    slow += make_slow, ++kernels;
    if (t >= next_flush) {
      sleep_until(t);  // handed over once the GPU "ran" them
      batcher.flush();
      next_flush = t + 100'000'000;
    }
  }
  batcher.flush();
  printf("{\"kernels\": %d, \"slow\": %d, \"slow_name\": \"%s\", \"slow_from_ns\": %llu, "
         "\"end_ns\": %llu}\n",
         kernels, slow, kNames[1], (unsigned long long)slow_from, (unsigned long long)t);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string_view(argv[1]) == "--paced")
    return paced(atof(argv[2]), atof(argv[3]));
  int kernels = argc > 1 ? atoi(argv[1]) : 300;
  if (kernels < 1) {
    fprintf(stderr, "usage: gputime_emitter KERNELS (a positive number)\n");
    return 2;
  }
  batcher.note("made-up records (tests/e2e/workloads/gputime_emitter.cpp)");
  uint64_t t = now_ns();
  uint32_t correlation = 1000;
  for (int i = 0; i < kernels; ++i, ++correlation) {
    CUpti_ActivityAPI api{};
    api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    api.cbid = 211;  // cudaLaunchKernel
    api.start = t + uint64_t(i) * 10'000;
    api.end = api.start + 3'000;
    api.threadId = 4242;
    api.correlationId = correlation;
    batcher.add(reinterpret_cast<CUpti_Activity*>(&api));
    CUpti_ActivityKernel10 k{};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = api.start + 7'000;                        // queued 7 us
    k.end = k.start + 2'000 + uint64_t(i % 2) * 1'000;  // 2 us, or 3 us for the second name
    k.deviceId = 0;
    k.contextId = 1;
    k.streamId = 7;
    k.correlationId = correlation;
    k.gridX = 128, k.gridY = 1, k.gridZ = 1;
    k.blockX = 256, k.blockY = 1, k.blockZ = 1;
    k.staticSharedMemory = 1024;
    k.dynamicSharedMemory = 2048;
    k.registersPerThread = 32;
    k.name = kNames[i % 2];
    batcher.add(reinterpret_cast<CUpti_Activity*>(&k));
  }
  uint64_t c = t + uint64_t(kernels) * 10'000 + 50'000;
  for (int dir = 1; dir <= 2; ++dir, ++correlation) {  // HtoD, then DtoH
    CUpti_ActivityMemcpy6 m{};
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = uint8_t(dir);
    m.bytes = 1 << 20;
    m.start = c + uint64_t(dir) * 100'000;
    m.end = m.start + 40'000;
    m.deviceId = 0, m.contextId = 1, m.streamId = 7;
    m.correlationId = correlation;
    batcher.add(reinterpret_cast<CUpti_Activity*>(&m));
  }
  CUpti_ActivityMemset4 s{};
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 4096;
  s.start = c + 400'000;
  s.end = s.start + 1'500;
  s.deviceId = 0, s.contextId = 1, s.streamId = 7;
  s.correlationId = correlation;
  batcher.add(reinterpret_cast<CUpti_Activity*>(&s));
  batcher.dropped(3);
  batcher.flush();
  printf(
      "{\"kernels\": %d, \"launches\": %d, \"copies\": 2, \"memsets\": 1, \"start_ns\": %llu, "
      "\"end_ns\": %llu, \"dropped\": 3}\n",
      kernels, kernels, (unsigned long long)t, (unsigned long long)(c + 401'500));
  return 0;
}
