// SPDX-License-Identifier: GPL-2.0
/*
 * Generic call tracer: one entry and one return program, attached to every probed function
 * of the call layers (cuda today; comm and torch reuse it). The probe's cookie names the
 * operation and what to read; userspace gives the raw words their meaning. Also follows the
 * traced process tree (fork/exec/exit) and tells userspace when a traced process maps code.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "events.h"
#include "traced.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Wake the reader only once this much is waiting: a wakeup per event costs more than the
 * probe itself (FACTS.md). The reader also polls on a short timer, so nothing waits long. */
const volatile __u64 wakeup_bytes = 256 * 1024;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024 * 1024); /* resized by the loader */
} events SEC(".maps");


struct inflight_call {
	__u64 sp; /* stack pointer at entry: pairs the return with its entry */
	__u64 op; /* the cookie */
	__u64 gen; /* calls_gen at entry */
	__u64 ts_ns;
	__u64 py_stack_ts; /* see eacgm_call_event */
	__u64 run_delay; /* the thread's run-queue wait so far, at entry */
	__u64 args[6];
	__u64 stack[EACGM_STACK_WORDS];
	__u64 deref[EACGM_DEREF_WORDS];
};

/*
 * Bumped by userspace each time the duty-cycled probes (EACGM_COOKIE_DUTY) are attached again
 * (CallTracer::resume_calls). Their entries from before may have lost their returns while the
 * probes were off: such an entry would otherwise stay under the thread's later calls as their
 * outer call, and hand them its Python stack; its return, seen once they are back, may be that
 * of another call of the same function at the same depth. A call that really spanned the pause
 * loses its record instead (a duty-cycled layer is a sample of the calls anyway).
 */
volatile __u32 calls_gen = 0;

/* Deepest nesting of probed calls in one thread (cudaMalloc -> cuMemAlloc is 2). */
#define MAX_DEPTH 8

/*
 * Calls in flight, per thread, as a stack: task-local storage is found through the task itself,
 * which is much cheaper than a hash map keyed by tid, and needs no delete at return. Entries
 * whose return never came (attached mid-call, longjmp) are recognised by their stack pointer
 * and dropped, the way the kernel cleans up its own return probes.
 */
struct task_calls {
	__u32 depth;
	__u32 py_absent_gen; /* py_procs_gen (low bits) when this process was not a Python one */
	struct inflight_call calls[MAX_DEPTH];
};

/* The mask must reach the verifier, which cannot always see the compiler's own bounds. */
static __always_inline __u32 slot(__u32 depth)
{
	asm volatile("" : "+r"(depth));
	return depth & (MAX_DEPTH - 1);
}

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_calls);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EACGM_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &which);
	if (v)
		*v += 1;
}

/* Records each CPU submits between two looks at the ring's fill (wake_flags). */
#define WAKE_CHECK_EVERY 64

struct wake_state {
	__u32 tick;
	__u32 pressed; /* the last look found a sixteenth of the ring waiting */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wake_state);
} wake_tick SEC(".maps");

/*
 * The reader is woken once wakeup_bytes wait, and the fill is looked at once every
 * WAKE_CHECK_EVERY records of a CPU, not at each: a look and a wakeup at every record past the
 * mark (until session 44) cost a call's exit probe ~90-130 ns of its ~510-580 (a cudaMalloc
 * loop with kernel.bpf_stats_enabled, three interleaved runs each), as the reader is still on
 * its way for hundreds of records after a wakeup and each forced one raises an interrupt (in a
 * VM, an exit). Once a sixteenth of the ring waits (1 MiB of the default 16) each record looks
 * and wakes again: those wakeups slow the producers down to what the reader drains. Two
 * threads calling as fast as they can on 2 cores dropped 5-13% of their calls with a look every
 * 64 records throughout, 2% in one run of two with the switch at half the ring, none in three
 * with it at a sixteenth (nor at each record).
 */
