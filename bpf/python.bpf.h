/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The python layer's kernel side, included by calls.bpf.c so that it shares the ring buffer, the
 * traced-process filter and the counters. It reads CPython's own structures with the offsets
 * userspace put in py_layouts (one entry per probed interpreter file; the probe cookie says
 * which), and does three things:
 *  - times each call of _PyEval_EvalFrameDefault (entry + return probe; arg 2 is the frame),
 *    for code objects userspace said to trace (py_codes), and names each new code object once;
 *  - on 3.11+ (3.13 included), makes every Python call enter _PyEval_EvalFrameDefault from C:
 *    userspace writes that function's own address into interp->eval_frame (PEP 523), after
 *    which the interpreter stops inlining Python-to-Python calls (their specialised
 *    instructions deoptimise) and calls
 *    _PyEval_EvalFrame -> eval_frame -> _PyEval_EvalFrameDefault, i.e. the very same function;
 *  - gives the call layers the Python stack of the calling thread (py_emit_stack).
 */
#ifndef EACGM_PYTHON_BPF_H
#define EACGM_PYTHON_BPF_H

/* Set before load: the python layer is on (else the stack reads compile away), and how many
 * frames a stack keeps. */
const volatile bool python_enabled = false;
const volatile __u32 py_stack_depth = 8;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EACGM_PY_MAX_LAYOUTS);
	__type(key, __u32);
	__type(value, struct eacgm_py_layout);
} py_layouts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct eacgm_py_process);
} py_procs SEC(".maps");

/* Code objects seen, with userspace's verdict; LRU: one evicted is simply named again. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 131072);
	__type(key, struct eacgm_py_code_key);
	__type(value, __u32);
} py_codes SEC(".maps");

/* Python calls in flight per thread. The kernel keeps at most 64 return probes pending per
 * task, so deeper calls could not be timed anyway. */
#define PY_MAX_DEPTH 64

struct py_open_call {
	__u64 sp;
	__u64 ts_ns;
	__u64 run_delay; /* the thread's run-queue wait so far, at entry */
	__u64 code;
	__u64 name_obj;
	__u32 firstlineno;
	__u32 pad;
};

/*
 * What the thread's last stack walks learned of each code object, to skip reading its identity
 * again (one bpf_probe_read_user, 100-180 ns here) and registering it: the operators of a
 * training step run the same few dozen functions over and over. Direct-mapped by code address
 * (by frame address until session 71: a frame address that ran one module's forward for some
 * operators and another's for the next, as a training's do, missed at every walk, one read a
 * walk on the tiny GPT; keyed by code, one in six walks). An entry holds only while py_code_gen
 * has not moved since it was made: code at the same address is the same code object unless that
 * one was freed and a new one made there, and a new code object bumps py_code_gen when it is
 * first named, at its first call through the eval probe. That is exact where every call goes
 * through the eval probe (3.10, or 3.11+ with eacgm's hook); elsewhere a new code object could
 * run unseen, and entries hold for PY_MEMO_TTL_NS only (a code object freed and another made at
 * its address within that time is named as the first until then; keyed by frame too, that
 * needed the same frame address as well). Code made from a string is never remembered.
 */
#define PY_MEMO_SLOTS 32

/*
 * Where a thread's calls do not all pass the eval probe (the default: no --python-calls), the
 * memo and the stack reuse below hold for PY_MEMO_TTL_NS only: a code object freed and another
 * made at its address, running in a frame at the same address at the same instruction, would
 * otherwise be named as the first until the thread's stack changes. The bound costs one full
 * read per thread every PY_MEMO_TTL_NS.
 */
#define PY_MEMO_TTL_NS 100000000ull

struct py_frame_memo {
	__u64 code;
	__u64 name_obj;
	__u64 gen;
	__u64 ts;
	__u32 firstlineno;
	__u32 pad;
};

/* A frame of a stack the thread read for a call: what its next calls' walks compare. */
struct py_last_frame {
	__u64 frame;
	__u64 code;
	__u64 instr;
};

/*
 * The thread's last call stacks: a call whose frames are all those of one of them (frame, code
 * and instruction; e.g. the backward operators of one loss.backward(), or the operators of one
 * line in a loop, which alternate with those of the next) refers to that stack record instead
 * of reading and sending its own. Least recently used goes first: the decoder keeps more of the
 * stacks calls took, least recently used first too, so it still has every one referred to.
 */
#define PY_LAST_STACKS 4

struct py_last_stack {
	__u64 ts;   /* its record's call_ts; 0: none */
	__u64 end;  /* the frame the walk stopped at */
	__u64 gen;  /* py_code_gen then */
	__u64 used; /* when it was sent or last referred to */
	__u32 n;
	__u32 pad;
	struct py_last_frame f[EACGM_PY_MAX_STACK];
};

struct py_task {
	__u64 tstate; /* the thread's PyThreadState, as the last eval call or stack read found it */
	__u32 depth;
	__u32 evals; /* the eval probe has run on this thread (see struct py_frame_memo) */
	/* a call's walk (py_read_stack, for_call): bit k, so far the frames of last[k]; and the
	 * stack its frames are written over. Here, not in struct py_walk: see py_walk_frame. */
	__u32 walk_same;
	__u32 walk_victim;
	struct py_open_call calls[PY_MAX_DEPTH];
	struct py_frame_memo memo[PY_MEMO_SLOTS];
	struct py_last_stack last[PY_LAST_STACKS];
};

/* Bumped each time a code object is named for the first time (see struct py_frame_memo). */
__u64 py_code_gen = 1;

/* Bumped each time a process enters py_procs (here, and by userspace through the mapped
 * .data): a thread that found its process missing remembers the generation it looked at, and
 * looks again only once it moved, so calls of a process that runs no Python skip the lookup. */
