/* The one contract between the BPF programs and userspace: event structs and probe cookies. */
#ifndef EACGM_EVENTS_H
#define EACGM_EVENTS_H

#ifdef __bpf__
/* vmlinux.h already defines the __u* types */
#else
#include <linux/types.h>
#endif

/* Every ring-buffer record starts with this tag so one ring can carry several kinds. */
enum eacgm_record_kind {
	EACGM_REC_CALL = 1, /* a completed call of a probed function */
	EACGM_REC_PROC = 2, /* process lifecycle: fork, exec, exit */
	EACGM_REC_MMAP = 3, /* a traced process dlopened (loader hook): snapshot maps, re-plan probes */
	EACGM_REC_NAME = 4, /* a handle got a name (driver kernel lookups): precedes its call record */
	EACGM_REC_EXEC_IMAGE = 5, /* the text mapping of a freshly exec'd program: precedes its EXEC */
	EACGM_REC_SAMPLE = 6, /* a CPU sample of a traced thread: its user stack (and, for CPython,
				 the Python stack in a PY_STACK record just before, stamped ts_ns) */
	EACGM_REC_OFFCPU = 7, /* an off-CPU sample: a traced thread blocked, and where (a PY_STACK
				 record stamped ts_ns before it, as for SAMPLE) */
	EACGM_REC_GPU_BATCH = 8, /* GPU-side time: a batch of CUPTI records from eacgm's injection
				    library (src/gputime/gpu_batch.h), as it passed them */
};

#define EACGM_SAMPLE_MAX_FRAMES 64

/* One CPU sample (a perf event at --sample-hz on each CPU) of a traced thread that was running. */
struct eacgm_sample_event {
	__u32 kind;    /* EACGM_REC_SAMPLE */
	__u32 pid;
	__u32 tid;
	__u32 nframes; /* user-space frames in ips, innermost first (a frame-pointer walk) */
	__u64 ts_ns;   /* CLOCK_MONOTONIC */
	__u64 ips[EACGM_SAMPLE_MAX_FRAMES];
};

/*
 * One off-CPU sample: a traced thread that blocked (switched out not runnable: a sleep, a lock,
 * I/O) and ran again. A wait of at least the sampling period is always sent, weighing its
 * duration; a shorter one is sent with probability dur / period, weighing one period, so that
 * the weights sum to the time spent blocked, at about one record per period of it.
 */
struct eacgm_offcpu_event {
	__u32 kind;    /* EACGM_REC_OFFCPU */
	__u32 pid;
	__u32 tid;
	__u32 nframes; /* user-space frames in ips where it blocked, innermost first */
	__u64 ts_ns;   /* when it blocked (CLOCK_MONOTONIC) */
	__u64 dur_ns;  /* how long it was off the CPU */
	__u64 weight_ns;
	__u64 ips[EACGM_SAMPLE_MAX_FRAMES];
};

/*
 * The BPF cookie attached to each probe says which operation it is and what the kernel side
 * must read beyond the six register arguments. Userspace gives operations their meaning.
 */
#define EACGM_COOKIE_OP_MASK 0xffffULL
#define EACGM_COOKIE_READ_STACK (1ULL << 16)   /* copy 3 stack words (args 7..9) at entry */
#define EACGM_COOKIE_DEREF_ARG0 (1ULL << 17)   /* copy 40 bytes at *arg0 at entry (launch configs) */
#define EACGM_COOKIE_DEREF_OUT0 (1ULL << 18)   /* at return, read the u64 arg0 points to (allocations) */
#define EACGM_COOKIE_NAME_ARG2 (1ULL << 19)    /* on success, emit a NAME record: *arg0 is named by
						  the string at arg2 (cuModuleGetFunction) */
#define EACGM_COOKIE_DEREF_OUT3 (1ULL << 20)   /* at return, deref[1] = the u64 arg3 points to
						  (ncclCommSplit's new communicator) */
#define EACGM_COOKIE_EXIT_INSN (1ULL << 21)    /* a probe where the function leaves (ret,
						  tail jump, the stack-protector check before a
						  ret), not a uretprobe: the entry's stack
						  pointer is rsp (or rbp, with EXIT_RBP) plus the
						  signed 16-bit offset in bits 32..47; the return
						  register is not meaningful there */
#define EACGM_COOKIE_EXIT_RBP (1ULL << 30)
#define EACGM_COOKIE_EXIT_OFFSET_SHIFT 32
/* PyTorch c10d: calls whose completion comes later, elsewhere (a Gloo worker thread), are
 * traced by entry probes alone; userspace pairs a call with its Work object's completion. */
#define EACGM_COOKIE_ENTRY_ONLY (1ULL << 22)   /* emit the record at entry, duration 0 */
#define EACGM_COOKIE_TENSORS (1ULL << 23)      /* sum the tensors the argument in bits 26..28
						  points to: deref[0] = bytes (~0: unknown
						  layout or dtype), deref[1] = elements,
						  deref[4] = first dtype | tensor count << 32 */