static __always_inline __u64 wake_flags(void)
{
	__u32 zero = 0;
	struct wake_state *w = bpf_map_lookup_elem(&wake_tick, &zero);
	if (w && !w->pressed && (++w->tick % WAKE_CHECK_EVERY) != 0)
		return BPF_RB_NO_WAKEUP;
	__u64 waiting = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	if (w)
		w->pressed = waiting >= bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 16;
	return waiting >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/*
 * The calling thread's total wait on a run queue (runnable, not running), kept by the kernel
 * (CONFIG_SCHED_INFO): its change over a call is how long the call was kept off a CPU it was
 * ready to use, which tells a preempted call from a slow one.
 */
static __always_inline __u64 run_delay(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (!bpf_core_field_exists(task->sched_info.run_delay))
		return EACGM_RUNQ_UNKNOWN;
	return task->sched_info.run_delay;
}

/*
 * The wait since `at_entry` (run_delay() then), never more than the call's `dur_ns`: the
 * scheduler's clock and ktime differ by microseconds at the call's edges.
 */
static __always_inline __u64 runq_since(__u64 at_entry, __u64 dur_ns)
{
	if (at_entry == EACGM_RUNQ_UNKNOWN) /* the field is missing: at exit too */
		return EACGM_RUNQ_UNKNOWN;
	__u64 waited = run_delay() - at_entry;
	return waited < dur_ns ? waited : dur_ns;
}

#include "python.bpf.h"

/*
 * CPU profile: a perf event per CPU (software cpu-clock at the sampling rate) runs this on the
 * thread that was on that CPU. A traced thread's sample is its user stack, walked by frame
 * pointers (where code has none the walk stops early, the innermost frame is always right),
 * and, for CPython threads, the Python stack as a PY_STACK record stamped with the sample's time.
 */
SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32;
	if (pid == 0 || !is_traced(pid))
		return 0;
	/* kernel threads (record --all traces every process) have no user stack */
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->flags & 0x00200000 /* PF_KTHREAD */)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (python_enabled)
		py_emit_stack(pid, (__u32)id, now, EACGM_PY_MAX_STACK);
	struct eacgm_sample_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		return 0;
	}
	e->kind = EACGM_REC_SAMPLE;
	e->pid = pid;
	e->tid = (__u32)id;
	e->ts_ns = now;
	long n = bpf_get_stack(ctx, e->ips, sizeof(e->ips), BPF_F_USER_STACK);
	e->nframes = n > 0 ? (__u64)n / 8 : 0;
	bpf_ringbuf_submit(e, wake_flags());
	return 0;
}

/*
 * Off-CPU profile: where traced threads wait. At a switch-out that blocks the thread (not a
 * preemption or a yield: the thread is no longer runnable), its user stack and Python stack are
 * kept in its task storage; when it runs again the wait is sampled as the CPU profile samples
 * running (see struct eacgm_offcpu_event): one record per period of waiting, long waits whole.
 * The stacks must be read at switch-out, the last time this thread is `current` before the
 * wait; a blocking switch already costs a context switch and a wakeup, several times the read.
 * A wait still going on when the recording stops is not in the profile.
 */
const volatile __u64 offcpu_period_ns = 0; /* 1e9 / --sample-hz; 0: off (not attached) */

/* A thread with no Python thread state has its next waits' Python stacks skipped at most this
 * long, and only while its interpreter made no thread state (see offcpu_py_absent). */
#define OFFCPU_PY_ABSENT_NS 1000000000ull

struct offcpu_state {
	__u64 since; /* blocked since; 0: not blocked */
	__u64 py_absent_until; /* no Python thread state was found before this (ktime) */
	__u64 py_head_at, py_head; /* where the interpreter's thread list starts, and what it held */
	/* the last walk of the native stack: the user stack and frame pointers it started from,
	 * and the frame pointer its chain of frame records ended at (memo_ok: known) */
	__u64 at_sp, at_bp, at_end;
	__u32 memo_ok;
	__u32 nframes;
	__u32 py_frames; /* frames in py (0: no Python stack) */
	__u64 ips[EACGM_SAMPLE_MAX_FRAMES];
	struct eacgm_py_stack_event py;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_state);
} offcpu_tasks SEC(".maps");

/* Native stacks of up to this many frames are checked against the last walk's (offcpu_blocks). */
#define OFFCPU_MEMO_FRAMES 8

/* Follows the frame records from bp (saved frame pointer, return address) for the last walk's
 * frames after the first; *end: the frame pointer the chain then stands at. Whether the records
 * read give the last walk's return addresses (false where a record cannot be read). */
static __always_inline bool offcpu_chain_matches(const struct offcpu_state *st, __u64 bp, __u64 *end)
{
	__u64 fp = bp;
	for (int k = 1; k < OFFCPU_MEMO_FRAMES; k++) {
		if (k >= st->nframes)
			break;
		__u64 rec[2];
		if (bpf_probe_read_user(rec, sizeof(rec), (void *)fp) != 0 || rec[1] != st->ips[k])
			return false;
		fp = rec[0];
	}
	*end = fp;
	return true;
}

