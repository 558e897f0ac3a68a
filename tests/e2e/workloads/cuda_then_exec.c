/* A C program that makes CUDA calls and then becomes Python in the same thread (execv): the
 * thread found its process was no Python one before the exec, and must look again after.
 * Usage: cuda_then_exec PROGRAM [ARGS...] (what it execs). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
		return 2;
	}
	for (int i = 0; i < 3; i++)
		cudaDeviceSynchronize(); /* fails without a GPU; the probe fires either way */
	usleep(500000); /* the recorder decodes the calls (and names the thread) before the exec */
	execv(argv[1], argv + 1);
	perror(argv[1]);
	return 127;
}
