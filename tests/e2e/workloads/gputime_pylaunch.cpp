// libeacgm_cupti_pylaunch.so: kernel launches through the real CUDA runtime (which fails them
// without a GPU, after eacgm's uprobe has seen each call) and, for each, the CUPTI records a GPU
// would give: the runtime's launch record on this thread, spanning the call, and the kernel's
// execution with the same correlation id. Called from Python (workloads/python/gpu_launch.py),
// so that a kernel's execution can be followed to its launch, eacgm's row of that call and the
// call's Python stack. The name makes eacgm probe its batcher as it does its own library's.
#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gputime/activity_batch.h"

namespace {

eacgm::gputime::ActivityBatcher batcher;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

}  // namespace

// The "kernel": a host function, as an nvcc stub is, that eacgm names by its symbol.
extern "C" __attribute__((noinline)) void eacgm_pylaunch_kernel() { asm volatile(""); }

// N launches, each kernel GPU_NS long on the GPU, 5 us after its launch call returned.
// Returns how many launches the runtime refused (all of them without a GPU).
extern "C" int eacgm_pylaunch(int n, long long gpu_ns) {
  int refused = 0;
  const uint32_t tid = uint32_t(syscall(SYS_gettid));
  for (int i = 0; i < n; ++i) {
    uint64_t t0 = now_ns();
    cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(&eacgm_pylaunch_kernel),
                                     dim3(64), dim3(128), nullptr, 0, nullptr);
    uint64_t t1 = now_ns();
    refused += e != cudaSuccess;
    CUpti_ActivityAPI api{};
    api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    api.cbid = 211;  // cudaLaunchKernel
    api.start = t0, api.end = t1;
    api.processId = uint32_t(getpid()), api.threadId = tid;
    api.correlationId = uint32_t(i + 1);
    batcher.add(reinterpret_cast<CUpti_Activity*>(&api));
    CUpti_ActivityKernel10 k{};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = t1 + 5'000;
    k.end = k.start + uint64_t(gpu_ns);
    k.deviceId = 0, k.contextId = 1, k.streamId = 7;
    k.correlationId = uint32_t(i + 1);
    k.gridX = 64, k.gridY = 1, k.gridZ = 1, k.blockX = 128, k.blockY = 1, k.blockZ = 1;
    k.name = "eacgm_pylaunch_kernel";
    batcher.add(reinterpret_cast<CUpti_Activity*>(&k));
  }
  batcher.flush();
  return refused;
}
