/* Calls each traced CUDA driver API function a known number of times with known sizes. Run
 * against the toolkit's stub libcuda.so (every call fails; the functions still run). */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>

int main(void)
{
	CUdeviceptr d = 0;
	static char host[65536];
	CUstream stream = (CUstream)(uintptr_t)0x5678;
	CUfunction fn = (CUfunction)(uintptr_t)0x9abc;

	for (int i = 0; i < 2; ++i)
		cuMemAlloc(&d, 12345); /* cuMemAlloc is #defined to cuMemAlloc_v2 */
	cuMemFree(d);
	for (int i = 0; i < 3; ++i)
		cuMemcpyHtoD(d, host, 111);
	cuMemcpyDtoH(host, d, 222);
	cuMemcpyDtoD(d, d, 333);
	cuMemcpyHtoDAsync(d, host, 444, stream);
	cuMemcpyDtoHAsync(host, d, 555, stream);
	cuMemcpyDtoDAsync(d, d, 666, stream);
	for (int i = 0; i < 4; ++i)
		cuLaunchKernel(fn, 10, 20, 30, 1, 2, 3, 512, stream, NULL, NULL);

	CUlaunchConfig config = {0};
	config.gridDimX = 5, config.gridDimY = 6, config.gridDimZ = 7;
	config.blockDimX = 8, config.blockDimY = 9, config.blockDimZ = 10;
	config.sharedMemBytes = 1024;
	config.hStream = stream;
	cuLaunchKernelEx(&config, fn, NULL, NULL);

	cuStreamSynchronize(stream);
	cuCtxSynchronize();
	printf("cuda_driver_calls: done\n");
	return 0;
}