/* Whether a block at (ip, sp, bp) has the last walk's native stack. */
static __always_inline bool offcpu_same_stack(const struct offcpu_state *st, __u64 ip, __u64 sp,
					      __u64 bp)
{
	__u64 end = 0;
	return st->memo_ok && ip == st->ips[0] && sp == st->at_sp && bp == st->at_bp &&
	       offcpu_chain_matches(st, bp, &end) && end == st->at_end;
}

/*
 * Whether a thread found without a Python thread state still has none: within a second of that
 * lookup, and while the interpreter's thread list starts where it did (one user read, against a
 * walk of the list). A thread takes a state late in two ways, both caught: a native thread
 * calling into Python (PyGILState_Ensure) pushes a new state at the list's head; a Python
 * thread that blocked before binding the state its parent made for it (a page fault or a malloc
 * lock in its first instants) was not marked: 3.12+ leave that state's ids zero, which the walk
 * sees, and 3.10-3.11 give it the parent's, so no thread is marked in its first second. The
 * second's bound covers a new state made where a freed one was (the same head pointer again).
 */
static __always_inline bool offcpu_py_absent(const struct offcpu_state *st, __u64 now)
{
	__u64 head = 0;
	return now < st->py_absent_until &&
	       bpf_probe_read_user(&head, sizeof(head), (void *)st->py_head_at) == 0 &&
	       head == st->py_head;
}

static __always_inline void offcpu_blocks(void *ctx, struct task_struct *prev, __u64 now)
{
	/* made when the thread was switched in (below), or now */
	struct offcpu_state *st =
		bpf_task_storage_get(&offcpu_tasks, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		count(EACGM_CNT_OFFCPU_LOST);
		return;
	}
	/*
	 * A thread that blocks again where it blocked last (a worker's condition variable, an
	 * event loop's epoll_wait: most blocking switches of a Gloo job) has the same native stack,
	 * and the kernel's walk of it (~1.4 us of this program's ~2 us on a Gloo step, for stacks
	 * of one or two frames: a fixed cost) is not made again: where the instruction, stack and
	 * frame pointers are the last walk's, and following the frame records from the frame
	 * pointer gives its return addresses and ends where it ended, the walk would give the same
	 * frames. Checked for stacks of up to OFFCPU_MEMO_FRAMES frames; deeper ones are walked.
	 */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
	__u64 ip = regs ? BPF_CORE_READ(regs, ip) : 0, sp = regs ? BPF_CORE_READ(regs, sp) : 0;
	__u64 bp = regs ? BPF_CORE_READ(regs, bp) : 0;
	if (ip && offcpu_same_stack(st, ip, sp, bp)) {
		count(EACGM_CNT_OFFCPU_STACKS_REUSED);
	} else {
		long n = bpf_get_stack(ctx, st->ips, sizeof(st->ips), BPF_F_USER_STACK);
		st->nframes = n > 0 ? (__u64)n / 8 : 0;
		st->at_sp = sp;
		st->at_bp = bp;
		st->memo_ok = ip && st->nframes && st->nframes <= OFFCPU_MEMO_FRAMES &&
			      st->ips[0] == ip &&
			      /* where the chain ends: it can be followed (and gives the walk's frames) */
			      offcpu_chain_matches(st, bp, &st->at_end);
	}
	st->py_frames = 0;
	/* A C++ thread of a Python process (Gloo's, OpenBLAS's: most of a Gloo job's blocking
	 * switches) has no Python thread state, and finding that out walks the interpreter's thread
	 * list; it is not walked again while offcpu_py_absent says nothing changed. Not the main
	 * thread: it blocks before the interpreter made its state (loading), and then waits in
	 * Python (a launcher's whole run in waitpid). */
	if (python_enabled && !offcpu_py_absent(st, now)) {
		int frames = py_read_stack((__u64)prev->tgid << 32 | (__u32)prev->pid, now,
					   EACGM_PY_MAX_STACK, &st->py, 0);
		/* the head read after the walk: a state pushed in between is another thread's (this
		 * one's is made by its parent before it runs, or by itself). Not in a thread's first
		 * second: one that blocked before binding the state its parent made (a malloc lock
		 * in its first instants) looks stateless on 3.10 and 3.11, whose unbound states carry
		 * the parent's ids until taken (3.12+ zero them: py_read_stack returns 0 for those) */
		__u64 at = frames == PY_NO_THREAD_STATE && prev->pid != prev->tgid &&
					   now - prev->start_time >= OFFCPU_PY_ABSENT_NS
				   ? py_thread_list_head_at(prev->tgid)
				   : 0;
		if (at && bpf_probe_read_user(&st->py_head, sizeof(st->py_head), (void *)at) == 0) {
			st->py_head_at = at;
			st->py_absent_until = now + OFFCPU_PY_ABSENT_NS;
		}
		st->py_frames = frames > 0 ? frames : 0;
	}
	st->since = now;
}

