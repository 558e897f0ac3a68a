/* A stand-in libnccl.so.2 for the communicator tests: without a GPU the real NCCL cannot create
 * a communicator, so it cannot show collectives being tied to their rank and size, nor load a
 * profiler plugin. This one hands out communicators and accepts collectives, taking a known
 * time for them, and drives the profiler plugin that NCCL_PROFILER_PLUGIN names as NCCL 2.28
 * does (interface v5; v4 with FAKE_NCCL_PROFILER=4): init per communicator, each operation
 * started and stopped (= enqueued) on the caller's thread, then its channels' kernel events on a
 * proxy thread, with GPU timer values on the wall clock (the GPU's globaltimer), and finalize at
 * ncclCommDestroy. The GPU "runs" every operation on each channel c from its start (as the
 * plugin was told it, read just after) + 300 us +
 * 50 us x c for 1000 us + 50 us x c: an operation of C channels takes 1000 + 100 (C - 1) us.
 * With FAKE_NCCL_BOARD naming a file the ranks share (processes of one job), a collective's
 * kernels instead wait for every rank's to start, as NCCL's do: each channel stops 1000 us +
 * 50 us x c after the last rank's kernel started. A rank's kernels run one after another, as
 * on one stream: one starts no earlier than the previous one ended. fake_nccl_wait_idle()
 * returns once every operation's kernels were reported (a training step's synchronisation). */
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uintptr_t next_comm = 0x5000;

static void take(long ns)
{
	struct timespec t = {0, ns};
	nanosleep(&t, NULL);
}

static uint64_t wall_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ---- the profiler plugin's interface (NCCL's ext-profiler, v4 and v5), as NCCL passes it ---- */
struct coll_descr {
	uint64_t seq;
	const char *func;
	const void *send;
	void *recv;
	size_t count;
	int root;
	const char *datatype;
	uint8_t channels, warps;
	const char *algo, *proto;
	void *parent_group; /* v5 only */
};
struct p2p_descr {
	const char *func;
	void *buff;
	const char *datatype;
	size_t count;
	int peer;
	uint8_t channels;
	void *parent_group;
};
struct kernel_ch_descr {
	uint8_t channel;
	uint64_t timer;
};
union detail {
	struct coll_descr coll;
	struct p2p_descr p2p;
	struct kernel_ch_descr ch;
	unsigned char pad[96];
};
struct descr_v5 {
	uint64_t type;
	void *parent;
	int rank;
	union detail d;
};
struct descr_v4 {
	uint8_t type;
	void *parent;
	int rank;
	union detail d;
};
typedef int (*start_fn)(void *ctx, void **handle, void *descr);
typedef int (*stop_fn)(void *handle);
typedef int (*state_fn)(void *handle, int state, void *args);
typedef int (*finalize_fn)(void *ctx);
struct profiler_v5 {
	const char *name;
	int (*init)(void **ctx, uint64_t hash, int *mask, const char *name, int nodes, int nranks,
		    int rank, void *log);
	start_fn start;
	stop_fn stop;
	state_fn state;
	finalize_fn finalize;
};
struct profiler_v4 {
	const char *name;
	int (*init)(void **ctx, int *mask, const char *name, uint64_t hash, int nodes, int nranks,
		    int rank, void *log);
	start_fn start;
	stop_fn stop;
	state_fn state;
	finalize_fn finalize;
};
enum { COLL = 1 << 1, P2P = 1 << 2, KERNEL_CH = 1 << 6, KERNEL_CH_STOP = 22 };

static int version;
static struct profiler_v5 *v5;
static struct profiler_v4 *v4;

static void load_plugin(void)
{
	static int tried;
	const char *path = getenv("NCCL_PROFILER_PLUGIN");
	if (tried || !path || !*path)
		return;
	tried = 1;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "fake nccl: cannot load the profiler plugin: %s\n", dlerror());
		return;
	}
	const char *want = getenv("FAKE_NCCL_PROFILER");
	if (want && !strcmp(want, "4")) {
		v4 = dlsym(h, "ncclProfiler_v4");
		version = v4 ? 4 : 0;
	} else {
		v5 = dlsym(h, "ncclProfiler_v5");
		version = v5 ? 5 : 0;
	}
}

/* ---- communicators, and the proxy thread that reports the channels' kernels ---- */
struct fake_comm {
	uintptr_t handle;
	void *ctx; /* the plugin's (NULL: no plugin) */
	uint64_t hash, seq;
	int rank, nranks, mask, live;
};
static struct fake_comm comms[16];
static int ncomms;

