// SPDX-License-Identifier: GPL-2.0
/*
 * Host layer: what the machine did to the traced processes, from tracepoints only (this kernel
 * class has no kprobes). Scheduler: run-queue latency, voluntary and involuntary switches, time
 * on and off CPU. Network: bytes and packets per interface, socket bytes and TCP retransmits per
 * process. Block I/O: requests, bytes and latency per disk (and issued per process). Memory: page
 * faults, reclaim stalls and page-cache fills per process. Everything is aggregated in per-CPU
 * maps and sampled by userspace; nothing goes through the ring buffer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "events.h"
#include "traced.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Advanced by userspace at each sample; max fields restart in a new epoch. */
volatile __u64 epoch = 1;

/*
 * How many times each kind of map was written, per CPU (one cache line each, so the hot paths
 * never share one). Userspace reads these through the mapped .bss and walks a map only when
 * its sum moved: an idle job costs no system calls per sample. Any CPU number fits (masked);
 * two CPUs sharing a slot still move its sum.
 */
struct eacgm_changes changes[EACGM_CHANGE_SLOTS];

static __always_inline struct eacgm_changes *changes_here(void)
{
	return &changes[bpf_get_smp_processor_id() & (EACGM_CHANGE_SLOTS - 1)];
}

struct thread_sched {
	__u64 runnable_since; /* woken or preempted, waiting for a CPU; 0 when not */
	__u64 off_since;      /* switched out */
	__u64 on_since;       /* switched in, or counted up to by host_scan; 0 when off the CPU */
	__u64 reclaim_since;  /* in direct or cgroup reclaim since */
	__u64 faults_seen;    /* its page faults when last counted, plus 1 (0: not yet looked at) */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_sched);
} sched_state SEC(".maps");

/*
 * The traced thread each CPU runs now (its tid; 0: none), written at every switch on that CPU:
 * what host_scan_cpus looks at, so a scan costs the CPUs, not the node's tasks.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} running SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384); /* set by the loader */
	__type(key, __u32); /* tgid */
	__type(value, struct eacgm_host_proc_stats);
} proc_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 256);
	__type(key, struct eacgm_net_key);
	__type(value, struct eacgm_net_stats);
} net_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 64);
	__type(key, __u32); /* dev_t, the kernel's encoding: major << 20 | minor */
	__type(value, struct eacgm_disk_stats);
} disk_stats SEC(".maps");

/* Which traced process a socket belongs to: retransmits fire in softirq or timer context. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* struct sock * */
	__type(value, __u32); /* tgid */
} sock_owner SEC(".maps");

/* Who had the CPUs the traced threads waited for (struct eacgm_cpu_taker): the waits charged
 * since userspace last took the entries out (it takes them all at each sample where the map
 * changed); LRU, so that a flood of takers between two samples loses the oldest. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct eacgm_cpu_taker_key);
	__type(value, struct eacgm_cpu_taker);
} cpu_takers SEC(".maps");

/* Charges a traced process's wait for a CPU to `prev`, the task that ran on the CPU until the
 * waiting thread got it: the one that held it last (most waits are behind one task, a hog's or
 * a neighbour's slice; a wait behind several is charged to the last). Not the idle task (the
 * CPU was free: a wakeup's latency), nor the waiting process's own threads (its own load). */
static __always_inline void charge_taker(__u32 victim, struct task_struct *prev, __u64 wait)
{
	struct eacgm_cpu_taker_key key = {victim, prev->tgid};
	if (wait < EACGM_TAKER_MIN_WAIT_NS || !prev->pid || key.taker == victim)
		return;
	changes_here()->takers++;
	struct eacgm_cpu_taker *v = bpf_map_lookup_elem(&cpu_takers, &key);
	if (!v) {
		struct eacgm_cpu_taker zero = {};
		BPF_CORE_READ_STR_INTO(&zero.comm, prev, group_leader, comm);
		bpf_map_update_elem(&cpu_takers, &key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&cpu_takers, &key);
		if (!v)
			return;
	}
	__sync_fetch_and_add(&v->wait_ns, wait);
}

struct rq_start {
	__u64 ts;
};

