// The bundled demo workload: a small "training loop" shaped like a real one (weights on the
// device, a batch copied in per step, forward/backward kernels, an optimizer step, a sync and
// a loss copied back), so `scripts/demo.sh` has something realistic to trace. Without a GPU
// every CUDA call fails fast, but each one is made and traced.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
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

int main(int argc, char** argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 200;
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
  for (int step = 0; step < steps; ++step) {
    cudaMemcpyAsync(batch, host_batch, matrix, cudaMemcpyHostToDevice, stream);
    matmul_tiled<<<grid, tile, 0, stream>>>(batch, weights, acts, n);
    relu_forward<<<n * n / 256, 256, 0, stream>>>(acts, n * n);
    softmax_cross_entropy<<<1, 32, 0, stream>>>(acts, loss, n);
    matmul_tiled<<<grid, tile, 0, stream>>>(acts, batch, grads, n);  // backward
    sgd_update<<<n * n / 256, 256, 0, stream>>>(weights, grads, 0.01f, n * n);
    cudaStreamSynchronize(stream);
    cudaMemcpy(&host_loss, loss, sizeof(float), cudaMemcpyDeviceToHost);
    usleep(2000);  // the data loader
  }
  for (float* p : {weights, grads, acts, batch, loss}) cudaFree(p);
  printf("demo_train: %d steps done (CUDA status: %s)\n", steps,
         cudaGetErrorString(cudaGetLastError()));
  return 0;
}