__u64 py_procs_gen = 1;

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct py_task);
} py_tasks SEC(".maps");

/* A per-CPU first level in front of py_codes, for userspace's final verdicts: most calls are of
 * code objects seen just before, and the LRU lookup costs 100-190 ns here (measured with
 * kernel.bpf_stats_enabled). Same key as py_codes, so a reused address is not mistaken. */
#define PY_VERDICT_SLOTS 1024

struct py_verdict_slot {
	struct eacgm_py_code_key key;
	__u32 verdict;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PY_VERDICT_SLOTS);
	__type(key, __u32);
	__type(value, struct py_verdict_slot);
} py_verdicts SEC(".maps");

/*
 * Per-CPU room for what a stack read builds, in two slots: 0 for a call's stack (uprobes), 1 for
 * samples and off-CPU waits. A CPU sample (a timer interrupt) can land inside a probe's read on
 * the same CPU; with one slot it would write over the frames the probe was reading.
 */
#define PY_SCRATCH_SLOT(for_call) ((for_call) ? 0u : 1u)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct eacgm_py_stack_event);
} py_stack_scratch SEC(".maps");

static __always_inline __u32 py_slot(__u32 depth)
{
	asm volatile("" : "+r"(depth));
	return depth & (PY_MAX_DEPTH - 1);
}

static __always_inline __u64 py_ptr(__u64 addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

static __always_inline __u32 py_u32(__u64 addr)
{
	__u32 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

/* The characters of a str object: compact ASCII NUL-terminated, other compact strings raw with
 * their width in *kind (userspace converts). Returns the bytes copied. */
#define PY_READ_STR(dst, obj, l, kind_out)                                                        \
	({                                                                                        \
		__u32 _n = 0;                                                                     \
		__u8 _state = 0;                                                                  \
		bpf_probe_read_user(&_state, 1, (void *)((obj) + (l)->unicode_state));           \
		if (_state & 0x40) {                                                              \
			long _r = bpf_probe_read_user_str(dst, sizeof(dst),                      \
							  (void *)((obj) + (l)->unicode_ascii_data)); \
			_n = _r > 0 ? _r - 1 : 0;                                                 \
			kind_out = 0;                                                             \
		} else {                                                                          \
			__u8 _kind = (_state >> 2) & 7;                                           \
			__u64 _len = py_ptr((obj) + (l)->unicode_length) * _kind;                 \
			if (_len > sizeof(dst))                                                   \
				_len = sizeof(dst);                                               \
			asm volatile("" : "+r"(_len));                                            \
			if (_len > 0 && _len <= sizeof(dst) &&                                    \
			    bpf_probe_read_user(dst, _len,                                        \
						(void *)((obj) + (l)->unicode_compact_data)) == 0) \
				_n = _len;                                                        \
			kind_out = _kind;                                                         \
		}                                                                                 \
		_n;                                                                               \
	})

/* The print of an ASCII name's characters (see EACGM_PY_VOLATILE), from a copy of them. */
static __always_inline __u32 py_print_chars(const char *chars)
{
	__u32 h = EACGM_PY_NAME_PRINT_SEED;
	for (int i = 0; i < EACGM_PY_NAME_PRINT_BYTES && chars[i]; i++)
		h = eacgm_py_name_print_step(h, (__u8)chars[i]);
	return eacgm_py_name_print_fold(h);
}

static __always_inline __u32 py_name_print(__u64 name_obj, const struct eacgm_py_layout *l)
{
	char buf[EACGM_PY_NAME_PRINT_BYTES + 1] = {};
	bpf_probe_read_user_str(buf, sizeof(buf), (void *)(name_obj + l->unicode_ascii_data));
	return py_print_chars(buf);
}

/* Code made from a string: its file is "<string>", "<stdin>"..., not a "<frozen ...>" module. */
static __always_inline bool py_from_string(const char *file)
{
	const char frozen[] = "<frozen ";
	if (file[0] != '<')
		return false;
	for (int i = 1; i < sizeof(frozen) - 1; i++)
		if (file[i] != frozen[i])
			return true;
	return false;
}

/*
 * Userspace's verdict on a code object; the first time one is seen in a process, a CODE record
 * with its names and line table asks for it (PENDING until answered), and so does code made
 * from a string whose name no longer matches its verdict's print (EACGM_PY_VOLATILE, also set
 * in what it returns for such code once named). A global function: the verifier checks it once,
 * not at each of its call sites.
 */
__noinline int py_register_code(__u64 code, __u64 name_obj, __u32 pid, __u32 firstlineno,
				__u32 layout)
{
	struct eacgm_py_code_key key = {
		.code = code, .name_obj = name_obj, .pid = pid, .firstlineno = firstlineno};
	__u32 si = (__u32)((code >> 4) ^ (code >> 14)) & (PY_VERDICT_SLOTS - 1);
	struct py_verdict_slot *slot = bpf_map_lookup_elem(&py_verdicts, &si);
	__u32 verdict = 0;
	if (slot && slot->key.code == code && slot->key.name_obj == name_obj &&
	    slot->key.pid == pid && slot->key.firstlineno == firstlineno) {
		verdict = slot->verdict;
	} else {
		__u32 *v = bpf_map_lookup_elem(&py_codes, &key);
		if (v) {
			verdict = *v;
			if (slot && (verdict & EACGM_PY_VERDICT_MASK) != EACGM_PY_PENDING) {
				slot->key = key;
				slot->verdict = verdict;
			}
		}
	}
	if (verdict && !(verdict & EACGM_PY_VOLATILE))
		return verdict;
	const struct eacgm_py_layout *l = bpf_map_lookup_elem(&py_layouts, &layout);
	if (verdict) {
		/* code made from a string: the same key may be another function by now */
		if (!l || py_name_print(name_obj, l) == verdict >> 16)
			return (verdict & EACGM_PY_VERDICT_MASK) | EACGM_PY_VOLATILE;
		bpf_map_delete_elem(&py_codes, &key);
		if (slot)
			slot->key.code = 0;
	}
	__u32 pending = EACGM_PY_PENDING;
	if (bpf_map_update_elem(&py_codes, &key, &pending, BPF_NOEXIST) != 0)
		return EACGM_PY_PENDING; /* another CPU got there first */
	__sync_fetch_and_add(&py_code_gen, 1);
	if (!l)
		return EACGM_PY_PENDING;
	struct eacgm_py_code_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		bpf_map_delete_elem(&py_codes, &key); /* ask again next time */
		return EACGM_PY_PENDING;
	}
	e->kind = EACGM_REC_PY_CODE;
	e->version = l->version;
	e->key = key;
	__u8 kind = 0;
	e->name_bytes = PY_READ_STR(e->name, name_obj, l, kind);
	e->name_kind = kind;
	__u64 file = py_ptr(code + l->code_filename);
	e->file_bytes = PY_READ_STR(e->file, file, l, kind);
	e->file_kind = kind;
	/* checked from now on, before userspace has even answered (see EACGM_PY_VOLATILE) */
	if (e->name_kind == 0 && e->file_kind == 0 && py_from_string(e->file)) {
		__u32 v = EACGM_PY_PENDING | EACGM_PY_VOLATILE | py_print_chars(e->name) << 16;
		bpf_map_update_elem(&py_codes, &key, &v, BPF_EXIST);
	}
	__u64 table = py_ptr(code + l->code_linetable);
	__u64 size = py_ptr(table + l->bytes_size);
	if (size > sizeof(e->linetable))
		size = sizeof(e->linetable);
	asm volatile("" : "+r"(size));
	e->linetable_bytes = 0;
	if (size > 0 && size <= sizeof(e->linetable) &&
	    bpf_probe_read_user(e->linetable, size, (void *)(table + l->bytes_data)) == 0)
		e->linetable_bytes = size;
	/* userspace answers these: do not let them wait for the fill mark */
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return EACGM_PY_PENDING;
}

/* 3.13 frames hold f_executable, a code object or (the C-stack shim frames) None: whatever else
 * it is must not be read as code. Builds whose frames hold only code skip the check. */
static __always_inline bool py_is_code(__u64 obj, const struct eacgm_py_layout *l, __u64 runtime)
{
	if (!l->code_type_from_runtime)
		return obj != 0;
	return obj && py_ptr(obj + l->object_type) == runtime + l->code_type_from_runtime;
}

/* Room for a span (EACGM_PY_READ_SPAN) and an 8-byte field at any masked offset in it: offsets
 * are masked, not compared, so that walking frames in a loop adds no verifier states. */
#define PY_SPAN_BUF (EACGM_PY_READ_SPAN + 8)
#define PY_SPAN_OFF(x) ((x) & (EACGM_PY_READ_SPAN - 1))

/*
 * The span reads' buffers, per CPU and scratch slot (PY_SCRATCH_SLOT), not on the stack: a
 * call probe's stack read nests five BPF frames (the probe, py_read_stack, its bpf_loop callback,
 * py_read_frame or py_read_identity), and kernels that count a callback's frame with its caller's
 * (6.18.44 does) refused the 528 bytes they took with a 136-byte buffer on the stack
 * ("combined stack size of 4 calls is 528. Too large": the limit is 512).
 */
struct py_span {
	__u8 b[PY_SPAN_BUF];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct py_span);
} py_span_scratch SEC(".maps");

