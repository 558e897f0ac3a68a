// The bundled demo workload: a small "training loop" shaped like a real one (weights on the
// device, a batch copied in per step, forward/backward kernels, an optimizer step, a sync and
// a loss copied back), so `scripts/demo.sh` has something realistic to trace. Without a GPU
// every CUDA call fails fast, but each one is made and traced.
//
// Usage: demo_train [STEPS [CPU]]: with CPU, the loop runs on that CPU only, so that another
// process busy on it (scripts/demo.sh starts one, a noisy neighbour) slows the job down. With
// DEMO_SIGNAL=FRAC:PATH in the environment it creates PATH when it reaches step FRAC x STEPS,
// so that a fault started from outside lands at that point of the job whatever its speed.
#include <cuda_runtime.h>
#include <sched.h>

#include <fcntl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unistd.h>

__global__ void matmul_tiled(const float* a, const float* b, float* c, int n) {
  int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < n && col < n) {
    float acc = 0;
    for (int k = 0; k < n; ++k) acc += a[row * n + k] * b[k * n + col];
    c[row * n + col] = acc;
  }
}
__global__ void relu_forward(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] < 0) x[i] = 0;
}
__global__ void softmax_cross_entropy(const float* logits, float* loss, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && n > 0) *loss = logits[0];
}
__global__ void sgd_update(float* w, const float* grad, float lr, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] -= lr * grad[i];
}

// Decoding and augmenting a batch on the CPU, as a data loader does between steps.
static void prepare_next_batch(float* batch) {
  timespec start{}, now{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  unsigned i = 0;
  do {
    for (int k = 0; k < 256; ++k, ++i) batch[i % (512 * 512)] = float(i % 255) / 255.0f;
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 1000000L);
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 200;
  if (argc > 2) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(argv[2]), &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) perror("sched_setaffinity");
  }
  const int n = 512;
  const size_t matrix = size_t(n) * n * sizeof(float);
  float *weights = nullptr, *grads = nullptr, *acts = nullptr, *batch = nullptr, *loss = nullptr;
  cudaMalloc(&weights, matrix);
  cudaMalloc(&grads, matrix);
  cudaMalloc(&acts, matrix);
  cudaMalloc(&batch, matrix);
  cudaMalloc(&loss, sizeof(float));
  static float host_batch[512 * 512];
  float host_loss = 0;
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  dim3 tile(16, 16), grid(n / 16, n / 16);
  int signal_step = -1;
  const char* signal_path = nullptr;
  if (const char* s = getenv("DEMO_SIGNAL"); s && strchr(s, ':')) {
    signal_step = int(atof(s) * steps);
    signal_path = strchr(s, ':') + 1;
  }
  for (int step = 0; step < steps; ++step) {
    if (step == signal_step) close(open(signal_path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    cudaMemcpyAsync(batch, host_batch, matrix, cudaMemcpyHostToDevice, stream);
    matmul_tiled<<<grid, tile, 0, stream>>>(batch, weights, acts, n);
    relu_forward<<<n * n / 256, 256, 0, stream>>>(acts, n * n);
    softmax_cross_entropy<<<1, 32, 0, stream>>>(acts, loss, n);
    matmul_tiled<<<grid, tile, 0, stream>>>(acts, batch, grads, n);  // backward
    sgd_update<<<n * n / 256, 256, 0, stream>>>(weights, grads, 0.01f, n * n);
    cudaStreamSynchronize(stream);
    cudaMemcpy(&host_loss, loss, sizeof(float), cudaMemcpyDeviceToHost);
    prepare_next_batch(host_batch);  // the data loader: about 1 ms of CPU work
    usleep(1000);
  }
  for (float* p : {weights, grads, acts, batch, loss}) cudaFree(p);
  printf("demo_train: %d steps done (CUDA status: %s)\n", steps,
         cudaGetErrorString(cudaGetLastError()));
  return 0;
}
