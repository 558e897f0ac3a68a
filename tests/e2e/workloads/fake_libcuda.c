/* A stand-in libcuda.so.1 for the kernel-name test: the toolkit's stub fails every call and
 * never fills out-parameters, so it cannot show a handle getting its name. This one answers
 * lookups like a driver would (a fresh handle per name, CUDA_ERROR_NOT_FOUND for "missing")
 * and accepts launches. Only the functions the test workload calls are here. */
#include <cuda.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static uintptr_t next_handle = 0x7f0000001000;

static CUresult lookup(void **out, const char *name)
{
	if (strcmp(name, "missing") == 0)
		return CUDA_ERROR_NOT_FOUND;
	*out = (void *)next_handle;
	next_handle += 0x40;
	return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	(void)hmod;
	return lookup((void **)hfunc, name);
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	(void)library;
	return lookup((void **)pKernel, name);
}

CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	/* a real driver returns a different handle for the same kernel: so does this one */
	*pFunc = (CUfunction)((uintptr_t)kernel + 0x100000);
	return CUDA_SUCCESS;
}

/* A launch with a grid of 999 blocks takes 20 ms (beyond any preemption on a busy machine):
 * the injected fault of the detect test. */
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			unsigned by, unsigned bz, unsigned shared, CUstream stream, void **params,
			void **extra)
{
	(void)f, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared;
	(void)stream, (void)params, (void)extra;
	if (gx == 999) {
		struct timespec t = {0, 20000000};
		nanosleep(&t, NULL);
	}
	return CUDA_SUCCESS;
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	(void)config, (void)f, (void)params, (void)extra;
	return CUDA_SUCCESS;
}

/* For the nesting test: a probed function that calls another (as cudart calls the driver), and
 * one that runs a caller's function, which may longjmp out so that its return never comes. */
CUresult cuStreamSynchronize(CUstream stream)
{
	if (stream)
		((void (*)(void))(void *)stream)();
	return CUDA_SUCCESS;
}

/* compiles to a tail call: both share one stack pointer and return together */
CUresult cuCtxSynchronize(void)
{
	return cuStreamSynchronize(NULL);
}

/* a plain nested call: work remains after the inner call returns */
CUresult cuMemFree(CUdeviceptr dptr)
{
	(void)dptr;
	CUresult r = cuStreamSynchronize(NULL);
	return r == CUDA_SUCCESS && next_handle ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}