struct kernel_work {
	void *ctx, *parent; /* parent NULL: not reported (no plugin, or other work) */
	uint64_t enqueued_wall;
	uint64_t busy_ns; /* not NCCL's: other work on the stream for this long */
	int channels;
	long seq; /* collectives: the sequence number; -1: p2p */
	int rank, nranks;
	struct kernel_work *next;
};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct kernel_work *head, **tail = &head;
static int busy;
static pthread_t proxy;

/* The shared board: each rank's kernel start of each collective, by sequence number. */
enum { BOARD_RANKS = 8, BOARD_SEQS = 4096 };
static volatile uint64_t *board;

static void open_board(void)
{
	const char *path = getenv("FAKE_NCCL_BOARD");
	if (board || !path || !*path)
		return;
	int fd = open(path, O_RDWR | O_CREAT, 0600);
	size_t bytes = sizeof(uint64_t) * BOARD_RANKS * BOARD_SEQS;
	if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0)
		return;
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED)
		board = p;
}

/* When the collective's kernels stop: 1000 us after the last rank's started (waiting at most
 * 5 s for it), or after this rank's own without a board. */
static uint64_t last_start(const struct kernel_work *w, uint64_t mine)
{
	if (!board || w->seq < 0 || w->seq >= BOARD_SEQS || w->nranks > BOARD_RANKS)
		return mine;
	board[w->rank * BOARD_SEQS + w->seq] = mine;
	uint64_t latest = mine;
	for (int waited = 0; waited < 50000; ++waited) {
		int all = 1;
		latest = mine;
		for (int r = 0; r < w->nranks; ++r) {
			uint64_t t = board[r * BOARD_SEQS + w->seq];
			if (!t)
				all = 0;
			else if (t > latest)
				latest = t;
		}
		if (all)
			break;
		take(100000);
	}
	return latest;
}

static int start_event(void *ctx, void **handle, uint64_t type, void *parent, union detail *d)
{
	*handle = NULL;
	if (version == 5) {
		struct descr_v5 e = {type, parent, 0, *d};
		return v5->start(ctx, handle, &e);
	}
	struct descr_v4 e = {(uint8_t)type, parent, 0, *d};
	return v4->start(ctx, handle, &e);
}
static stop_fn stop_of(void) { return version == 5 ? v5->stop : v4->stop; }
static state_fn state_of(void) { return version == 5 ? v5->state : v4->state; }

static void *proxy_loop(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (!head)
			pthread_cond_wait(&cv, &mu);
		struct kernel_work *w = head;
		head = w->next;
		if (!head)
			tail = &head;
		busy = 1;
		pthread_mutex_unlock(&mu);
		static uint64_t stream_free; /* when this rank's previous kernels ended */
		uint64_t start = w->enqueued_wall + 300000;
		if (start < stream_free)
			start = stream_free;
		if (w->busy_ns) { /* other kernels on the stream */
			stream_free = start + w->busy_ns;
			free(w);
			pthread_mutex_lock(&mu);
			busy = 0;
			pthread_cond_broadcast(&cv);
			continue;
		}
		take(500000); /* the proxy sees the kernel's channels some time after the call */
		uint64_t latest = last_start(w, start);
		stream_free = latest + 1000000 + 100000ull * (uint64_t)(w->channels - 1);
		for (int c = 0; w->parent && c < w->channels; ++c) {
			union detail d;
			memset(&d, 0, sizeof(d));
			d.ch.channel = (uint8_t)c;
			d.ch.timer = start + 50000ull * c;
			void *ch = NULL;
			start_event(w->ctx, &ch, KERNEL_CH, w->parent, &d);
			uint64_t stop[2] = {latest + 50000ull * c + 1000000 + 50000ull * c, 0};
			state_of()(ch, KERNEL_CH_STOP, stop);
			stop_of()(ch);
		}
		free(w);
		pthread_mutex_lock(&mu);
		busy = 0;
		pthread_cond_broadcast(&cv);
	}
	return NULL;
}

static void add_comm(uintptr_t handle, uint64_t hash, int nranks, int rank)
{
	load_plugin();
	open_board();
	if (ncomms == 16)
		return;
	struct fake_comm *c = &comms[ncomms++];
	memset(c, 0, sizeof(*c));
	c->handle = handle, c->hash = hash, c->rank = rank, c->nranks = nranks, c->live = 1;
	if (!version)
		return;
	int r = version == 5 ? v5->init(&c->ctx, hash, &c->mask, "fake", 1, nranks, rank, NULL)
			     : v4->init(&c->ctx, &c->mask, "fake", hash, 1, nranks, rank, NULL);
	if (r != 0)
		c->ctx = NULL, c->mask = 0;
}

static struct fake_comm *comm_of(ncclComm_t comm)
{
	for (int i = 0; i < ncomms; ++i)
		if (comms[i].handle == (uintptr_t)comm && comms[i].live)
			return &comms[i];
	return NULL;
}

