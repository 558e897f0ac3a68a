// Calls each traced CUDA runtime API a known number of times with known sizes, so the
// end-to-end tests can check exact counts, bytes, kinds, geometry and kernel names.
// Without a GPU every call fails (cudaErrorInsufficientDriver), but the functions run.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <sys/stat.h>

__global__ void vecAdd(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += in[i];
}

namespace demo {
template <typename T>
__global__ void scale(T* data, T factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}
}  // namespace demo

// A stream handle the runtime never dereferences here (it fails before using it), so the
// tests can check that the recorded stream is the one passed.
static cudaStream_t const kStream = reinterpret_cast<cudaStream_t>(0x1234);

static void run_once() {
  void* d = nullptr;
  void* h = nullptr;
  for (int i = 0; i < 3; ++i) cudaMalloc(&d, 1 << 20);             // 3 x 1 MiB
  for (int i = 0; i < 2; ++i) cudaMallocHost(&h, 4096);            // 2 x 4 KiB
  cudaMallocManaged(&d, 8192, cudaMemAttachGlobal);                // 1 x 8 KiB
  cudaMallocAsync(&d, 2048, kStream);                              // 1 x 2 KiB
  for (int i = 0; i < 4; ++i) cudaFree(nullptr);
  for (int i = 0; i < 2; ++i) cudaFreeHost(nullptr);
  cudaFreeAsync(nullptr, kStream);

  static char host[8192];
  for (int i = 0; i < 2; ++i) cudaMemcpy(d, host, 1000, cudaMemcpyHostToDevice);
  cudaMemcpy(host, d, 3000, cudaMemcpyDeviceToHost);
  cudaMemcpyAsync(d, d, 5000, cudaMemcpyDeviceToDevice, kStream);
  for (int i = 0; i < 3; ++i) cudaMemset(d, 0, 700);
  cudaMemsetAsync(d, 1, 900, kStream);

  float* f = static_cast<float*>(d);
  for (int i = 0; i < 5; ++i) vecAdd<<<dim3(4, 2, 1), dim3(128, 1, 1)>>>(f, f, 1024);
  for (int i = 0; i < 2; ++i) demo::scale<float><<<3, 64, 256>>>(f, 2.0f, 192);

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(7, 1, 1);
  config.blockDim = dim3(32, 2, 1);
  config.dynamicSmemBytes = 128;
  config.stream = kStream;
  cudaLaunchKernelEx(&config, vecAdd, f, static_cast<const float*>(f), 10);

  cudaGraphLaunch(nullptr, kStream);
  for (int i = 0; i < 2; ++i) cudaStreamSynchronize(kStream);
  cudaDeviceSynchronize();
  cudaEventSynchronize(nullptr);
}

int main(int argc, char** argv) {
  int repeat = 1, exit_code = 0;
  double loop_seconds = 0;
  const char* wait_for = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--exit-code") && i + 1 < argc) exit_code = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--loop-seconds") && i + 1 < argc) loop_seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--wait-for") && i + 1 < argc) wait_for = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--repeat N] [--exit-code C] [--loop-seconds S] [--wait-for FILE]\n", argv[0]);
      return 2;
    }
  }
  if (wait_for) {
    // -p tests attach first, then create the file
    struct stat st;
    while (stat(wait_for, &st) != 0) usleep(10000);
  }
  if (loop_seconds > 0) {
    // Ctrl-C tests: call until stopped
    time_t end = time(nullptr) + time_t(loop_seconds);
    while (time(nullptr) < end) {
      void* d;
      cudaMalloc(&d, 64);
      usleep(100);
    }
    return exit_code;
  }
  for (int r = 0; r < repeat; ++r) run_once();
  printf("cuda_api_calls: done, last error %d\n", static_cast<int>(cudaGetLastError()));
  return exit_code;
}
