/* A thread that alternates short bursts of work and short sleeps on one CPU, so that each of its
 * wakeups and slices shows what the scheduler made it wait.
 * Usage: sched_probe CPU MILLISECONDS [BURST_MS] (bursts of 2 ms by default) */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: sched_probe CPU MILLISECONDS [BURST_MS]\n");
		return 2;
	}
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(atoi(argv[1]), &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0) {
		perror("sched_setaffinity");
		return 1;
	}
	double end = now_ms() + atof(argv[2]), burst_ms = argc > 3 ? atof(argv[3]) : 2;
	volatile unsigned long sink = 0;
	struct timespec nap = {0, 500 * 1000};
	while (now_ms() < end) {
		double burst = now_ms() + burst_ms;
		while (now_ms() < burst)
			sink++;
		nanosleep(&nap, NULL);
	}
	/* the kernel's own count of this thread's switches, to compare with what was recorded */
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("sched_probe: voluntary=%ld involuntary=%ld\n", ru.ru_nvcsw, ru.ru_nivcsw);
	return 0;
}