/* An operation through the plugin: started, then NCCL's own time (2 ms), stopped (enqueued),
 * then its channels reported by the proxy thread. The GPU's side is the same without a plugin
 * (a collective's kernels still wait for every rank's, through the board): a profiler does not
 * change when the job's ranks meet. */
static void enqueue(struct kernel_work *w);

static void run_operation(ncclComm_t comm, uint64_t type, union detail *d, int channels,
			  long seq)
{
	struct fake_comm *c = comm_of(comm);
	int profiled = c && c->ctx && (c->mask & type);
	void *op = NULL;
	if (profiled)
		start_event(c->ctx, &op, type, NULL, d);
	uint64_t enqueued = wall_ns(); /* after the plugin stamped the start */
	take(2000000);
	if (profiled)
		stop_of()(op);
	int reported = profiled && op && (c->mask & KERNEL_CH);
	if (!reported && (!c || !board || seq < 0))
		return; /* nothing to report, no rank to meet */
	struct kernel_work *w = calloc(1, sizeof(*w));
	w->ctx = c->ctx, w->parent = reported ? op : NULL, w->enqueued_wall = enqueued;
	w->channels = channels;
	w->seq = seq, w->rank = c->rank, w->nranks = c->nranks;
	enqueue(w);
}

static void collective(ncclComm_t comm, const char *func, size_t count, const char *datatype,
		       int root)
{
	struct fake_comm *c = comm_of(comm);
	union detail d;
	memset(&d, 0, sizeof(d));
	d.coll.seq = c ? c->seq++ : 0;
	d.coll.func = func, d.coll.count = count, d.coll.root = root, d.coll.datatype = datatype;
	d.coll.channels = 2, d.coll.warps = 16, d.coll.algo = "RING", d.coll.proto = "SIMPLE";
	run_operation(comm, COLL, &d, 2, c ? (long)d.coll.seq : -1);
}

static const char *type_name(ncclDataType_t t)
{
	return t == ncclFloat32 ? "ncclFloat32" : t == ncclInt8 ? "ncclInt8" : "ncclFloat16";
}

/* a split id the same on every rank, as the real one is not needed here */
static uint64_t hash_of(ncclUniqueId id)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (int i = 0; i < 24; ++i)
		h = (h ^ (uint8_t)id.internal[i]) * 0x100000001b3ull;
	return h;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	*comm = (ncclComm_t)next_comm;
	next_comm += 0x100;
	add_comm((uintptr_t)*comm, hash_of(id), nranks, rank);
	return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
			   ncclConfig_t *config)
{
	(void)config;
	*newcomm = (ncclComm_t)next_comm;
	next_comm += 0x100;
	struct fake_comm *parent = comm_of(comm);
	if (parent)
		add_comm((uintptr_t)*newcomm, parent->hash * 31 + (uint64_t)color, 2, key % 2);
	return ncclSuccess;
}

static void enqueue(struct kernel_work *w)
{
	static int started;
	pthread_mutex_lock(&mu);
	if (!started++)
		pthread_create(&proxy, NULL, proxy_loop, NULL);
	*tail = w, tail = &w->next;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* Other work the GPU runs on this rank's stream before what comes next (a slow kernel): the host
 * is not held up, the stream is. */
void fake_nccl_gpu_busy(uint64_t ns)
{
	struct kernel_work *w = calloc(1, sizeof(*w));
	w->enqueued_wall = wall_ns(), w->busy_ns = ns;
	enqueue(w);
}

void fake_nccl_wait_idle(void)
{
	pthread_mutex_lock(&mu);
	while (head || busy)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	struct fake_comm *c = comm_of(comm);
	if (!c)
		return ncclSuccess;
	fake_nccl_wait_idle(); /* the proxy's work for it done first */
	if (c->ctx)
		(version == 5 ? v5->finalize : v4->finalize)(c->ctx);
	c->ctx = NULL, c->live = 0;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
			   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
			   cudaStream_t stream)
{
	(void)sendbuff, (void)recvbuff, (void)op, (void)stream;
	collective(comm, "AllReduce", count, type_name(datatype), -1);
	return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
			   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	(void)sendbuff, (void)recvbuff, (void)stream;
	collective(comm, "AllGather", sendcount, type_name(datatype), -1);
	return ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
		      ncclComm_t comm, cudaStream_t stream)
{
	(void)sendbuff, (void)stream;
	union detail d;
	memset(&d, 0, sizeof(d));
	d.p2p.func = "Send", d.p2p.count = count, d.p2p.datatype = type_name(datatype);
	d.p2p.peer = peer, d.p2p.channels = 1;
	run_operation(comm, P2P, &d, 1, -1);
	return ncclSuccess;
}