/* Reads `len` bytes (at most EACGM_PY_READ_SPAN) at addr into buf; false if it could not. */
static __always_inline bool py_read_span(__u8 *buf, __u64 len, __u64 addr)
{
	asm volatile("" : "+r"(len));
	return len > 0 && len <= EACGM_PY_READ_SPAN && bpf_probe_read_user(buf, len, (void *)addr) == 0;
}

/* The name object and first line that, with the code object's address, identify it: one read
 * (each bpf_probe_read_user costs 60-150 ns in this VM, about as much as the rest of the
 * program for a call the filter skips). A global function: verified once, not at each call site
 * (the stack walk's loop made loading take seconds). */
struct py_code_ident {
	__u64 name_obj;
	__u32 firstlineno;
	__u32 pad;
};

__noinline int py_read_identity(__u64 code, const struct eacgm_py_layout *l,
				struct py_code_ident *out, __u32 scratch)
{
	if (!out || !l)
		return -1;
	__u32 key = scratch & 1;
	struct py_span *span = bpf_map_lookup_elem(&py_span_scratch, &key);
	__u8 *buf = span ? span->b : NULL;
	__u64 lo = l->code_span_lo;
	if (!buf || !py_read_span(buf, l->code_span_len, code + lo)) {
		out->name_obj = py_ptr(code + l->code_name);
		out->firstlineno = py_u32(code + l->code_firstlineno);
		return 0;
	}
	__builtin_memcpy(&out->name_obj, buf + PY_SPAN_OFF(l->code_name - lo), 8);
	__builtin_memcpy(&out->firstlineno, buf + PY_SPAN_OFF(l->code_firstlineno - lo), 4);
	return 0;
}

/* 3.11+: asks userspace to route every Python call through _PyEval_EvalFrameDefault (see the
 * top of this file), at the process's first eval call after attach, which is normally during
 * interpreter start-up, well before the user's code runs. Userspace writes the hook (with
 * process_vm_writev): bpf_probe_write_user is not available on every kernel (not on ours). */