#define EACGM_COOKIE_TENSOR_ONE (1ULL << 24)   /* ... one at::Tensor, not a vector of them */
#define EACGM_COOKIE_DEREF_ARG1 (1ULL << 25)   /* deref[2] = the u64 arg1 points to */
#define EACGM_COOKIE_TENSOR_ARG_SHIFT 26       /* 3 bits: the argument register (0..5) */
#define EACGM_COOKIE_PG_ARG1 (1ULL << 29)      /* deref[3] = the u64 at arg1 + the process
						  group's rank offset (rank | size << 32),
						  deref[2] = its collectives' sequence number */
#define EACGM_MAX_TENSORS 8                    /* summed per call; more: bytes unknown */
#define EACGM_COOKIE_GPU_BATCH (1ULL << 31)    /* eacgm_gputime_batch(buf, bytes): copy the
						  library's batch buffer into a GPU_BATCH record */

#define EACGM_COOKIE_DUTY (1ULL << 48)        /* a duty-cycled probe (the agent's --call-duty):
						  detached and attached again while the process
						  runs, so an entry older than the last attach
						  (calls_gen) may have lost its return */

#define EACGM_STACK_WORDS 3
#define EACGM_DEREF_WORDS 5

struct eacgm_call_event {
	__u32 kind;   /* EACGM_REC_CALL */
	__u32 op;     /* operation id from the cookie */
	__u64 ts_ns;  /* CLOCK_MONOTONIC at entry */
	__u64 dur_ns; /* entry to return */
	__u32 pid;    /* tgid */
	__u32 tid;
	__s64 ret;    /* return register */
	__u64 args[6];
	__u64 stack[EACGM_STACK_WORDS];
	__u64 deref[EACGM_DEREF_WORDS]; /* DEREF_ARG0 bytes, or deref[0] = *arg0 after DEREF_OUT0,
					 deref[1] = *arg3 after DEREF_OUT3 */
	__u64 runq_ns; /* time the calling thread waited for a CPU during the call (the kernel's
			  sched_info.run_delay), at most dur_ns; EACGM_RUNQ_UNKNOWN where not known */
	__u64 entry_run_delay; /* the thread's sched_info.run_delay at entry: its whole wait for a
				  CPU so far; EACGM_RUNQ_UNKNOWN where not known */
	__u64 py_stack_ts; /* the Python stack: the PY_STACK record stamped this (ts_ns for the
			      outermost traced call of its thread, read at entry; a call inside
			      another shares the outer one's stack: no Python runs between them);
			      0: none read */
};

#define EACGM_RUNQ_UNKNOWN (~0ULL)

/* The injection library's batch buffer: always this long, so the probe copies a constant size. */
#define EACGM_GPU_BATCH_BYTES 16384

struct eacgm_gpu_batch_event {
	__u32 kind;  /* EACGM_REC_GPU_BATCH */
	__u32 pid;
	__u32 tid;   /* the thread that passed it (CUPTI's) */
	__u32 bytes; /* used of data: the call's second argument; 0 when the buffer was unreadable */
	__u64 ts_ns;
	__u8 data[EACGM_GPU_BATCH_BYTES];
};

#define EACGM_NAME_BYTES 1024

/* A driver handle (CUfunction, CUkernel) and the name it was looked up by. Written just before
 * the call record of the lookup, so the decoder knows the name when the launches come. */
struct eacgm_name_event {
	__u32 kind; /* EACGM_REC_NAME */
	__u32 op;
	__u32 pid;
	__u32 pad;
	__u64 handle;
	char name[EACGM_NAME_BYTES]; /* NUL-terminated, truncated to fit */
};

enum eacgm_proc_type {
	EACGM_PROC_FORK = 1,
	EACGM_PROC_EXEC = 2,
	EACGM_PROC_EXIT = 3,
};

struct eacgm_proc_event {
	__u32 kind; /* EACGM_REC_PROC */
	__u32 type; /* enum eacgm_proc_type */
	__u64 ts_ns;
	__u32 pid;       /* tgid of the process the event is about (child for fork) */
	__u32 ppid;      /* parent tgid for fork */
	__s32 exit_code; /* wait(2)-style status for exit */
	__u32 pad;
	char comm[16];
};

struct eacgm_mmap_event {
	__u32 kind; /* EACGM_REC_MMAP */
	__u32 pid;
	__u64 ts_ns;
};

#define EACGM_PATH_BYTES 256

/* Where an exec'd program's code lies, read in the kernel at exec: a process that exits before
 * userspace reads its /proc maps can still have its kernel stubs named through this. */
struct eacgm_exec_image_event {
	__u32 kind; /* EACGM_REC_EXEC_IMAGE */
	__u32 pid;
	__u64 start;  /* the text mapping: [start, end) */
	__u64 end;
	__u64 offset; /* file offset of start */
	__u64 ino;
	__u32 dev;    /* the kernel's dev_t: major << 20 | minor */
	__u32 pad;
	char path[EACGM_PATH_BYTES]; /* as given to execve (the interpreter for scripts); may be relative */
};

