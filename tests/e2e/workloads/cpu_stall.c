/* Stops the CPU it runs on N times for MS milliseconds each, 0.3 s apart, as a hypervisor that
 * did not run that vCPU would (cpu_stall.bpf.c: a perf event on this thread's CPU time spins in
 * the timer interrupt). With TID, the CPU under that thread instead, once it ran 2 ms more.
 * Prints each stop's start and end (CLOCK_MONOTONIC, ns, as the BPF program saw them).
 * Needs root (CAP_BPF and CAP_PERFMON). Usage: cpu_stall N MS [TID] */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "cpu_stall.skel.h"

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	int args = argc == 3 || argc == 4;
	int n = args ? atoi(argv[1]) : 0, ms = args ? atoi(argv[2]) : 0;
	int tid = argc == 4 ? atoi(argv[3]) : 0; /* 0: this thread */
	if (n < 1 || ms < 1 || ms > 150 || tid < 0) {
		fprintf(stderr, "usage: cpu_stall N MS [TID] (MS: 1-150)\n");
		return 2;
	}
	struct cpu_stall_bpf *skel = cpu_stall_bpf__open();
	if (!skel) {
		fprintf(stderr, "cpu_stall: cannot open the BPF program: %s\n", strerror(errno));
		return 1;
	}
	skel->rodata->stall_ns = ms * 1000000ull;
	if (cpu_stall_bpf__load(skel)) {
		fprintf(stderr, "cpu_stall: cannot load the BPF program: %s\n", strerror(errno));
		return 1;
	}
	volatile unsigned long sink = 0;
	for (int i = 0; i < n; ++i) {
		/* fires once this thread has run 2 ms more, on the CPU it runs on */
		struct perf_event_attr attr = {.size = sizeof(attr),
					       .type = PERF_TYPE_SOFTWARE,
					       .config = PERF_COUNT_SW_TASK_CLOCK,
					       .sample_period = 2000000,
					       .disabled = 1};
		int fd = (int)syscall(__NR_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "cpu_stall: perf_event_open: %s\n", strerror(errno));
			return 1;
		}
		struct bpf_link *link = bpf_program__attach_perf_event(skel->progs.stall_cpu, fd);
		if (!link) {
			fprintf(stderr, "cpu_stall: cannot attach: %s\n", strerror(errno));
			return 1;
		}
		unsigned long long before = skel->bss->fired, start = now_ns();
		__atomic_store_n(&skel->bss->armed, 1, __ATOMIC_SEQ_CST); /* one stop (cpu_stall.bpf.c) */
		ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
		struct timespec poll = {0, 200 * 1000};
		while (__atomic_load_n(&skel->bss->fired, __ATOMIC_RELAXED) == before &&
		       now_ns() - start < 2000000000ull) {
			if (tid)
				nanosleep(&poll, NULL); /* (its CPU is another's) */
			else
				sink++;
		}
		bpf_link__destroy(link); /* (closes the event) */
		if (skel->bss->fired == before) {
			fprintf(stderr, "cpu_stall: the perf event never fired\n");
			return 1;
		}
		printf("%llu %llu\n", (unsigned long long)skel->bss->stopped_from,
		       (unsigned long long)skel->bss->stopped_to);
		fflush(stdout);
		struct timespec pause = {0, 300 * 1000000};
		nanosleep(&pause, NULL);
	}
	cpu_stall_bpf__destroy(skel);
	return 0;
}