static __always_inline void py_request_hook(struct eacgm_py_process *p,
					    const struct eacgm_py_layout *l, __u32 pid,
					    __u64 tstate, __u64 eval_addr)
{
	__u64 interp = py_ptr(tstate + l->tstate_interp);
	if (!interp)
		return;
	struct eacgm_py_hook_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		return;
	}
	p->hook_addr = interp + l->interp_eval_frame;
	p->hook_value = eval_addr;
	p->hook = EACGM_PY_HOOK_REQUESTED;
	e->kind = EACGM_REC_PY_HOOK;
	e->pid = pid;
	e->hook_addr = p->hook_addr;
	e->hook_value = eval_addr;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

enum { PY_NOT_PUSHED = 0, PY_PUSHED = 1 };

/* A call pushed before userspace's verdict on its code: its calls inside count it in their
 * depth, and userspace, which may yet drop it, takes it out of theirs (see
 * eacgm_py_pending_event). Only the first calls of a code object come here. */
static __always_inline void py_emit_pending(__u32 pid, __u32 depth, const struct py_open_call *c)
{
	struct eacgm_py_pending_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		return;
	}
	e->kind = EACGM_REC_PY_PENDING;
	e->depth = depth;
	e->pid = pid;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->ts_ns = c->ts_ns;
	e->key.code = c->code;
	e->key.name_obj = c->name_obj;
	e->key.pid = pid;
	e->key.firstlineno = c->firstlineno;
	bpf_ringbuf_submit(e, 0);
}

/* The eval function's entry: pushes the call when it is to be recorded. Returns whether it did
 * (a call not pushed needs no return probe). */
static __always_inline int py_entry(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32;
	if (!is_traced(pid))
		return PY_NOT_PUSHED;
	__u32 li = bpf_get_attach_cookie(ctx) & (EACGM_PY_MAX_LAYOUTS - 1);
	const struct eacgm_py_layout *l = bpf_map_lookup_elem(&py_layouts, &li);
	if (!l || !l->version)
		return PY_NOT_PUSHED;
	__u64 tstate = PT_REGS_PARM1(ctx);
	__u64 frame = PT_REGS_PARM2(ctx);
	__u64 ip = PT_REGS_IP(ctx); /* the probed address: _PyEval_EvalFrameDefault itself */
	struct eacgm_py_process *p = bpf_map_lookup_elem(&py_procs, &pid);
	if (!p) {
		struct eacgm_py_process fresh = {.runtime = ip + l->runtime_from_eval, .layout = li};
		if (bpf_map_update_elem(&py_procs, &pid, &fresh, BPF_NOEXIST) == 0)
			__sync_fetch_and_add(&py_procs_gen, 1);
		p = bpf_map_lookup_elem(&py_procs, &pid);
		if (!p)
			return PY_NOT_PUSHED;
	}
	if (p->hook == EACGM_PY_HOOK_NONE && l->version >= 311 && l->interp_eval_frame)
		py_request_hook(p, l, pid, tstate, ip);

	struct py_task *t = bpf_task_storage_get(&py_tasks, bpf_get_current_task_btf(), 0,
						 BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return PY_NOT_PUSHED;
	t->tstate = tstate;
	t->evals = 1;
	__u64 code = py_ptr(frame + l->frame_code);
	if (!py_is_code(code, l, p->runtime))
		return PY_NOT_PUSHED;
	struct py_code_ident ident = {};
	py_read_identity(code, l, &ident, PY_SCRATCH_SLOT(1)); /* (a probe's slot) */
	int verdict = py_register_code(code, ident.name_obj, pid, ident.firstlineno, li) &
		      EACGM_PY_VERDICT_MASK;
	if (verdict == EACGM_PY_SKIP)
		return PY_NOT_PUSHED;

	__u64 sp = PT_REGS_SP(ctx);
	__u32 depth = t->depth;
	/* entries at or below this stack pointer are calls that already left */
	for (int i = 0; i < PY_MAX_DEPTH && depth > 0; i++) {
		if (t->calls[py_slot(depth - 1)].sp > sp)
			break;
		depth--;
	}
	if (depth >= PY_MAX_DEPTH) {
		t->depth = depth;
		return PY_NOT_PUSHED;
	}
	struct py_open_call *c = &t->calls[py_slot(depth)];
	c->sp = sp;
	c->ts_ns = bpf_ktime_get_ns();
	c->run_delay = run_delay();
	c->code = code;
	c->name_obj = ident.name_obj;
	c->firstlineno = ident.firstlineno;
	t->depth = depth + 1;
	if (verdict == EACGM_PY_PENDING)
		py_emit_pending(pid, depth, c);
	return PY_PUSHED;
}

/* The eval function's return: pops the call it pushed and sends it. */
static __always_inline int py_return(struct pt_regs *ctx)
{
	struct py_task *t = bpf_task_storage_get(&py_tasks, bpf_get_current_task_btf(), 0, 0);
	if (!t)
		return 0;
	__u64 entry_sp = PT_REGS_SP(ctx) - 8;
	__u32 depth = t->depth;
	/* entries below this frame lost their returns (the kernel's nesting limit): drop them */
	for (int i = 0; i < PY_MAX_DEPTH && depth > 0; i++) {
		if (t->calls[py_slot(depth - 1)].sp >= entry_sp)
			break;
		depth--;
	}
	if (depth == 0) {
		t->depth = 0;
		return 0;
	}
	struct py_open_call *c = &t->calls[py_slot(depth - 1)];
	if (c->sp != entry_sp) {
		t->depth = depth; /* a skipped function returned */
		return 0;
	}
	t->depth = depth - 1;
	struct eacgm_py_call_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RING_DROPS);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	e->kind = EACGM_REC_PY_CALL;
	e->depth = depth - 1;
	e->ts_ns = c->ts_ns;
	e->dur_ns = bpf_ktime_get_ns() - c->ts_ns;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->code = c->code;
	e->name_obj = c->name_obj;
	e->firstlineno = c->firstlineno;
	e->pad = 0;
	e->runq_ns = runq_since(c->run_delay, e->dur_ns);
	bpf_ringbuf_submit(e, wake_flags());
	return 0;
}

