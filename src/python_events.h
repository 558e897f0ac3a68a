/* The python layer's part of the BPF/userspace contract (included by events.h): CPython layout
 * offsets userspace gives the BPF side, and the records it sends back. Plain C, fixed widths. */
#ifndef EACGM_PYTHON_EVENTS_H
#define EACGM_PYTHON_EVENTS_H

/* Record kinds, numbered apart from the other layers' (events.h) so both can grow. */
enum eacgm_py_record_kind {
	EACGM_REC_PY_CALL = 16,  /* a traced Python function returned */
	EACGM_REC_PY_CODE = 17,  /* first sight of a code object in a process: names, for a verdict */
	EACGM_REC_PY_STACK = 18, /* the Python frames of the call record of this thread that follows */
	EACGM_REC_PY_HOOK = 19,  /* 3.11+: a process's first eval call; userspace sets its eval hook */
	EACGM_REC_PY_PENDING = 20, /* a call pushed while its code's verdict was pending */
};

#define EACGM_PY_MAX_LAYOUTS 64     /* probed CPython files (the eval probe's cookie indexes them) */
#define EACGM_PY_MAX_STACK 32       /* frames a stack record can hold (a power of two) */
#define EACGM_PY_NAME_BYTES 128
#define EACGM_PY_FILE_BYTES 256
#define EACGM_PY_LINETABLE_BYTES 512

/* Where things are in one CPython build, in bytes (see src/python/layouts.cpp). */
#define EACGM_PY_READ_SPAN 128

struct eacgm_py_layout {
	__u32 version;              /* 310, 311, 312, 313 */
	__u32 runtime_interp_main;  /* _PyRuntime.interpreters.main */
	__u32 interp_threads_head;  /* first PyThreadState of the interpreter */
	__u32 interp_eval_frame;    /* PEP 523 eval-frame hook; 0: unknown in this build, no hook */
	__u32 tstate_next;
	__u32 tstate_interp;
	__u32 tstate_thread_id;     /* 3.11+: native_thread_id (the tid); 3.10: thread_id (pthread_t) */
	__u32 tstate_frame;         /* 3.10: frame; 3.11, 3.12: cframe; 3.13: current_frame */
	__u32 cframe_current_frame; /* 3.11, 3.12 */
	__u32 frame_back;           /* f_back / previous */
	__u32 frame_code;           /* f_code; 3.13: f_executable (a code object or None) */
	__u32 frame_instr;          /* 3.10: f_lasti (int, code units); 3.11, 3.12: prev_instr,
	                             * 3.13: instr_ptr (pointers to the instruction executing) */
	__u32 frame_owner;          /* 3.12+: owner byte (3: a C-stack shim frame); 0: no owner */
	__u32 code_name;            /* co_qualname (3.11+), co_name (3.10) */
	__u32 code_filename;
	__u32 code_firstlineno;
	__u32 code_linetable;
	__u32 code_instructions;    /* 3.11+: co_code_adaptive, where the frame's instructions start */
	__u32 bytes_size;           /* PyBytesObject: ob_size, ob_sval */
	__u32 bytes_data;
	__u32 unicode_state;        /* PyASCIIObject: state bits, length; data of compact strings */
	__u32 unicode_length;
	__u32 unicode_ascii_data;
	__u32 unicode_compact_data;
	__u32 object_type;          /* PyObject.ob_type */
	/* Where the frame fields above (back, code, instr, owner), the code object's name and
	 * first line, and the thread state's thread id and frame lie: each read in one go when the
	 * span is at most EACGM_PY_READ_SPAN bytes (len 0: field by field). Set by
	 * set_read_spans(). */
	__u32 frame_span_lo;
	__u32 frame_span_len;
	__u32 code_span_lo;
	__u32 code_span_len;
	/* The thread state's thread id and frame pointer: the cached state checked and its frame
	 * read in one go (each read costs ~150 ns in this VM, a stack walk six to ten of them) */
	__u32 tstate_span_lo;
	__u32 tstate_span_len;
	__u32 pad;
	__s64 runtime_from_eval;    /* in the file: &_PyRuntime - &_PyEval_EvalFrameDefault */
	__s64 code_type_from_runtime; /* &PyCode_Type - &_PyRuntime; 0: frames hold only code */
};

/* What the BPF side knows of a traced CPython process (py_procs map, keyed by tgid). */
struct eacgm_py_process {
	__u64 runtime;    /* address of _PyRuntime */
	__u64 hook_addr;  /* &interp->eval_frame of the main interpreter (3.11+) */
	__u64 hook_value; /* what goes there: the address of _PyEval_EvalFrameDefault */
	__u32 layout;     /* index in py_layouts */
	__u32 hook;       /* enum eacgm_py_hook */
};

