// SPDX-License-Identifier: GPL-2.0
/*
 * Test workload (cpu_stall.c): stops a CPU as a hypervisor that does not run a vCPU would. Run
 * from a perf event's hrtimer, in the CPU's timer interrupt, with interrupts off: it spins until
 * `stall_ns` passed, and every other timer due meanwhile on that CPU (the scheduler tick) fires
 * that much late, under the task it interrupted.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

const volatile __u64 stall_ns = 30000000;
__u64 fired = 0;
__u64 stopped_from = 0, stopped_to = 0; /* the last stop (ktime: CLOCK_MONOTONIC) */
/* Set to 1 by userspace before each stop: one stop per arming. The event fires every 2 ms of the
 * thread's time until userspace closes it, and the guest's clock runs on while its host holds
 * the vCPU: a second stop could follow the first before the thread got to close it. The likely
 * cause of a CI failure (session 66): the sample holding the printed stop's end had one late
 * tick, 18 us before that stop began, as a tick late from an earlier stop of the same firing. */
__u64 armed = 0;

static long spin(__u64 i, void *until)
{
	return bpf_ktime_get_ns() >= *(__u64 *)until ? 1 : 0;
}

SEC("perf_event")
int stall_cpu(void *ctx)
{
	if (!__sync_bool_compare_and_swap(&armed, 1, 0))
		return 0;
	__u64 from = bpf_ktime_get_ns(), until = from + stall_ns;
	/* (8M turns at most: ~0.2 s here; on a faster machine twice over) */
	bpf_loop(1 << 23, spin, &until, 0);
	if (bpf_ktime_get_ns() < until)
		bpf_loop(1 << 23, spin, &until, 0);
	stopped_from = from;
	stopped_to = bpf_ktime_get_ns();
	__sync_fetch_and_add(&fired, 1);
	return 0;
}