SEC("uprobe")
int py_eval_entry(struct pt_regs *ctx)
{
	py_entry(ctx);
	return 0;
}

SEC("uretprobe")
int py_eval_return(struct pt_regs *ctx)
{
	return py_return(ctx);
}

/*
 * Both in one session probe where the kernel has them (Linux 6.10+; attach type
 * BPF_TRACE_UPROBE_SESSION): an entry that pushed nothing (an untraced process, a function the
 * filter leaves out) returns 1, and its return probe never runs: such a call costs about a
 * third less. Loaded only where the kernel has the kfunc (see CallTracer).
 */
extern bool bpf_session_is_return(void) __ksym __weak;

SEC("uprobe")
int py_eval_session(struct pt_regs *ctx)
{
	if (bpf_session_is_return())
		return py_return(ctx);
	return py_entry(ctx) == PY_PUSHED ? 0 : 1;
}

/* The calling thread's PyThreadState: the one its last eval call passed, if it still belongs to
 * this thread, else found in the interpreter's thread list. 3.11+ threads are known by their
 * native (kernel) id; 3.10's by pthread_self(), which on x86_64 glibc is the fs base. */
static __always_inline __u64 py_thread_state(const struct eacgm_py_process *p,
					     const struct eacgm_py_layout *l, __u32 tid,
					     struct task_struct *task, const struct py_task *t,
					     bool *unbound)
{
	__u64 want = l->version == 310 ? BPF_CORE_READ(task, thread.fsbase) : tid;
	if (t && t->tstate && py_ptr(t->tstate + l->tstate_thread_id) == want)
		return t->tstate;
	__u64 interp = py_ptr(p->runtime + l->runtime_interp_main);
	__u64 ts = interp ? py_ptr(interp + l->interp_threads_head) : 0;
	for (int i = 0; i < 64 && ts; i++) {
		__u64 thread_id = py_ptr(ts + l->tstate_thread_id);
		if (l->version != 310)
			thread_id &= 0xffffffff; /* native_thread_id is an unsigned long too, but a tid */
		if (thread_id == want)
			return ts;
		if (!thread_id)
			*unbound = true;
		ts = py_ptr(ts + l->tstate_next);
	}
	return 0;
}

/* The frame field of the thread state the thread's last stack read found (`tstate`), in
 * *frame, when that state is still the thread's: its thread id and frame in one read (two reads
 * cost a walk ~150 ns more in this VM). false when the layout has them too far apart (3.10),
 * when the read fails or the state now belongs to another thread: then py_thread_state. */
static __always_inline bool py_cached_tstate_frame(__u64 tstate, const struct eacgm_py_layout *l,
						   __u32 tid, struct task_struct *task,
						   __u64 *frame, __u32 scratch)
{
	if (!l->tstate_span_len)
		return false;
	__u32 key = scratch & 1;
	struct py_span *span = bpf_map_lookup_elem(&py_span_scratch, &key);
	if (!span)
		return false;
	__u64 lo = l->tstate_span_lo;
	if (!py_read_span(span->b, l->tstate_span_len, tstate + lo))
		return false;
	__u64 want = l->version == 310 ? BPF_CORE_READ(task, thread.fsbase) : tid;
	__u64 id;
	__builtin_memcpy(&id, span->b + PY_SPAN_OFF(l->tstate_thread_id - lo), 8);
	if (id != want)
		return false;
	__builtin_memcpy(frame, span->b + PY_SPAN_OFF(l->tstate_frame - lo), 8);
	return true;
}

/* Where the process's main interpreter keeps the head of its thread-state list (0: not known).
 * CPython 3.10-3.13 push every new thread state at that head, so while it holds the same
 * pointer no thread state was made since it was read. */
static __always_inline __u64 py_thread_list_head_at(__u32 pid)
{
	struct eacgm_py_process *p = bpf_map_lookup_elem(&py_procs, &pid);
	if (!p)
		return 0;
	__u32 li = p->layout;
	const struct eacgm_py_layout *l = bpf_map_lookup_elem(&py_layouts, &li);
	if (!l || !l->version)
		return 0;
	__u64 interp = py_ptr(p->runtime + l->runtime_interp_main);
	return interp ? interp + l->interp_threads_head : 0;
}

/* The fields of a frame a stack walk needs: the caller's frame, the code, the instruction (3.10:
 * f_lasti, an int; else a pointer) and the owner (3.12+), in one read instead of four. */
struct py_frame_fields {
	__u64 back;
	__u64 code;
	__u64 instr;
	__u8 owner;
	__u8 pad[7];
};

/*
 * 3.11+ keeps a thread's frames one after another in its data stack (each caller below its
 * callee), so a stack walk reads them through a window: the bytes from the innermost frame's
 * fields down to the start of their PY_WINDOW-aligned block, in one read, and the frames found
 * inside it need none of their own. On the tiny GPT a walk of ~6 frames made ~6 frame reads
 * and now makes ~1.0 window reads of ~1.1 KiB (bench/README.md, session 71; a 4 KiB window
 * gave no fewer). The window never reaches below that block, which lies in the page of the
 * frame that opened it: that page is mapped and touched, while the page below may lie outside
 * the stack's chunk. A frame below the window opens the next one; a frame elsewhere (a
 * generator's or coroutine's, in its object; 3.12+'s C-stack shims) is read alone, unless it is
 * the walk's first; 3.10's heap frames are read one by one.
 */
#define PY_WINDOW 2048
/* How far below its window a frame that misses it may lie to open the next one (the data
 * stack's next block); farther, it is taken for a frame elsewhere */
