/* COUNT kernel launches through the driver API, 200 us apart; in the last 40% (well after the
 * middle in time, where detect's training ends), every EVERY-th launch is one the fake libcuda
 * makes 20 ms slow (grid 999). Prints how many.
 * Usage: cuda_slow_launches COUNT EVERY */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cuda_slow_launches COUNT EVERY\n");
		return 2;
	}
	int count = atoi(argv[1]), every = atoi(argv[2]), slow = 0;
	CUfunction f = (CUfunction)(uintptr_t)0x1000;
	struct timespec gap = {0, 200000};
	for (int i = 0; i < count; ++i) {
		unsigned gx = 1;
		if (i >= count * 6 / 10 && i % every == every / 2) {
			gx = 999;
			slow++;
		}
		cuLaunchKernel(f, gx, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
		nanosleep(&gap, NULL);
	}
	printf("cuda_slow_launches: %d slow of %d\n", slow, count);
	return 0;
}
