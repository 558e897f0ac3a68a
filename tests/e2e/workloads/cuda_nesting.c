/* Probed calls inside probed calls, and calls left by longjmp whose returns never come (against
 * fake_libcuda.c). Usage: cuda_nesting NESTED ABANDONED AFTER */
#include <cuda.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf back;

static void jump_out(void)
{
	longjmp(back, 1);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: cuda_nesting NESTED ABANDONED AFTER\n");
		return 2;
	}
	int nested = atoi(argv[1]), abandoned = atoi(argv[2]), after = atoi(argv[3]);
	for (int i = 0; i < nested; ++i) {
		cuCtxSynchronize(); /* tail-calls cuStreamSynchronize */
		cuMemFree(0);       /* calls cuStreamSynchronize and returns later */
	}
	for (int i = 0; i < abandoned; ++i) {
		if (setjmp(back) == 0)
			cuStreamSynchronize((CUstream)(void *)jump_out);
	}
	for (int i = 0; i < after; ++i) {
		cuCtxSynchronize();
		cuMemFree(0);
	}
	printf("cuda_nesting: done\n");
	return 0;
}