#define PY_WINDOW_REACH (64 * 1024)
_Static_assert(PY_WINDOW <= 4096 && (PY_WINDOW & (PY_WINDOW - 1)) == 0,
	       "a window stays inside the page of the frame that opens it");

struct py_window {
	__u64 base;  /* the address of b[0] */
	__u64 len;   /* bytes read; 0: none in this walk yet */
	__u64 owner; /* the thread (pid_tid) whose walk read it: another's may have preempted it */
	__u8 b[PY_WINDOW + PY_SPAN_BUF];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct py_window);
} py_window_scratch SEC(".maps");

/* The frame's span (len bytes at addr) inside the walk's window, read one first if it is not:
 * NULL when it cannot be (then it is read by itself). `fresh`: the walk's first frame. */
static __always_inline __u8 *py_window_span(__u64 addr, __u64 len, __u32 key, bool fresh)
{
	struct py_window *w = bpf_map_lookup_elem(&py_window_scratch, &key);
	if (!w || !len || len > EACGM_PY_READ_SPAN)
		return NULL;
	__u64 owner = bpf_get_current_pid_tgid();
	if (fresh || w->owner != owner)
		w->len = 0;
	__u64 end = addr + len;
	if (!w->len || addr < w->base || end > w->base + w->len) {
		/* a frame above the window or far below it lies elsewhere (3.12+'s C-stack shims,
		 * which --python-calls puts between every two frames; a generator's): read alone,
		 * keeping the window for the data stack's next frames */
		if (w->len && (addr >= w->base || w->base - addr > PY_WINDOW_REACH))
			return NULL;
		__u64 floor = addr & ~(__u64)(PY_WINDOW - 1);
		__u64 base = end - PY_WINDOW;
		if (end < PY_WINDOW || base < floor)
			base = floor;
		__u64 size = end - base; /* at most PY_WINDOW - 1 + len */
		asm volatile("" : "+r"(size));
		w->len = 0;
		w->owner = owner; /* first: a walk that preempts this one takes it over */
		if (size == 0 || size > PY_WINDOW + EACGM_PY_READ_SPAN ||
		    bpf_probe_read_user(w->b, size, (void *)base) != 0)
			return NULL;
		w->base = base;
		w->len = size;
	}
	/* below PY_WINDOW: a frame inside ends where the opener's span ends or lower */
	__u64 off = addr - w->base;
	if (off >= PY_WINDOW)
		return NULL;
	return w->b + (off & (PY_WINDOW - 1));
}

__noinline int py_read_frame(__u64 frame, const struct eacgm_py_layout *l,
			     struct py_frame_fields *out, __u32 scratch, bool fresh)
{
	if (!out || !l)
		return -1;
	__u32 key = scratch & 1;
	__u64 lo = l->frame_span_lo;
	__u8 *buf = l->version == 310 ? NULL
				       : py_window_span(frame + lo, l->frame_span_len, key, fresh);
	if (!buf) {
		struct py_span *span = bpf_map_lookup_elem(&py_span_scratch, &key);
		buf = span ? span->b : NULL;
		if (buf && !py_read_span(buf, l->frame_span_len, frame + lo))
			buf = NULL;
	}
	out->instr = 0;
	out->owner = 0;
	if (!buf) {
		out->back = py_ptr(frame + l->frame_back);
		out->code = py_ptr(frame + l->frame_code);
		bpf_probe_read_user(&out->instr, l->version == 310 ? 4 : 8,
				    (void *)(frame + l->frame_instr));
		if (l->frame_owner)
			bpf_probe_read_user(&out->owner, 1, (void *)(frame + l->frame_owner));
		return 0;
	}
	__builtin_memcpy(&out->back, buf + PY_SPAN_OFF(l->frame_back - lo), 8);
	__builtin_memcpy(&out->code, buf + PY_SPAN_OFF(l->frame_code - lo), 8);
	__builtin_memcpy(&out->instr, buf + PY_SPAN_OFF(l->frame_instr - lo), 8);
	if (l->version == 310)
		out->instr &= 0xffffffff;
	if (l->frame_owner)
		out->owner = buf[PY_SPAN_OFF(l->frame_owner - lo)];
	return 0;
}

/* The state of one stack walk, shared with its bpf_loop callback. */
struct py_walk {
	struct eacgm_py_stack_event *s;
	const struct eacgm_py_layout *l;
	struct py_task *t; /* the memo, or NULL */
	__u64 runtime;
	__u64 frame;
	__u64 gen;
	__u64 now;
	__u32 pid;
	__u32 li;
	__u32 depth;     /* frames wanted (the frames kept so far: s->depth, see py_walk_frame) */
	bool gen_exact;  /* every call passes the eval probe: the memo needs no time bound */
	bool for_call;   /* a call's stack: compared with the thread's last ones (t->walk_same),
			    and kept (in t->last[t->walk_victim]) */
};

/*
 * One frame of the walk (a bpf_loop callback, where an unrolled loop cost the verifier seconds
 * per program and refused more than 14 frames). Returns 1 to stop.
 *
 * The count of frames kept so far is s->depth, in the record's map memory, and what a call's
 * walk compares and overwrites in the thread's storage (walk_same, walk_victim), not fields of
 * struct py_walk on the stack: kernels since 6.7 check a callback again for each iteration
 * until its state at entry repeats, and values on the stack that the verifier follows exactly
 * (the count indexes the frames, the bits decide branches) never repeat: 6.18 went through the
 * callback once per possible frame and combination, ~640,000 instructions and ~1.3 s of CPU for
 * each of the three programs that walk stacks, at every start. Read from a map they are
 * unknowns, the same at each entry.
 */