/* Per-CPU counters in the `counters` array map. */
enum eacgm_counter {
	EACGM_CNT_RING_DROPS = 0,     /* bpf_ringbuf_reserve failed: event lost */
	EACGM_CNT_ENTRY_MISSING = 1,  /* a return without its entry (attached mid-call, or map full) */
	EACGM_CNT_ENTRY_OVERFLOW = 2, /* the in-flight map was full at entry */
	EACGM_CNT_OFFCPU_LOST = 3,    /* a blocking switch whose thread had no storage for its
					 stacks (the kernel refused to make it then) */
	EACGM_CNT_PY_STACKS_REUSED = 4, /* calls whose Python stack was one of their thread's last
					   call stacks again, not read and sent anew */
	EACGM_CNT_OFFCPU_STACKS_REUSED = 5, /* blocking switches at the same place as their
					       thread's last: its native stack kept, not walked */
	EACGM_CNT_MAX = 6,
};

/* Writes to the host layer's process, network and disk maps, per CPU slot (host.bpf.c's
 * `changes`, read by userspace through the mapped .bss to skip walking unchanged maps). */
#define EACGM_CHANGE_SLOTS 256
struct eacgm_changes {
	__u64 procs, nets, disks, takers;
	__u64 pad[4]; /* one 64-byte cache line per slot */
};

/*
 * Host layer: counters aggregated in BPF maps (per-CPU), read by userspace at each sampling
 * interval. All are cumulative except the *_max_ns fields, which hold the maximum seen in the
 * sampling epoch named by *_epoch (userspace advances the epoch at each sample).
 */
struct eacgm_host_proc_stats {
	__u64 runq_wait_ns;   /* time runnable but waiting for a CPU (wakeup/preemption to run) */
	__u64 runq_waits;
	__u64 runq_max_ns;
	__u64 runq_epoch;
	__u64 voluntary_switches;   /* blocked (sleep, I/O, lock) */
	__u64 involuntary_switches; /* preempted while runnable */
	__u64 offcpu_ns;
	__u64 oncpu_ns;
	__u64 sock_tx_bytes; /* socket payload sent and received by the process's threads */
	__u64 sock_rx_bytes;
	__u64 io_ops; /* block I/O (bios) submitted by the process's threads */
	__u64 io_bytes;
	__u64 tcp_retransmits; /* segments its TCP sockets sent again */
	__u64 page_faults;     /* user-mode page faults, minor and major */
	__u64 reclaim_ns;      /* time its threads spent reclaiming memory (direct or cgroup) */
	__u64 reclaims;
	__u64 pagein_bytes; /* file data it read into the page cache (reads, major faults) */
	__u64 stall_ns; /* time the CPU under one of its running threads stopped (struct eacgm_cpu_stalls) */
	__u64 stall_end_ns; /* when the last such stop ended (ktime) */
	__u64 stalls;       /* such stops */
	char comm[16]; /* the process's name when first seen */
};

/*
 * Who had the CPU a traced thread waited for (host layer, cpu_takers): at the switch that ends a
 * wait of EACGM_TAKER_MIN_WAIT_NS or more for a CPU, the wait is charged to the process that ran
 * on that CPU until then, when it is another process than the waiting one's and not the idle
 * task. One entry per (waiting process, taker): the waits since userspace last took it out.
 */
#define EACGM_TAKER_MIN_WAIT_NS 100000ull
struct eacgm_cpu_taker_key {
	__u32 victim; /* tgid of the traced process that waited */
	__u32 taker;  /* tgid of the process that ran */
};
struct eacgm_cpu_taker {
	__u64 wait_ns; /* waits charged to it */
	char comm[16]; /* the taker's name (its main thread's) when first charged */
};

/*
 * One CPU's stops (host layer, a per-CPU array): time the CPU did not run at all, read from
 * its scheduler tick firing late (see host_timer_late).
 */
struct eacgm_cpu_stalls {
	__u64 stall_ns;     /* summed */
	__u64 stalls;       /* stops */
	__u64 stall_end_ns; /* when the last ended (ktime) */
};

struct eacgm_net_key {
	__u32 ifindex;
	__u32 netns; /* network namespace inode: ifindexes repeat across namespaces */
};

struct eacgm_net_stats {
	__u64 tx_bytes; /* frames with their link-layer header, as the interface counters count */
	__u64 tx_packets;
	__u64 rx_bytes;
	__u64 rx_packets;
	char name[16];
};

struct eacgm_disk_stats {
	__u64 read_ops;
	__u64 read_bytes;
	__u64 write_ops;
	__u64 write_bytes;
	__u64 latency_ns; /* issue to completion, summed */
	__u64 latency_max_ns;
	__u64 latency_epoch;
};

/* Filter modes, set in rodata before load. */
enum eacgm_filter_mode {
	EACGM_FILTER_PIDS = 0, /* only tgids in the `traced` map, and their descendants */
	EACGM_FILTER_ALL = 1,  /* every process */
};

#include "python_events.h"

#endif
