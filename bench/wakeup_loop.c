/* The floor of periodic sampling: a thread that wakes every INTERVAL_MS for SECONDS and does
 * nothing, then prints the CPU it used as % of one core. Usage: wakeup_loop INTERVAL_MS SECONDS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: wakeup_loop INTERVAL_MS SECONDS\n");
		return 2;
	}
	long step = atol(argv[1]) * 1000000L;
	double seconds = atof(argv[2]);
	struct timespec next, start, now, cpu;
	clock_gettime(CLOCK_MONOTONIC, &start);
	next = start;
	do {
		next.tv_nsec += step;
		while (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	printf("%.3f\n", 100 * (cpu.tv_sec + cpu.tv_nsec / 1e9) / seconds);
	return 0;
}
