/* A C function that keeps its thread on the CPU for a given CPU time: the native part of the
 * CPU-profile test (hot_split.py calls it through ctypes). */
#include <time.h>

static double thread_cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) double hot_c_spin(double seconds)
{
	double end = thread_cpu_seconds() + seconds;
	volatile double x = 1.0;
	while (thread_cpu_seconds() < end)
		for (int i = 0; i < 1000; i++)
			x = x * 1.0000001 + 0.5;
	return x;
}