/*
 * The kernel may refuse to make task storage inside the scheduler (while another task on this
 * CPU is in the middle of a storage operation: a thread exiting, a map update). A thread is
 * switched in before it can block, so its storage is made there first, and a refusal at one
 * of the two is retried at the other.
 */
static __always_inline void offcpu_resumes(struct task_struct *next, __u64 now)
{
	struct offcpu_state *st =
		bpf_task_storage_get(&offcpu_tasks, next, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st || !st->since)
		return;
	__u64 since = st->since, dur = now - since, weight = dur;
	st->since = 0;
	if (dur < offcpu_period_ns) {
		/* kept with probability dur / period (both under 2^31: no overflow) */
		if ((__u64)bpf_get_prandom_u32() * offcpu_period_ns >= dur << 32)
			return;
		weight = offcpu_period_ns;
	}
	if (st->py_frames)
		py_output_stack(&st->py, st->py_frames);
	struct eacgm_offcpu_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		return;
	}
	e->kind = EACGM_REC_OFFCPU;
	e->pid = next->tgid;
	e->tid = next->pid;
	e->nframes = st->nframes;
	e->ts_ns = since;
	e->dur_ns = dur;
	e->weight_ns = weight;
	__builtin_memcpy(e->ips, st->ips, sizeof(e->ips));
	bpf_ringbuf_submit(e, wake_flags());
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	/* prev_state 0 (TASK_RUNNING): preempted or yielding, waiting for a CPU, not blocked */
	if (!preempt && prev_state != 0 && !(prev->flags & 0x00200000 /* PF_KTHREAD */) &&
	    is_traced(prev->tgid))
		offcpu_blocks(ctx, prev, now);
	if (is_traced(next->tgid) && !(next->flags & 0x00200000 /* PF_KTHREAD */))
		offcpu_resumes(next, now);
	return 0;
}

/*
 * A probed function that tail-calls another (`return f();` compiled to a jump) shares its
 * stack pointer with it. The kernel has already pointed the caller's return address at the
 * uretprobe trampoline, so finding the trampoline there tells a live tail call from a
 * finished call at the same depth.
 */
static __always_inline bool is_tail_call(__u64 sp)
{
	__u64 ret_addr = 0;
	bpf_probe_read_user(&ret_addr, sizeof(ret_addr), (void *)sp);
	struct task_struct *task = bpf_get_current_task_btf();
	return ret_addr == BPF_CORE_READ(task, mm, uprobes_state.xol_area, vaddr);
}

/*
 * PyTorch layouts, set by userspace for the libtorch version it found (0: unknown): where
 * c10::TensorImpl keeps numel_ and its dtype, and where c10d::ProcessGroup keeps rank_, size_
 * and its collectives' sequence number.
 */
__u32 torch_numel_offset = 0;
__u32 torch_dtype_offset = 0;
__u32 torch_pg_rank_offset = 0;
__u32 torch_pg_seq_offset = 0;

/* log2 of the bytes per element of c10::ScalarType 0..15 (uint8 .. bfloat16), a nibble each:
 * 1, 1, 2, 4, 8, 2, 4, 8, 4, 8, 16, 1, 1, 1, 4, 2 (a constant, not a table in .rodata) */
#define SCALAR_SIZE_LOG2 0x1200043232132100ULL

static __always_inline __u64 scalar_size(__u16 dtype)
{
	return dtype < 16 ? 1ULL << ((SCALAR_SIZE_LOG2 >> (4 * dtype)) & 0xf) : 0;
}

/* Sums the tensors of a std::vector<at::Tensor> (begin, end: TensorImpl pointers) or of one
 * at::Tensor, into deref[0] (bytes), deref[1] (elements), deref[4] (dtype | count << 32). */