enum eacgm_py_hook {
	EACGM_PY_HOOK_NONE = 0,    /* not tried yet (or 3.10, which needs none) */
	EACGM_PY_HOOK_OURS = 1,    /* eacgm wrote it */
	EACGM_PY_HOOK_THEIRS = 2,  /* the process had its own PEP 523 hook: calls go through it */
	EACGM_PY_HOOK_FAILED = 3,  /* the write failed: inlined 3.11+ calls are not seen */
	EACGM_PY_HOOK_REQUESTED = 4, /* asked userspace to write it (HOOK record) */
};

/* Asks userspace to write hook_value at hook_addr in the process, if that slot is still NULL
 * (see bpf/python.bpf.h: BPF may not write user memory on every kernel). */
struct eacgm_py_hook_event {
	__u32 kind; /* EACGM_REC_PY_HOOK */
	__u32 pid;
	__u64 hook_addr;
	__u64 hook_value;
};

/* A code object in a process. The name object and first line guard against a freed code
 * object's address being reused by another one. */
struct eacgm_py_code_key {
	__u64 code;
	__u64 name_obj;
	__u32 pid;
	__u32 firstlineno;
};

/* Userspace's answer for a code object (values of the py_codes map). */
enum eacgm_py_verdict {
	EACGM_PY_PENDING = 1, /* its CODE record is on its way: calls are sent, userspace filters */
	EACGM_PY_TRACE = 2,
	EACGM_PY_SKIP = 3,    /* costs only the probe hit from now on */
};
#define EACGM_PY_VERDICT_MASK 0xffu
/*
 * Code that exec(), eval() or compile() made from a string ("<string>", "<lambda>"...) is often
 * made, run and freed in a loop, and CPython then reuses the freed code object's and name
 * string's memory for the next: same address, same name object address, same first line, so
 * the same key for another function. For such code userspace adds this flag and, in bits 16-31,
 * a print of the name's characters (eacgm_py_name_print); the BPF side checks the name against
 * it at each call and names the code again when it differs.
 */
#define EACGM_PY_VOLATILE 0x100u
#define EACGM_PY_NAME_PRINT_BYTES 32
#define EACGM_PY_NAME_PRINT_SEED 2166136261u

/* FNV-1a over the name's first EACGM_PY_NAME_PRINT_BYTES characters (ASCII), folded to 16 bits:
 * the same function in BPF and in userspace. */
static inline __u32 eacgm_py_name_print_step(__u32 h, __u8 c)
{
	return (h ^ c) * 16777619u;
}
static inline __u32 eacgm_py_name_print_fold(__u32 h)
{
	return (h >> 16 ^ h) & 0xffffu;
}

struct eacgm_py_call_event {
	__u32 kind;  /* EACGM_REC_PY_CALL */
	__u32 depth; /* pushed calls of this thread it is nested in (userspace takes out skipped) */
	__u64 ts_ns;
	__u64 dur_ns;
	__u32 pid;
	__u32 tid;
	__u64 code;
	__u64 name_obj;
	__u32 firstlineno; /* with code and name_obj: the code object's key (eacgm_py_code_key) */
	__u32 pad;
	__u64 runq_ns; /* the thread's wait for a CPU during the call, as eacgm_call_event's */
};

/* A call of a code object whose verdict was still pending (EACGM_PY_PENDING) entered: it is
 * counted in the depth of the calls inside it, which userspace corrects where the verdict turns
 * out to be skip (the call's own record is then dropped: python_calls' depth counts recorded
 * calls only). Sent at entry, so before the records of the calls inside it. */
struct eacgm_py_pending_event {
	__u32 kind;  /* EACGM_REC_PY_PENDING */
	__u32 depth; /* the call's own depth, as its call record will say */
	__u32 pid;
	__u32 tid;
	__u64 ts_ns; /* the call's entry, as its call record will say */
	struct eacgm_py_code_key key;
};

struct eacgm_py_code_event {
	__u32 kind; /* EACGM_REC_PY_CODE */
	__u32 version;
	struct eacgm_py_code_key key;
	__u8 name_kind; /* 0: ASCII; 1, 2, 4: bytes per character of a compact string */
	__u8 file_kind;
	__u16 name_bytes; /* bytes copied into name, file, linetable */
	__u16 file_bytes;
	__u16 linetable_bytes;
	char name[EACGM_PY_NAME_BYTES];
	char file[EACGM_PY_FILE_BYTES];
	__u8 linetable[EACGM_PY_LINETABLE_BYTES];
};

struct eacgm_py_frame {
	__u64 code;
	__u64 name_obj;
	__u32 firstlineno;
	__u32 instr; /* the current instruction, in code units from the start; ~0: unknown */
};

struct eacgm_py_stack_event {
	__u32 kind; /* EACGM_REC_PY_STACK */
	__u32 pid;
	__u32 tid;
	__u32 depth;   /* frames used, innermost first */
	__u64 call_ts; /* ts_ns of the call record it belongs to */
	struct eacgm_py_frame frames[EACGM_PY_MAX_STACK]; /* only `depth` of them are sent */
};

#endif
