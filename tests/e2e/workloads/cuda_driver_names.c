/* Launches through the driver API with handles from cuModuleGetFunction (how Triton launches),
 * cuLibraryGetKernel and cuKernelGetFunction, plus one handle whose lookup failed and one that
 * was never looked up. Runs against fake_libcuda.c. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>

static void launch(CUfunction f, int times)
{
	for (int i = 0; i < times; ++i)
		cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
}

int main(void)
{
	CUmodule mod = (CUmodule)(uintptr_t)0x1111;
	CUlibrary lib = (CUlibrary)(uintptr_t)0x2222;
	CUfunction triton = NULL, from_kernel = NULL, missing = (CUfunction)(uintptr_t)0xdead0;
	CUkernel reduce = NULL;

	if (cuModuleGetFunction(&triton, mod, "triton_poi_fused_add_0") != CUDA_SUCCESS)
		return 1;
	launch(triton, 3);
	if (cuLibraryGetKernel(&reduce, lib, "_Z6reduceIfEvPT_i") != CUDA_SUCCESS)
		return 1;
	launch((CUfunction)reduce, 2); /* a CUkernel may be launched as a CUfunction */
	if (cuKernelGetFunction(&from_kernel, reduce) != CUDA_SUCCESS)
		return 1;
	CUlaunchConfig config = {0};
	config.gridDimX = config.gridDimY = config.gridDimZ = 1;
	config.blockDimX = config.blockDimY = config.blockDimZ = 1;
	cuLaunchKernelEx(&config, from_kernel, NULL, NULL);
	if (cuModuleGetFunction(&missing, mod, "missing") == CUDA_SUCCESS)
		return 1;
	launch(missing, 1); /* its failed lookup must not have named it */
	launch((CUfunction)(uintptr_t)0xbeef00, 1);
	printf("cuda_driver_names: done\n");
	return 0;
}