static long py_walk_frame(__u32 i, void *ctx)
{
	struct py_walk *w = ctx;
	const struct eacgm_py_layout *l = w->l;
	struct eacgm_py_stack_event *s = w->s;
	__u64 frame = w->frame;
	if (!frame || !l || !s)
		return 1;
	__u32 n = s->depth;
	if (n >= w->depth || n >= EACGM_PY_MAX_STACK)
		return 1;
	struct py_frame_fields ff = {};
	if (py_read_frame(frame, l, &ff, PY_SCRATCH_SLOT(w->for_call), i == 0) != 0)
		return 1;
	w->frame = ff.back;
	__u64 code = ff.code;
	/* C-stack shim frames (3.12+) are no Python code */
	if (ff.owner == 3 || !py_is_code(code, l, w->runtime))
		return 0;
	struct eacgm_py_frame *f = &s->frames[n & (EACGM_PY_MAX_STACK - 1)];
	f->code = code;
	struct py_task *t = w->t;
	if (t && w->for_call) {
		__u32 i = n & (EACGM_PY_MAX_STACK - 1);
		__u32 same = t->walk_same;
		for (int k = 0; k < PY_LAST_STACKS; k++) {
			struct py_last_frame *lf = &t->last[k].f[i];
			if ((same & (1u << k)) &&
			    (n >= t->last[k].n || lf->frame != frame || lf->code != code ||
			     lf->instr != ff.instr))
				same &= ~(1u << k);
		}
		t->walk_same = same;
		struct py_last_frame *lf = &t->last[t->walk_victim & (PY_LAST_STACKS - 1)].f[i];
		lf->frame = frame;
		lf->code = code;
		lf->instr = ff.instr;
	}
	struct py_frame_memo *m =
		t ? &t->memo[(code >> 4 ^ code >> 9 ^ code >> 14) & (PY_MEMO_SLOTS - 1)] : NULL;
	if (m && m->code == code && m->gen == w->gen &&
	    (w->gen_exact || w->now - m->ts < PY_MEMO_TTL_NS)) {
		f->name_obj = m->name_obj;
		f->firstlineno = m->firstlineno;
	} else {
		struct py_code_ident ident = {};
		py_read_identity(code, l, &ident, PY_SCRATCH_SLOT(w->for_call));
		f->name_obj = ident.name_obj;
		f->firstlineno = ident.firstlineno;
		int verdict = py_register_code(code, f->name_obj, w->pid, f->firstlineno, w->li);
		/* code made from a string may be freed and another made at its address at any
		 * time (the name's print tells them apart, checked above): never taken as the same */
		if ((verdict & EACGM_PY_VOLATILE) ||
		    (verdict & EACGM_PY_VERDICT_MASK) == EACGM_PY_PENDING) {
			if (t && w->for_call)
				t->walk_same = 0;
		}
		/* remembered once userspace has its name (a PENDING one may have been lost) */
		else if (m) {
			m->code = code;
			m->name_obj = f->name_obj;
			m->firstlineno = f->firstlineno;
			m->gen = w->gen;
			m->ts = w->now;
		}
	}
	if (l->version == 310) {
		__s32 lasti = (__s32)(__u32)ff.instr;
		f->instr = lasti < 0 ? ~0u : (__u32)lasti;
	} else {
		__u64 first = code + l->code_instructions;
		__u64 prev = ff.instr;
		f->instr = prev >= first ? (__u32)((prev - first) / 2) : ~0u;
	}
	s->depth = n + 1;
	return 0;
}

/* py_read_stack's result for a call whose stack is one of the thread's last call stacks: the
 * frame count with this bit, s->call_ts that stack's stamp, nothing in s->frames to send. */
#define PY_STACK_REUSED 0x10000

/* py_read_stack's result for a thread of a Python process that has no thread state (a C++
 * thread: Gloo's, OpenBLAS's): nothing read, after a walk of the interpreter's thread list that
 * found no state still unbound (made by a parent for a thread that has not yet taken it: that
 * may be this one's, so the walk returns 0 instead). */
#define PY_NO_THREAD_STATE (-2)

/* Reads the innermost `depth` Python frames of the calling thread (pid_tid: pid << 32 | tid)
 * into `s` (pid, tid, depth and call_ts filled in, kind EACGM_REC_PY_STACK); returns the frames
 * read, 0 for none, -1 when the process is not a known Python process, PY_NO_THREAD_STATE for a
 * thread without a Python thread state. Names come from CODE records, sent first for code
 * not yet seen. for_call: the stack of a call at its entry, which may be one of the thread's last
 * call stacks again (PY_STACK_REUSED); the thread's storage is made for it (its memo, the cached
 * thread state and the last stacks make the next read cheap). Samples and off-CPU waits pass 0:
 * storage is not made inside the scheduler or a perf interrupt, and their stacks are not kept. */