static __always_inline void sum_tensors(struct eacgm_call_event *e, __u64 arg, bool one)
{
	__u64 impls[2] = {0, 0};
	__u64 n = 1;
	e->deref[0] = ~0ULL;
	if (!torch_numel_offset || !arg)
		return;
	if (one) {
		bpf_probe_read_user(&impls[0], sizeof(__u64), (void *)arg);
	} else {
		if (bpf_probe_read_user(impls, sizeof(impls), (void *)arg))
			return;
		n = (impls[1] - impls[0]) / 8;
	}
	__u64 bytes = 0, elems = 0, first_dtype = 0;
	bool known = n <= EACGM_MAX_TENSORS;
	for (int i = 0; i < EACGM_MAX_TENSORS && i < n; i++) {
		__u64 impl = impls[0];
		if (!one)
			bpf_probe_read_user(&impl, sizeof(impl), (void *)(impls[0] + 8 * i));
		__s64 numel = 0;
		__u16 dtype = 0xffff;
		bpf_probe_read_user(&numel, sizeof(numel), (void *)(impl + torch_numel_offset));
		bpf_probe_read_user(&dtype, sizeof(dtype), (void *)(impl + torch_dtype_offset));
		if (i == 0)
			first_dtype = dtype;
		__u64 size = scalar_size(dtype);
		if (!size || numel < 0)
			known = false;
		elems += numel;
		bytes += numel * size;
	}
	e->deref[0] = known ? bytes : ~0ULL;
	e->deref[1] = elems;
	e->deref[4] = first_dtype | (n << 32);
}

/* A call traced at its entry alone (c10d): the record goes out at once. */
static __always_inline int emit_entry_only(struct pt_regs *ctx, __u64 cookie, __u64 id)
{
	__u64 now = bpf_ktime_get_ns();
	/* the calls themselves get their Python stack (they read a process group: PG_ARG1), not
	 * the Work bookkeeping probes */
	__s64 stack_ts = python_enabled && (cookie & EACGM_COOKIE_PG_ARG1)
				 ? py_call_stack(id >> 32, (__u32)id, now, py_stack_depth)
				 : 0;
	struct eacgm_call_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->py_stack_ts = stack_ts > 0 ? (__u64)stack_ts : 0;
	e->runq_ns = EACGM_RUNQ_UNKNOWN; /* the call lasts until its Work completes, elsewhere */
	e->entry_run_delay = run_delay();
	e->kind = EACGM_REC_CALL;
	e->op = cookie & EACGM_COOKIE_OP_MASK;
	e->ts_ns = now;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->args[0] = PT_REGS_PARM1(ctx);
	e->args[1] = PT_REGS_PARM2(ctx);
	e->args[2] = PT_REGS_PARM3(ctx);
	e->args[3] = PT_REGS_PARM4(ctx);
	e->args[4] = PT_REGS_PARM5(ctx);
	e->args[5] = ctx->r9;
	if (cookie & EACGM_COOKIE_TENSORS) {
		__u32 arg = (cookie >> EACGM_COOKIE_TENSOR_ARG_SHIFT) & 7;
		if (arg < 6)
			sum_tensors(e, e->args[arg], cookie & EACGM_COOKIE_TENSOR_ONE);
	}
	if (cookie & EACGM_COOKIE_DEREF_ARG1)
		bpf_probe_read_user(&e->deref[2], sizeof(__u64), (void *)e->args[1]);
	if ((cookie & EACGM_COOKIE_PG_ARG1) && torch_pg_rank_offset)
		bpf_probe_read_user(&e->deref[3], sizeof(__u64),
				    (void *)(e->args[1] + torch_pg_rank_offset));
	if ((cookie & EACGM_COOKIE_PG_ARG1) && torch_pg_seq_offset)
		bpf_probe_read_user(&e->deref[2], sizeof(__u64),
				    (void *)(e->args[1] + torch_pg_seq_offset));
	bpf_ringbuf_submit(e, wake_flags());
	return 0;
}

/* The gputime layer: eacgm_gputime_batch(buf, bytes) in eacgm's CUDA injection library. Its
 * buffer is always EACGM_GPU_BATCH_BYTES long, so the copy has a constant size. */
static __always_inline int emit_gpu_batch(struct pt_regs *ctx, __u64 id)
{
	struct eacgm_gpu_batch_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		return 0;
	}
	e->kind = EACGM_REC_GPU_BATCH;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->ts_ns = bpf_ktime_get_ns();
	__u64 bytes = PT_REGS_PARM2(ctx);
	e->bytes = bytes > EACGM_GPU_BATCH_BYTES ? EACGM_GPU_BATCH_BYTES : (__u32)bytes;
	if (bpf_probe_read_user(e->data, sizeof(e->data), (void *)PT_REGS_PARM1(ctx)) != 0)
		e->bytes = 0;
	bpf_ringbuf_submit(e, wake_flags());
	return 0;
}

