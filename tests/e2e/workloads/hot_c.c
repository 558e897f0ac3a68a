/* A C function that keeps its thread on the CPU for a given CPU time: the native part of the
 * CPU-profile test (hot_split.py calls it through ctypes). It reads its thread's CPU clock once
 * per 20,000 multiply-adds (about 50 us): that clock is a system call, not a vDSO read, and
 * costs 1-2 us in a VM with page-table isolation, so reading it every 1,000 put up to 30% of the
 * function's time in the kernel, under [vdso], and its self share depended on the machine.
 * run_after_nap is the native thread of late_state.py (see there). */
#include <pthread.h>
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
		for (int i = 0; i < 20000; i++)
			x = x * 1.0000001 + 0.5;
	return x;
}

struct nap_then_call {
	void (*fn)(void);
	int nap_ms;
};

static void *nap_then_call(void *arg)
{
	const struct nap_then_call *w = arg;
	struct timespec nap = {w->nap_ms / 1000, (long)(w->nap_ms % 1000) * 1000000L};
	nanosleep(&nap, NULL); /* blocks before the thread has a Python thread state */
	w->fn();	       /* a ctypes callback: takes one (PyGILState_Ensure) */
	return NULL;
}

/* Runs fn on a new native thread after it slept nap_ms; returns once that thread ended (0), or
 * -1 where it could not be started. */
int run_after_nap(void (*fn)(void), int nap_ms)
{
	pthread_t t;
	struct nap_then_call w = {fn, nap_ms};
	if (pthread_create(&t, NULL, nap_then_call, &w) != 0)
		return -1;
	return pthread_join(t, NULL) == 0 ? 0 : -1;
}