__noinline int py_read_stack(__u64 pid_tid, __u64 call_ts, __u32 depth,
			     struct eacgm_py_stack_event *s, int for_call)
{
	__u32 pid = pid_tid >> 32, tid = (__u32)pid_tid;
	if (!s)
		return 0;
	struct eacgm_py_process *p = bpf_map_lookup_elem(&py_procs, &pid);
	if (!p)
		return -1;
	__u32 li = p->layout;
	const struct eacgm_py_layout *l = bpf_map_lookup_elem(&py_layouts, &li);
	if (!l || !l->version)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct py_task *t = bpf_task_storage_get(&py_tasks, task, 0,
						 for_call ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	__u64 frame = 0;
	if (!t || !t->tstate || !py_cached_tstate_frame(t->tstate, l, tid, task, &frame,
							 PY_SCRATCH_SLOT(for_call))) {
		bool unbound = false;
		/* a cached state that failed the one-read check is not checked again */
		bool checked = t && t->tstate && l->tstate_span_len;
		__u64 tstate = py_thread_state(p, l, tid, task, checked ? NULL : t, &unbound);
		if (!tstate)
			return unbound ? 0 : PY_NO_THREAD_STATE;
		if (t && for_call)
			t->tstate = tstate;
		frame = py_ptr(tstate + l->tstate_frame);
	}
	if (l->version == 311 || l->version == 312) /* through the cframe; 3.13 has none */
		frame = frame ? py_ptr(frame + l->cframe_current_frame) : 0;
	if (!frame)
		return 0;
	__u64 gen = *(volatile __u64 *)&py_code_gen;
	__u64 now = call_ts; /* every caller stamps its record with the time it reads the stack */
	struct py_walk w = {.s = s,
			    .l = l,
			    .t = t,
			    .runtime = p->runtime,
			    .frame = frame,
			    .gen = gen,
			    .now = now,
			    .pid = pid,
			    .li = li,
			    .depth = depth,
			    /* see struct py_frame_memo */
			    .gen_exact = t && t->evals &&
					 (l->version == 310 || p->hook == EACGM_PY_HOOK_OURS),
			    .for_call = t && for_call};
	if (t && for_call) {
		__u64 oldest = ~0ull;
		__u32 same = 0, victim = 0;
		for (int k = 0; k < PY_LAST_STACKS; k++) {
			struct py_last_stack *ls = &t->last[k];
			if (ls->ts && ls->gen == gen && (w.gen_exact || now - ls->ts < PY_MEMO_TTL_NS))
				same |= 1u << k;
			__u64 used = (same & (1u << k)) ? ls->used : 0; /* empty or stale first */
			if (used < oldest) {
				oldest = used;
				victim = k;
			}
		}
		t->walk_same = same;
		t->walk_victim = victim;
	}
	/* shim frames (3.12+) are skipped without counting: room for some */
	s->depth = 0;
	/* whose walk the record holds: a probe's program can be preempted (a preemptible kernel
	 * runs it with migration, not preemption, off), and another thread's probe on this CPU
	 * then fills the same per-CPU record; its walk writes its own ids, and this one's frames
	 * are given up below instead of sent mixed with the other's */
	s->pid = pid;
	s->tid = tid;
	bpf_loop(EACGM_PY_MAX_STACK + 8, py_walk_frame, &w, 0);
	__u32 n = s->depth;
	struct py_last_stack *victim =
		t && for_call ? &t->last[t->walk_victim & (PY_LAST_STACKS - 1)] : NULL;
	if (n == 0 || n > EACGM_PY_MAX_STACK || s->pid != pid || s->tid != tid) {
		if (victim)
			victim->ts = 0; /* its frames were written over */
		return 0;
	}
	s->kind = EACGM_REC_PY_STACK;
	if (victim) {
		for (int k = 0; k < PY_LAST_STACKS; k++) {
			struct py_last_stack *ls = &t->last[k];
			if (!(t->walk_same & (1u << k)) || n != ls->n || w.frame != ls->end)
				continue;
			if (ls != victim)
				victim->ts = 0; /* its frames were written over */
			ls->used = now;
			count(EACGM_CNT_PY_STACKS_REUSED);
			s->call_ts = ls->ts;
			return n | PY_STACK_REUSED;
		}
		victim->ts = call_ts;
		victim->end = w.frame;
		victim->gen = gen;
		victim->used = now;
		victim->n = n;
	}
	s->call_ts = call_ts;
	return n;
}

/* Sends a stack read by py_read_stack: the frames used, not the whole record (most stacks are a
 * fraction of it). */
static __always_inline void py_output_stack(struct eacgm_py_stack_event *s, __u32 n)
{
	__u64 size = sizeof(*s) - sizeof(s->frames) + n * sizeof(s->frames[0]);
	asm volatile("" : "+r"(size));
	if (size > sizeof(*s))
		return;
	if (bpf_ringbuf_output(&events, s, size, BPF_RB_NO_WAKEUP) != 0)
		count(EACGM_CNT_RING_DROPS);
}

/* Reads the calling thread's stack (py_read_stack) and sends it, unless it is one of the
 * thread's last call stacks again; *ts: the stamp of the STACK record it is (call_ts, or the
 * earlier one's), 0 when none. Returns as py_read_stack does. */
static __always_inline int py_send_stack(__u64 pid_tid, __u64 call_ts, __u32 depth, int for_call,
					 __u64 *ts)
{
	__u32 key = PY_SCRATCH_SLOT(for_call);
	struct eacgm_py_stack_event *s = bpf_map_lookup_elem(&py_stack_scratch, &key);
	*ts = 0;
	if (!s)
		return 0;
	int n = py_read_stack(pid_tid, call_ts, depth, s, for_call);
	if (n == PY_NO_THREAD_STATE)
		n = 0; /* (a call's thread may get one later: looked up again at its next call) */
	if (n > 0 && !(n & PY_STACK_REUSED))
		py_output_stack(s, n);
	if (n > 0)
		*ts = s->call_ts;
	return n;
}

/* The innermost `depth` Python frames of the calling thread, as a STACK record stamped call_ts
 * (sent before the records that refer to it); returns as py_read_stack does. For samples. */
static __always_inline int py_emit_stack(__u32 pid, __u32 tid, __u64 call_ts, __u32 depth)
{
	__u64 ts;
	return py_send_stack((__u64)pid << 32 | tid, call_ts, depth, 0, &ts);
}

/* A call's Python stack, at its entry: the stamp of its STACK record (call_ts, sent now; or one
 * of the thread's last call stacks', when the frames are the same), 0 when there is none, -1
 * when the process is not a known Python process. */
static __always_inline __s64 py_call_stack(__u32 pid, __u32 tid, __u64 call_ts, __u32 depth)
{
	__u64 ts;
	int n = py_send_stack((__u64)pid << 32 | tid, call_ts, depth, 1, &ts);
	return n < 0 ? -1 : (__s64)ts;
}

#endif
