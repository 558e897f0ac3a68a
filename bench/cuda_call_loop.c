/* Benchmark load: threads calling cudaMalloc (a real libcudart call that fails fast without a
 * GPU) in a tight or paced loop. Prints ns per call and the calls made. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*malloc_fn)(void **, size_t);
static malloc_fn cuda_malloc;
static long calls_per_thread;
static double rate_per_thread; /* 0: as fast as possible */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	(void)arg;
	void *p;
	double start = now_s();
	for (long i = 0; i < calls_per_thread; ++i) {
		cuda_malloc(&p, 64);
		if (rate_per_thread > 0) {
			double due = start + (double)(i + 1) / rate_per_thread;
			while (now_s() < due) {
			}
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s CALLS_PER_THREAD [THREADS] [CALLS_PER_SECOND_PER_THREAD]\n", argv[0]);
		return 2;
	}
	calls_per_thread = atol(argv[1]);
	int threads = argc > 2 ? atoi(argv[2]) : 1;
	rate_per_thread = argc > 3 ? atof(argv[3]) : 0;
	void *lib = dlopen("libcudart.so.13", RTLD_NOW);
	if (!lib || !(cuda_malloc = (malloc_fn)dlsym(lib, "cudaMalloc"))) {
		fprintf(stderr, "cannot load libcudart.so.13\n");
		return 1;
	}
	void *warm;
	cuda_malloc(&warm, 64); /* runtime initialisation outside the timed loop */
	pthread_t t[64];
	double start = now_s();
	for (int i = 0; i < threads && i < 64; ++i)
		pthread_create(&t[i], NULL, worker, NULL);
	for (int i = 0; i < threads && i < 64; ++i)
		pthread_join(t[i], NULL);
	double secs = now_s() - start;
	long total = calls_per_thread * threads;
	printf("calls=%ld seconds=%.3f ns_per_call=%.1f rate=%.0f\n", total + 1, secs,
	       secs * 1e9 / calls_per_thread, total / secs);
	return 0;
}
