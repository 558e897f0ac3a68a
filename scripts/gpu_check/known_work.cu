// The GPU check's CUDA program: known kernels, copies and byte counts, so that what eacgm
// records of it can be held to exact counts. It counts every CUDA runtime call it makes, times
// each kernel and copy with cudaEvents (the GPU's own clock), and prints all of it as one JSON
// object on stdout. Without a GPU (the dry run, the toolkit's stub libcuda) every call fails,
// but each one is still made, and counted.
//
// usage: known_work [OUT.json]     (stdout when no file is given)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

__global__ void eacgm_check_axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
__global__ void eacgm_check_scale(float* y, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] *= s;
}
// A long kernel (each thread spins on the SM's clock for `cycles`, ~1 ms at 2 GHz): the few us
// that cudaEvents add to a kernel's time are then under 1%, so the GPU time eacgm records can be
// held to the events' within 5%. (The short kernels above run ~4 us, events read ~12 us.)
__global__ void eacgm_check_spin(float* y, long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  if (threadIdx.x == 0) y[blockIdx.x] += 1.0f;
}

namespace {

constexpr int kN = 1 << 20;                      // floats per buffer
constexpr size_t kBytes = kN * sizeof(float);    // 4 MiB
constexpr int kAxpy = 20, kScale = 7, kSpin = 5;  // launches of each kernel
constexpr long long kSpinCycles = 2'000'000;       // ~1 ms per spin kernel
constexpr int kH2D = 3, kD2H = 2, kMemset = 1, kAsyncH2D = 2;

// runtime API calls made, by name: those eacgm's cuda layer traces (src/probe/cuda_ops.cpp),
// and the others (events, streams), which it does not
std::map<std::string, int> calls, other_calls;
std::string first_error;

cudaError_t note(const char* name, cudaError_t e, bool traced = true) {
  ++(traced ? calls : other_calls)[name];
  if (e != cudaSuccess && first_error.empty())
    first_error = std::string(name) + ": " + cudaGetErrorString(e);
  return e;
}
#define CALL(fn, ...) note(#fn, fn(__VA_ARGS__))
#define OTHER(fn, ...) note(#fn, fn(__VA_ARGS__), false)

struct Timed {
  cudaEvent_t start{}, stop{};
  bool ok = false;
};

}  // namespace

int main(int argc, char** argv) {
  float *x = nullptr, *y = nullptr;
  std::vector<float> host(kN, 1.0f);
  float* pinned = nullptr;
  cudaStream_t stream{};
  CALL(cudaMalloc, reinterpret_cast<void**>(&x), kBytes);
  CALL(cudaMalloc, reinterpret_cast<void**>(&y), kBytes);
  CALL(cudaMallocHost, reinterpret_cast<void**>(&pinned), kBytes);
  OTHER(cudaStreamCreate, &stream);

  // each kernel and copy between two events: the GPU's own time of each
  std::vector<std::pair<std::string, Timed>> timed;
  auto begin = [&](const std::string& what) {
    timed.emplace_back(what, Timed{});
    Timed& t = timed.back().second;
    t.ok = OTHER(cudaEventCreate, &t.start) == cudaSuccess;
    t.ok = OTHER(cudaEventCreate, &t.stop) == cudaSuccess && t.ok;
    OTHER(cudaEventRecord, t.start, stream);
  };
  auto end = [&] { OTHER(cudaEventRecord, timed.back().second.stop, stream); };

  for (int i = 0; i < kH2D; ++i) {
    begin("memcpy_h2d");
    CALL(cudaMemcpy, i % 2 ? y : x, host.data(), kBytes, cudaMemcpyHostToDevice);
    end();
  }
  begin("memset");
  CALL(cudaMemset, y, 0, kBytes);
  end();
  dim3 block(256), grid((kN + 255) / 256);
  for (int i = 0; i < kAxpy; ++i) {
    begin("eacgm_check_axpy");
    eacgm_check_axpy<<<grid, block, 0, stream>>>(y, x, 0.5f, kN);
    note("cudaLaunchKernel", cudaGetLastError());
    end();
  }
  for (int i = 0; i < kScale; ++i) {
    begin("eacgm_check_scale");
    eacgm_check_scale<<<grid, block, 0, stream>>>(y, 1.01f, kN);
    note("cudaLaunchKernel", cudaGetLastError());
    end();
  }
  for (int i = 0; i < kSpin; ++i) {
    begin("eacgm_check_spin");
    eacgm_check_spin<<<64, 128, 0, stream>>>(y, kSpinCycles);
    note("cudaLaunchKernel", cudaGetLastError());
    end();
  }
  for (int i = 0; i < kAsyncH2D; ++i) {
    begin("memcpy_async_h2d");
    CALL(cudaMemcpyAsync, x, pinned, kBytes, cudaMemcpyHostToDevice, stream);
    end();
  }
  CALL(cudaStreamSynchronize, stream);
  for (int i = 0; i < kD2H; ++i) {
    begin("memcpy_d2h");
    CALL(cudaMemcpy, host.data(), y, kBytes, cudaMemcpyDeviceToHost);
    end();
  }
  CALL(cudaDeviceSynchronize);

  std::map<std::string, std::vector<float>> gpu_ms;
  for (auto& [what, t] : timed) {
    float ms = -1;
    if (t.ok && cudaEventElapsedTime(&ms, t.start, t.stop) == cudaSuccess) gpu_ms[what].push_back(ms);
  }
  CALL(cudaFree, x);
  CALL(cudaFree, y);
  CALL(cudaFreeHost, pinned);
  // cudaEventElapsedTime and cudaGetLastError are not counted (nor traced)
  std::string json = "{\"bytes_per_copy\": " + std::to_string(kBytes);
  json += ", \"kernels\": {\"eacgm_check_axpy\": " + std::to_string(kAxpy) +
          ", \"eacgm_check_scale\": " + std::to_string(kScale) +
          ", \"eacgm_check_spin\": " + std::to_string(kSpin) + "}";
  json += ", \"copies\": {\"HostToDevice\": " + std::to_string(kH2D + kAsyncH2D) +
          ", \"DeviceToHost\": " + std::to_string(kD2H) + "}, \"memsets\": " + std::to_string(kMemset);
  json += ", \"calls\": {";
  const char* sep = "";
  for (auto& [name, n] : calls) {
    json += std::string(sep) + "\"" + name + "\": " + std::to_string(n);
    sep = ", ";
  }
  json += "}, \"other_calls\": {";
  sep = "";
  for (auto& [name, n] : other_calls) {
    json += std::string(sep) + "\"" + name + "\": " + std::to_string(n);
    sep = ", ";
  }
  json += "}, \"gpu_ms\": {";
  sep = "";
  for (auto& [what, v] : gpu_ms) {
    json += std::string(sep) + "\"" + what + "\": [";
    for (size_t i = 0; i < v.size(); ++i) json += (i ? ", " : "") + std::to_string(v[i]);
    json += "]";
    sep = ", ";
  }
  std::string err;
  for (char c : first_error) err += (c == '"' || c == '\\') ? ' ' : c;
  json += "}, \"first_error\": \"" + err + "\"}\n";
  FILE* out = argc > 1 ? fopen(argv[1], "w") : stdout;
  if (!out) {
    perror(argv[1]);
    return 2;
  }
  fputs(json.c_str(), out);
  if (out != stdout) fclose(out);
  return 0;
}