static __always_inline int on_entry(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	if (cookie & EACGM_COOKIE_GPU_BATCH)
		return is_traced(id >> 32) ? emit_gpu_batch(ctx, id) : 0;
	if (cookie & EACGM_COOKIE_ENTRY_ONLY)
		return is_traced(id >> 32) ? emit_entry_only(ctx, cookie, id) : 0;
	/* A thread with calls storage belongs to a traced process: storage is made only for those,
	 * and a process leaves the traced set only when it exits (its tasks' storage goes with
	 * them). So the traced set's hash lookup is paid once per thread, not per call. */
	struct task_struct *task = bpf_get_current_task_btf();
	struct task_calls *t = bpf_task_storage_get(&inflight, task, 0, 0);
	if (!t) {
		if (!is_traced(id >> 32))
			return 0;
		t = bpf_task_storage_get(&inflight, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!t)
			return 0;
	}
	__u64 sp = PT_REGS_SP(ctx);
	/* The stack grows down: callers of this call have higher stack pointers. Entries below
	 * this one belong to calls that already left (longjmp); at the same one, to a call that
	 * left, unless this call is its tail call. */
	__u32 depth = t->depth;
	/* (calls_gen read where it is compared, not kept: a local live across the loop cost this
	 * program's frame the 8 bytes that put the Python walk's chain over 512) */
	for (int i = 0; i < MAX_DEPTH && depth > 0; i++) {
		const struct inflight_call *top = &t->calls[slot(depth - 1)];
		bool stale = (top->op & EACGM_COOKIE_DUTY) && top->gen != calls_gen;
		if (!stale && (top->sp > sp || (top->sp == sp && is_tail_call(sp))))
			break;
		depth--;
	}
	if (depth >= MAX_DEPTH) {
		t->depth = depth;
		count(EACGM_CNT_ENTRY_OVERFLOW);
		return 0;
	}
	struct inflight_call *c = &t->calls[slot(depth)];
	c->sp = sp;
	c->op = cookie;
	c->gen = calls_gen;
	c->ts_ns = bpf_ktime_get_ns();
	c->run_delay = run_delay();
	c->args[0] = PT_REGS_PARM1(ctx);
	c->args[1] = PT_REGS_PARM2(ctx);
	c->args[2] = PT_REGS_PARM3(ctx);
	c->args[3] = PT_REGS_PARM4(ctx);
	c->args[4] = PT_REGS_PARM5(ctx);
	c->args[5] = ctx->r9; /* PT_REGS_PARM6 is newer than libbpf 1.1 */
	if (cookie & EACGM_COOKIE_READ_STACK) {
		/* at function entry sp points at the return address; args 7.. follow it */
		bpf_probe_read_user(c->stack, sizeof(c->stack), (void *)(sp + 8));
	}
	if (cookie & EACGM_COOKIE_DEREF_ARG0)
		bpf_probe_read_user(c->deref, sizeof(c->deref), (void *)c->args[0]);
	/*
	 * The Python stack, read once per outermost call: a call made inside another traced call
	 * (aten::linear -> aten::addmm, cudaMalloc -> cuMemAlloc) has the same Python frames, as
	 * no Python code runs between them; 30% of a small GPT's operators are such calls.
	 */
	c->py_stack_ts = 0;
	if (python_enabled) { /* set before load: costs nothing when the python layer is off */
		/* read before the lookup: a process added meanwhile moves it past what is kept */
		__u32 gen = (__u32)*(volatile __u64 *)&py_procs_gen;
		if (depth > 0) {
			c->py_stack_ts = t->calls[slot(depth - 1)].py_stack_ts;
		} else if (t->py_absent_gen != gen) {
			__s64 ts = py_call_stack(id >> 32, (__u32)id, c->ts_ns, py_stack_depth);
			if (ts > 0)
				c->py_stack_ts = (__u64)ts;
			else if (ts < 0)
				t->py_absent_gen = gen;
		}
	}
	t->depth = depth + 1;
	return 0;
}

/* Rare (kernel lookups happen once per kernel), so the reader is woken with it. */
static __always_inline void emit_name(__u32 op, __u32 pid, const struct inflight_call *c)
{
	struct eacgm_name_event *n = bpf_ringbuf_reserve(&events, sizeof(*n), 0);
	if (!n) {
		count(EACGM_CNT_RING_DROPS);
		return;
	}
	n->kind = EACGM_REC_NAME;
	n->op = op;
	n->pid = pid;
	n->pad = 0;
	n->handle = 0;
	bpf_probe_read_user(&n->handle, sizeof(n->handle), (void *)c->args[0]);
	if (bpf_probe_read_user_str(n->name, sizeof(n->name), (void *)c->args[2]) < 0)
		n->name[0] = 0;
	bpf_ringbuf_submit(n, 0);
}

