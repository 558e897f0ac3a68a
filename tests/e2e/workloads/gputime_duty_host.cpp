// The injection library as CUDA loads it, on a machine without a GPU: loads the library that
// CUDA_INJECTION64_PATH names and calls its InitializeInjection, as the CUDA driver does at a
// process's first CUDA call, with the fake CUPTI (fake_libcupti.cpp) that EACGM_CUPTI_LIB names;
// then launches a 100 us "kernel" every millisecond for SECONDS and prints how many CUPTI
// recorded, how many it saw while attached and how often it was detached (the test's truth),
// as JSON; the last two after exit handlers ran (the library's flush at exit).
// With FAKE_SECOND_CLIENT_AT=S, a second client of CUPTI (as torch.profiler is) registers its
// buffer callbacks S seconds in, and the kernels recorded before it, those it saw and those it
// threw away are printed too.
//   usage: gputime_duty_host SECONDS
#include <dlfcn.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

using Counts = void (*)(long*, long*, long*);
Counts counts = nullptr;
using SecondCounts = void (*)(long*, long*);
SecondCounts second_counts = nullptr;

int main(int argc, char** argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 0;
  const char* library = getenv("CUDA_INJECTION64_PATH");
  const char* cupti = getenv("EACGM_CUPTI_LIB");
  if (!(seconds > 0) || !library || !cupti) {
    fprintf(stderr,
            "usage: CUDA_INJECTION64_PATH=LIB EACGM_CUPTI_LIB=FAKE gputime_duty_host SECONDS\n");
    return 2;
  }
  void* injection = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  void* fake = dlopen(cupti, RTLD_NOW | RTLD_LOCAL);
  auto* init = injection ? reinterpret_cast<int (*)()>(dlsym(injection, "InitializeInjection"))
                         : nullptr;
  auto* kernel = fake ? reinterpret_cast<int (*)(uint64_t, const char*)>(
                            dlsym(fake, "fake_cupti_kernel"))
                      : nullptr;
  counts = fake ? reinterpret_cast<Counts>(dlsym(fake, "fake_cupti_counts")) : nullptr;
  if (!init || !kernel || !counts) {
    fprintf(stderr, "gputime_duty_host: %s\n", dlerror());
    return 1;
  }
  if (init() != 1) {
    fprintf(stderr, "gputime_duty_host: InitializeInjection failed\n");
    return 1;
  }
  const char* second_at = getenv("FAKE_SECOND_CLIENT_AT");
  double second = second_at ? atof(second_at) : -1;
  auto* second_client = reinterpret_cast<void (*)()>(dlsym(fake, "fake_cupti_second_client"));
  second_counts = reinterpret_cast<SecondCounts>(dlsym(fake, "fake_cupti_second_counts"));
  timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long launched = 0, recorded = 0, recorded_before = -1;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    double t = double(now.tv_sec - t0.tv_sec) + double(now.tv_nsec - t0.tv_nsec) / 1e9;
    if (t >= seconds) break;
    if (second >= 0 && t >= second && second_client) {
      second_client(), second = -1;
      recorded_before = recorded;
    }
    ++launched;
    recorded += kernel(100'000, "_Z10duty_probev");
    timespec ms{0, 1'000'000};
    nanosleep(&ms, nullptr);
  }
  printf("{\"launched\": %ld, \"recorded\": %ld, ", launched, recorded);
  if (recorded_before >= 0) {
    auto* stride = reinterpret_cast<long (*)()>(dlsym(fake, "fake_cupti_stride"));
    printf("\"recorded_before_second\": %ld, \"record_bytes\": %ld, ", recorded_before,
           stride ? stride() : 0);
  }
  fflush(stdout);
  // registered after the library's (at its InitializeInjection): runs before it, so the
  // counts are read in a destructor that runs after every atexit handler
  return 0;
}

__attribute__((destructor)) static void print_counts() {
  if (!counts) return;
  long attached = 0, detached = 0, lost = 0;
  counts(&attached, &detached, &lost);
  long seen = 0, thrown = 0;
  if (second_counts) second_counts(&seen, &thrown);
  printf("\"attached\": %ld, \"detached\": %ld, \"lost\": %ld, \"second_seen\": %ld, "
         "\"second_thrown\": %ld}\n",
         attached, detached, lost, seen, thrown);
}