/* LRU: a request whose completion we never see (issued before a reset) cannot fill it */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct request * */
	__type(value, struct rq_start);
} rq_started SEC(".maps");

static __always_inline struct eacgm_host_proc_stats *proc_entry(__u32 tgid,
								  struct task_struct *task)
{
	changes_here()->procs++;
	struct eacgm_host_proc_stats *s = bpf_map_lookup_elem(&proc_stats, &tgid);
	if (s)
		return s;
	struct eacgm_host_proc_stats zero = {};
	/* named now: a short-lived process may be gone before userspace can read /proc */
	BPF_CORE_READ_STR_INTO(&zero.comm, task, group_leader, comm);
	bpf_map_update_elem(&proc_stats, &tgid, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&proc_stats, &tgid);
}

static __always_inline void on_wakeup(struct task_struct *p)
{
	if (!is_traced(p->tgid))
		return;
	struct thread_sched *t =
		bpf_task_storage_get(&sched_state, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (t && !t->runnable_since)
		t->runnable_since = bpf_ktime_get_ns();
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(host_wakeup, struct task_struct *p)
{
	on_wakeup(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(host_wakeup_new, struct task_struct *p)
{
	on_wakeup(p);
	return 0;
}

/*
 * Page faults as the kernel counts them for getrusage and ps (min_flt + maj_flt: the faults a
 * thread takes in user mode, and in the kernel on user memory, e.g. read() into a fresh
 * buffer), taken from the thread at its switches and at each scan while it runs: a thread
 * faults only on a CPU. This was the page_fault_user tracepoint, a program run at every user
 * page fault of the node (x86 only): ~440 a step of a small GPT training, 0.1 ms of its 25 ms
 * (session 60). Returns the faults since the thread was last counted; the exchange makes a
 * switch and a scan on another CPU count each fault once (the loser's are counted next time).
 */
static __always_inline __u64 faults_since(struct thread_sched *t, struct task_struct *task)
{
	__u64 now = task->min_flt + task->maj_flt + 1;
	__u64 seen = t->faults_seen;
	if (!seen) { /* first look: what it took before it was traced is not counted */
		__sync_val_compare_and_swap(&t->faults_seen, 0, now);
		return 0;
	}
	if (now <= seen || __sync_val_compare_and_swap(&t->faults_seen, seen, now) != seen)
		return 0;
	return now - seen;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(host_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 prev_tgid = prev->tgid, next_tgid = next->tgid;
	bool next_traced = is_traced(next_tgid);
	__u32 zero = 0;
	__u32 *run = bpf_map_lookup_elem(&running, &zero);
	if (run)
		*run = next_traced ? next->pid : 0;

	if (is_traced(prev_tgid)) {
		struct eacgm_host_proc_stats *s = proc_entry(prev_tgid, prev);
		struct thread_sched *t =
			bpf_task_storage_get(&sched_state, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (s && t) {
			/* the kernel's own rule for nvcsw/nivcsw */
			if (preempt || prev_state == 0) {
				s->involuntary_switches++;
				t->runnable_since = now; /* back on the run queue */
			} else {
				s->voluntary_switches++;
				t->runnable_since = 0;
			}
			/* exchanged: host_scan may be counting the same time on another CPU */
			__u64 since = __sync_lock_test_and_set(&t->on_since, 0);
			if (since && now > since)
				s->oncpu_ns += now - since;
			t->off_since = now;
			s->page_faults += faults_since(t, prev);
		}
	}
	if (next_traced) {
		struct eacgm_host_proc_stats *s = proc_entry(next_tgid, next);
		struct thread_sched *t =
			bpf_task_storage_get(&sched_state, next, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (s && t) {
			if (t->runnable_since) {
				__u64 wait = now - t->runnable_since;
				s->runq_wait_ns += wait;
				s->runq_waits++;
				if (s->runq_epoch != epoch) {
					s->runq_epoch = epoch;
					s->runq_max_ns = 0;
				}
				if (wait > s->runq_max_ns)
					s->runq_max_ns = wait;
				t->runnable_since = 0;
				charge_taker(next_tgid, prev, wait);
			}
			if (t->off_since)
				s->offcpu_ns += now - t->off_since;
			t->off_since = 0;
			t->on_since = now;
			s->page_faults += faults_since(t, next); /* a first look, or one a race left */
		}
	}
	return 0;
}

/* A thread's last faults: at its exit, as the calls layer may take its process out of the
 * traced set before the last switch-out (when the last thread exits). Its storage says it was
 * traced; its process's row, that the process was. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(host_exit, struct task_struct *task)
{
	struct thread_sched *t = bpf_task_storage_get(&sched_state, task, 0, 0);
	if (!t)
		return 0;
	__u32 tgid = task->tgid;
	struct eacgm_host_proc_stats *s = bpf_map_lookup_elem(&proc_stats, &tgid);
	__u64 faults = faults_since(t, task);
	if (s && faults) {
		changes_here()->procs++;
		__sync_fetch_and_add(&s->page_faults, faults);
	}
	return 0;
}

/*
 * CPU stalls: time a CPU did not run at all. The scheduler tick of a busy CPU (a hard hrtimer,
 * 250 a second at HZ=250) expires in the CPU's timer interrupt within tens of microseconds of
 * its time: on this VM 16-64 us, 99.8% under 1 ms, over 21,000 expiries of a 40 s GPT training
 * (bpftrace, session 63). One that fires milliseconds late says the CPU stopped for that long:
 * a virtual CPU its hypervisor did not run (steal, which a guest without steal accounting, as
 * this PVM one, never sees in /proc/stat), or interrupts kept off. That training had one 96 ms
 * stop, on CPU 0 under python3, and its operator ran 99 ms against 0.2. The task the tick
 * interrupted is the one the CPU ran when it stopped: its process is charged. The tick alone:
 * it is always armed ahead (forwarded past the periods it missed), where another timer may be
 * armed already expired (an absolute deadline a preempted thread re-arms late) or sit on a clock
 * that was stepped (CLOCK_REALTIME), and fire "late" on a CPU that never stopped. A stop counts
 * from the tick due first in it: up to one tick period (4 ms) short.
 */
#define STALL_MIN_NS 2000000ull /* under it: interrupt latency, not a stop */

/* Set by the loader: the scheduler tick's handler (tick_nohz_handler, tick_sched_timer before
 * 6.10), from /proc/kallsyms. A kernel's static data has no address there, but its functions do. */
const volatile __u64 tick_fn = 0;

/* each CPU's stops (one entry, per CPU: read by userspace at each sample) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct eacgm_cpu_stalls);
} cpu_stalls SEC(".maps");

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(host_timer_late, struct hrtimer *timer, ktime_t *now_p)
{
	if ((__u64)timer->function != tick_fn)
		return 0;
	/* the tick is on CLOCK_MONOTONIC, as bpf_ktime_get_ns */
	__u64 t = bpf_ktime_get_ns();
	__s64 late = (__s64)t - timer->node.expires;
	if (late < (__s64)STALL_MIN_NS)
		return 0;
	__u32 zero = 0;
	struct eacgm_cpu_stalls *c = bpf_map_lookup_elem(&cpu_stalls, &zero);
	if (c) { /* (this CPU's only: nothing else writes it) */
		c->stall_ns += late;
		c->stalls++;
		c->stall_end_ns = t;
	}
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (tgid && is_traced(tgid)) {
		struct eacgm_host_proc_stats *s = proc_entry(tgid, bpf_get_current_task_btf());
		if (s) { /* atomic: this interrupt may have come in the middle of a switch's update */
			__sync_fetch_and_add(&s->stall_ns, late);
			__sync_fetch_and_add(&s->stalls, 1);
			s->stall_end_ns = t;
		}
	}
	return 0;
}

/*
 * On-CPU time as it accrues, from a scan that userspace runs at each sample: a traced thread on
 * a CPU right now has its time up to the sample counted, so one that runs for seconds without
 * being switched out has its time in each sampling interval it ran in, not all of it in the one
 * where it finally left the CPU (which put 630 ms into a 100 ms interval). Switch-out adds what
 * is left since. This was the sched_stat_runtime tracepoint, which fires at every update_curr:
 * beside a thread spinning on sched_yield (an idle OpenBLAS worker of a PyTorch training, CUDA's
 * spin-wait) 700,000 times a second, 15% of a core at 200 ns each.
 */
/* Set by userspace before each scan: the sample's timestamp. Time is counted up to it, not up
 * to when the scan reaches the task, so each interval holds its own time however late the
 * sampler runs. */
volatile __u64 scan_until = 0;
/* Set by the loader: CPUs host_scan_cpus looks at (libbpf's possible CPUs). */
const volatile __u32 scan_cpus = 1;

static __always_inline void count_running(struct task_struct *task)
{
	struct thread_sched *t = bpf_task_storage_get(&sched_state, task, 0, 0);
	if (!t) /* made at its first switch while traced */
		return;
	__u64 since = t->on_since;
	__u64 now = scan_until;
	if (!since || now <= since || !is_traced(task->tgid))
		return;
	/* the switch-out exchanges on_since for 0 on the task's CPU: counted once either way */
	if (__sync_val_compare_and_swap(&t->on_since, since, now) != since)
		return;
	struct eacgm_host_proc_stats *s = proc_entry(task->tgid, task);
	if (s) { /* atomic: a switch on this CPU may come in the middle of the scan's program */
		__sync_fetch_and_add(&s->oncpu_ns, now - since);
		__u64 faults = faults_since(t, task);
		if (faults)
			__sync_fetch_and_add(&s->page_faults, faults);
	}
}

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;

static long scan_cpu(__u64 cpu, void *unused)
{
	__u32 zero = 0;
	__u32 *tid = bpf_map_lookup_percpu_elem(&running, &zero, (__u32)cpu);
	if (!tid || !*tid)
		return 0;
	/* the slot may be a moment old: a thread that left this CPU has on_since 0 (skipped), one
	 * now on another CPU too is counted once (the exchange) */
	struct task_struct *task = bpf_task_from_pid(*tid);
	if (!task)
		return 0;
	count_running(task);
	bpf_task_release(task);
	return 0;
}

/*
 * The scan: each CPU's traced thread, run by userspace (BPF_PROG_RUN). Until session 62 it was
 * a task iterator over every task of the node, ~0.5 us each: beside 8,000 idle threads,
 * `record --layers host` spent 4.6% of a core in it (sys 1.18 s in 20 s against 0.26 s).
 */
SEC("syscall")
int host_scan_cpus(void *ctx)
{
	bpf_loop(scan_cpus, scan_cpu, NULL, 0);
	return 0;
}

/* The same over every task of the node: where the kernel refuses the program above. */
SEC("iter/task")
int host_scan(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (task)
		count_running(task);
	return 0;
}

static __always_inline struct eacgm_net_stats *net_entry(struct net_device *dev)
{
	struct eacgm_net_key key = {
		.ifindex = BPF_CORE_READ(dev, ifindex),
		.netns = BPF_CORE_READ(dev, nd_net.net, ns.inum),
	};
	changes_here()->nets++;
	struct eacgm_net_stats *s = bpf_map_lookup_elem(&net_stats, &key);
	if (s)
		return s;
	struct eacgm_net_stats zero = {};
	bpf_probe_read_kernel_str(zero.name, sizeof(zero.name), dev->name);
	bpf_map_update_elem(&net_stats, &key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&net_stats, &key);
}

SEC("tp_btf/net_dev_xmit")
int BPF_PROG(host_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int len)
{
	if (rc != 0) /* NETDEV_TX_OK */
		return 0;
	struct eacgm_net_stats *s = net_entry(dev);
	if (s) {
		s->tx_bytes += len;
		s->tx_packets++;
	}
	return 0;
}

/*
 * Per process, the socket layer: these fire in the sending or receiving thread itself, unlike
 * the device tracepoints, which often run in softirq context on behalf of whoever.
 */
static __always_inline void remember_owner(struct sock *sk, __u32 tgid)
{
	__u64 key = (__u64)sk;
	__u32 *owner = bpf_map_lookup_elem(&sock_owner, &key);
	if (!owner || *owner != tgid)
		bpf_map_update_elem(&sock_owner, &key, &tgid, BPF_ANY);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(host_sock_send, struct sock *sk, int ret, int flags)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (ret <= 0 || !is_traced(tgid))
		return 0;
	struct eacgm_host_proc_stats *p = proc_entry(tgid, bpf_get_current_task_btf());
	if (p)
		p->sock_tx_bytes += ret;
	remember_owner(sk, tgid);
	return 0;
}

/*
 * TCP segments sent again (timeout, fast retransmit, loss probe): loss or a stalled peer. A
 * packet may carry several segments (TSO/GSO): counted as the kernel's own total_retrans
 * counts them (tcp_info), whether or not the packet got out this time.
 */
SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(host_tcp_retransmit, const struct sock *sk, const struct sk_buff *skb, int err)
{
	__u64 key = (__u64)sk;
	__u32 *owner = bpf_map_lookup_elem(&sock_owner, &key);
	if (!owner)
		return 0;
	__u32 tgid = *owner;
	struct eacgm_host_proc_stats *p = bpf_map_lookup_elem(&proc_stats, &tgid);
	if (!p)
		return 0;
	changes_here()->procs++;
	struct tcp_skb_cb *cb = (struct tcp_skb_cb *)skb->cb;
	__u16 segs = BPF_CORE_READ(cb, tcp_gso_segs);
	p->tcp_retransmits += segs ? segs : 1;
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(host_sock_recv, struct sock *sk, int ret, int flags)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (ret <= 0 || !is_traced(tgid))
		return 0;
	struct eacgm_host_proc_stats *p = proc_entry(tgid, bpf_get_current_task_btf());
	if (p)
		p->sock_rx_bytes += ret;
	remember_owner(sk, tgid);
	return 0;
}

/* Frame length with the link-layer header, which the receive path has already pulled. */
static __always_inline __u32 rx_frame_len(struct sk_buff *skb)
{
	__u32 len = skb->len;
	__u16 mac = skb->mac_header;
	if (mac != (__u16)~0U) {
		__u64 data_off = (__u64)skb->data - (__u64)skb->head;
		if (data_off > mac)
			len += data_off - mac;
	}
	return len;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(host_receive, struct sk_buff *skb)
{
	struct net_device *dev = skb->dev;
	if (!dev)
		return 0;
	struct eacgm_net_stats *s = net_entry(dev);
	if (s) {
		s->rx_bytes += rx_frame_len(skb);
		s->rx_packets++;
	}
	return 0;
}

static __always_inline __u32 disk_of(struct request *rq)
{
	struct gendisk *disk = BPF_CORE_READ(rq, q, disk);
	if (!disk)
		return 0;
	return ((__u32)BPF_CORE_READ(disk, major) << 20) | (__u32)BPF_CORE_READ(disk, first_minor);
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(host_rq_issue, struct request *rq)
{
	struct rq_start start = {.ts = bpf_ktime_get_ns()};
	__u64 key = (__u64)rq;
	bpf_map_update_elem(&rq_started, &key, &start, BPF_ANY);
	return 0;
}

/*
 * A request may complete in parts (the driver finishing some of its bytes at a time): each part
 * fires this tracepoint with its own byte count, before the request's remaining length drops.
 * Bytes count at every part; the request, and its latency, at the last one.
 */
SEC("tp_btf/block_rq_complete")
int BPF_PROG(host_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	bool last = nr_bytes >= rq->__data_len;
	struct rq_start *start = bpf_map_lookup_elem(&rq_started, &key);
	__u64 latency = 0;
	if (start && last) {
		latency = bpf_ktime_get_ns() - start->ts;
		bpf_map_delete_elem(&rq_started, &key);
	}

	__u32 dev = disk_of(rq);
	changes_here()->disks++;
	struct eacgm_disk_stats *d = bpf_map_lookup_elem(&disk_stats, &dev);
	if (!d) {
		struct eacgm_disk_stats zero = {};
		bpf_map_update_elem(&disk_stats, &dev, &zero, BPF_NOEXIST);
		d = bpf_map_lookup_elem(&disk_stats, &dev);
	}
	/* REQ_OP_READ = 0, REQ_OP_WRITE = 1 in the low bits of cmd_flags; the rest (flush,
	 * discard, ...) moves no data and is left out */
	__u32 op = rq->cmd_flags & 0xff;
	if (!d || op > 1)
		return 0;
	if (op == 0) {
		d->read_ops += last;
		d->read_bytes += nr_bytes;
	} else {
		d->write_ops += last;
		d->write_bytes += nr_bytes;
	}
	if (!latency)
		return 0;
	d->latency_ns += latency;
	if (d->latency_epoch != epoch) {
		d->latency_epoch = epoch;
		d->latency_max_ns = 0;
	}
	if (latency > d->latency_max_ns)
		d->latency_max_ns = latency;
	return 0;
}

/*
 * Per process, I/O as submitted: bios are queued in the submitting thread, while requests are
 * often issued later by kernel workers (plugging, requeues, writeback).
 */
SEC("tp_btf/block_bio_queue")
int BPF_PROG(host_bio_queue, struct bio *bio)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!is_traced(tgid))
		return 0;
	/* data only: REQ_OP_READ = 0, REQ_OP_WRITE = 1 (not flushes, discards of freed blocks) */
	if ((BPF_CORE_READ(bio, bi_opf) & 0xff) > 1)
		return 0;
	struct eacgm_host_proc_stats *p = proc_entry(tgid, bpf_get_current_task_btf());
	if (p) {
		p->io_ops++;
		p->io_bytes += BPF_CORE_READ(bio, bi_iter.bi_size);
	}
	return 0;
}

/*
 * Memory. These fire in the task that reclaims or reads, so they are the traced process's own;
 * the loader leaves out any this kernel lacks. (Page faults: faults_since, at switches.)
 */
static __always_inline struct eacgm_host_proc_stats *current_proc(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!is_traced(tgid))
		return 0;
	return proc_entry(tgid, bpf_get_current_task_btf());
}

static __always_inline void reclaim_begin(void)
{
	if (!is_traced(bpf_get_current_pid_tgid() >> 32))
		return;
	struct thread_sched *t = bpf_task_storage_get(&sched_state, bpf_get_current_task_btf(), 0,
						      BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (t)
		t->reclaim_since = bpf_ktime_get_ns();
}

static __always_inline void reclaim_end(void)
{
	struct thread_sched *t = bpf_task_storage_get(&sched_state, bpf_get_current_task_btf(), 0, 0);
	if (!t || !t->reclaim_since) /* no begin seen: not traced, or attached mid-reclaim */
		return;
	struct eacgm_host_proc_stats *p = current_proc();
	if (p) {
		p->reclaim_ns += bpf_ktime_get_ns() - t->reclaim_since;
		p->reclaims++;
	}
	t->reclaim_since = 0;
}

/* The allocation found too little free memory: the task reclaims before it may go on. */
SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(host_direct_reclaim_begin)
{
	reclaim_begin();
	return 0;
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(host_direct_reclaim_end)
{
	reclaim_end();
	return 0;
}

/* The task's memory cgroup is at its limit (v1 limit_in_bytes, v2 memory.max or .high). */
SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(host_memcg_reclaim_begin)
{
	reclaim_begin();
	return 0;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(host_memcg_reclaim_end)
{
	reclaim_end();
	return 0;
}

/*
 * File data the task brought into the page cache (reads and page faults that missed it): under
 * memory pressure, the code and data it had to read again.
 */
SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(host_page_cache_add, struct folio *folio)
{
	struct eacgm_host_proc_stats *p = current_proc();
	if (!p)
		return 0;
	__u64 flags = 0, flags_1 = 0;
	bpf_core_read(&flags, sizeof(flags), &folio->flags);
	__u32 order = 0;
	if (flags & (1ull << bpf_core_enum_value(enum pageflags, PG_head))) {
		bpf_core_read(&flags_1, sizeof(flags_1), &folio->_flags_1);
		order = flags_1 & 0xff; /* folio_order(): the order sits in the second page's flags */
	}
	p->pagein_bytes += 4096ull << (order & 31); /* base pages of 4 KiB (x86-64) */
	return 0;
}