static __always_inline int on_return(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct task_calls *t = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, 0);
	if (!t) {
		if (is_traced(id >> 32))
			count(EACGM_CNT_ENTRY_MISSING);
		return 0;
	}
	__u64 cookie = bpf_get_attach_cookie(ctx);
	/* after `ret` the stack pointer is one word above where it was at entry; at an exit
	 * instruction, the cookie says where it was */
	/* both read at fixed offsets: the verifier refuses a computed context offset */
	__u64 sp = PT_REGS_SP(ctx), fp = PT_REGS_FP(ctx);
	__u64 entry_sp = sp - 8;
	if (cookie & EACGM_COOKIE_EXIT_INSN)
		entry_sp = ((cookie & EACGM_COOKIE_EXIT_RBP) ? fp : sp) +
			   (__s16)(cookie >> EACGM_COOKIE_EXIT_OFFSET_SHIFT);
	__u32 depth = t->depth;
	/* drop entries deeper than this frame: their returns were skipped (longjmp) */
	for (int i = 0; i < MAX_DEPTH && depth > 0; i++) {
		if (t->calls[slot(depth - 1)].sp >= entry_sp)
			break;
		depth--;
	}
	struct inflight_call *c = &t->calls[slot(depth - 1)];
	if (depth == 0 || c->sp != entry_sp ||
	    (c->op & EACGM_COOKIE_OP_MASK) != (cookie & EACGM_COOKIE_OP_MASK)) {
		t->depth = depth;
		if (is_traced(id >> 32))
			count(EACGM_CNT_ENTRY_MISSING);
		return 0;
	}
	t->depth = depth - 1;
	/* An entry from before the duty-cycled probes came back: this return may be another call
	 * of the same function at the same depth, entered while they were off (the loop that calls
	 * it each step), which would make one call of the whole off phase. Dropped. */
	if ((c->op & EACGM_COOKIE_DUTY) && c->gen != calls_gen)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__s64 ret = PT_REGS_RC(ctx);
	if ((cookie & EACGM_COOKIE_NAME_ARG2) && (__s32)ret == 0)
		emit_name(cookie & EACGM_COOKIE_OP_MASK, id >> 32, c);

	struct eacgm_call_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		return 0;
	}
	e->kind = EACGM_REC_CALL;
	e->op = cookie & EACGM_COOKIE_OP_MASK;
	e->ts_ns = c->ts_ns;
	e->dur_ns = now - c->ts_ns;
	e->runq_ns = runq_since(c->run_delay, e->dur_ns);
	e->entry_run_delay = c->run_delay;
	e->py_stack_ts = c->py_stack_ts;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->ret = ret;
	__builtin_memcpy(e->args, c->args, sizeof(e->args));
	__builtin_memcpy(e->stack, c->stack, sizeof(e->stack));
	__builtin_memcpy(e->deref, c->deref, sizeof(e->deref));
	if (cookie & EACGM_COOKIE_DEREF_OUT0) {
		__u64 out = 0;
		bpf_probe_read_user(&out, sizeof(out), (void *)c->args[0]);
		e->deref[0] = out;
	}
	if (cookie & EACGM_COOKIE_DEREF_OUT3) {
		__u64 out = 0;
		bpf_probe_read_user(&out, sizeof(out), (void *)c->args[3]);
		e->deref[1] = out;
	}
	bpf_ringbuf_submit(e, wake_flags());
	return 0;
}

/*
 * Each probe point exists twice: as a classic perf-event uprobe (any kernel with uprobes), and
 * for uprobe_multi links (kernel 6.6+; the loader sets their expected attach type). A multi
 * link attaches all of a file's functions at once, and detaching it waits for one RCU grace
 * period instead of one per probe (0.1 s each here), which is what makes stopping fast.
 */
SEC("uprobe")
int call_entry(struct pt_regs *ctx)
{
	return on_entry(ctx);
}

SEC("uretprobe")
int call_return(struct pt_regs *ctx)
{
	return on_return(ctx);
}

SEC("uprobe")
int call_entry_multi(struct pt_regs *ctx)
{
	return on_entry(ctx);
}

SEC("uprobe")
int call_return_multi(struct pt_regs *ctx)
{
	return on_return(ctx);
}

/*
 * Exit-instruction probes: plain uprobes on a function's `ret` and tail jumps, for C++
 * functions that may throw. A uretprobe replaces the return address with its trampoline, which
 * has no unwind info: an exception thrown through it makes the C++ runtime call std::terminate.
 * An exception leaving the function fires no exit probe; its entry is dropped like a longjmp's.
 */
SEC("uprobe")
int call_exit(struct pt_regs *ctx)
{
	return on_return(ctx);
}

SEC("uprobe")
int call_exit_multi(struct pt_regs *ctx)
{
	return on_return(ctx);
}

static __always_inline void emit_proc(__u32 type, __u32 pid, __u32 ppid, __s32 exit_code)
{
	struct eacgm_proc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		return;
	}
	e->kind = EACGM_REC_PROC;
	e->type = type;
	e->ts_ns = bpf_ktime_get_ns();
	e->pid = pid;
	e->ppid = ppid;
	e->exit_code = exit_code;
	e->pad = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	/* lifecycle events are rare and userspace acts on them (naming, re-planning): wake now */
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(proc_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 child_tgid = child->tgid;
	if (child->pid != child_tgid)
		return 0; /* a new thread, not a new process */
	__u32 parent_tgid = parent->tgid;
	if (filter_mode != EACGM_FILTER_ALL) {
		if (!bpf_map_lookup_elem(&traced, &parent_tgid))
			return 0;
		__u8 one = 1;
		bpf_map_update_elem(&traced, &child_tgid, &one, BPF_ANY);
	}
	emit_proc(EACGM_PROC_FORK, child_tgid, parent_tgid, 0);
	return 0;
}

struct text_vma {
	__u64 start, end, offset;
};

static long copy_vma(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct text_vma *v = data;
	v->start = vma->vm_start;
	v->end = vma->vm_end;
	v->offset = vma->vm_pgoff << 12;
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct eacgm_exec_image_event);
} exec_scratch SEC(".maps");

/* The new program's text mapping and file, so that its code can be named even if it exits
 * before userspace gets to read /proc/PID/maps (a short-lived child of a launcher). */
static __always_inline void emit_exec_image(struct task_struct *p, struct linux_binprm *bprm,
					    __u32 tgid)
{
	__u32 zero = 0;
	struct eacgm_exec_image_event *e = bpf_map_lookup_elem(&exec_scratch, &zero);
	if (!e)
		return;
	e->kind = EACGM_REC_EXEC_IMAGE;
	e->pid = tgid;
	e->pad = 0;
	e->ino = BPF_CORE_READ(bprm, file, f_inode, i_ino);
	e->dev = BPF_CORE_READ(bprm, file, f_inode, i_sb, s_dev);
	if (bpf_probe_read_kernel_str(e->path, sizeof(e->path), BPF_CORE_READ(bprm, interp)) < 0)
		e->path[0] = 0;
	__u64 start_code = BPF_CORE_READ(p, mm, start_code);
	struct text_vma v = {};
	if (bpf_find_vma(p, start_code, copy_vma, &v, 0) != 0 || v.end == 0)
		return;
	e->start = v.start;
	e->end = v.end;
	e->offset = v.offset;
	if (bpf_ringbuf_output(&events, e, sizeof(*e), 0) != 0)
		count(EACGM_CNT_RING_DROPS);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(proc_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (filter_mode != EACGM_FILTER_ALL && !is_traced(tgid))
		return 0;
	emit_exec_image(p, bprm, tgid);
	emit_proc(EACGM_PROC_EXEC, tgid, 0, 0);
	return 0;
}

/* Only the first argument is read: later kernels added a second one (group_dead). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit, struct task_struct *task)
{
	__u32 tgid = task->tgid;
	if (filter_mode != EACGM_FILTER_ALL && !is_traced(tgid))
		return 0;
	/* the whole process is gone when its last thread exits (signal->live reached zero) */
	int live = BPF_CORE_READ(task, signal, live.counter);
	if (live != 0)
		return 0;
	__s32 code = BPF_CORE_READ(task, exit_code);
	emit_proc(EACGM_PROC_EXIT, tgid, 0, code);
	if (filter_mode != EACGM_FILTER_ALL)
		bpf_map_delete_elem(&traced, &tgid);
	return 0;
}

/*
 * The dynamic loader calls _dl_debug_state (the debugger hook of the r_debug protocol) after it
 * maps new objects and before their code runs: userspace re-reads the maps and plans probes.
 * A uprobe here needs no tracefs (classic tracepoints do) and fires only on dlopen.
 */
static __always_inline int on_loader_update(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (filter_mode == EACGM_FILTER_ALL || !is_traced(tgid))
		return 0; /* --all re-plans on a timer instead */
	struct eacgm_mmap_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		return 0;
	}
	e->kind = EACGM_REC_MMAP;
	e->pid = tgid;
	e->ts_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return 0;
}

SEC("uprobe")
int loader_update(struct pt_regs *ctx)
{
	return on_loader_update();
}

/* The same as a uprobe_multi link: attaching it needs no perf event (CAP_BPF + CAP_PERFMON). */
SEC("uprobe")
int loader_update_multi(struct pt_regs *ctx)
{
	return on_loader_update();
}
