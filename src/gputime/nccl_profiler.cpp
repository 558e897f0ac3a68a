// libeacgm_cupti.so as NCCL's profiler plugin (NCCL_PROFILER_PLUGIN names the library's path):
// for each collective and point-to-point operation, when the GPU ran it on each channel (NCCL's
// kernel reads the GPU's globaltimer at a channel's start and stop and its proxy thread reports
// both), when NCCL enqueued it and on which thread, and what it was (communicator hash, rank,
// sequence number, algorithm, protocol, channels, count). One GpuCollective per operation goes
// into the batches that eacgm's uprobe on eacgm_gputime_batch reads (activity_batch.h), beside
// CUPTI's records when CUDA loaded the same file as its injection library.
//
// Interfaces v5 (NCCL 2.28) and v4 (NCCL 2.26-2.27), nccl_profiler_abi.h. NCCL's events of an
// operation come on two threads: the operation's start and stop (= enqueued) on the caller's,
// its channels' on the proxy thread, possibly after the operation's stop; so an operation lives
// until its own stop and its last channel's, whichever is later (a reference count), and is
// written then. libc only, as the rest of the library.
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "gputime/activity_batch.h"
#include "gputime/library.h"
#include "gputime/nccl_profiler_abi.h"

namespace {

using namespace eacgm::nccl_abi;
using eacgm::gputime::GpuCollective;

uint64_t ns_of(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// The GPU's globaltimer follows the host's wall clock; eacgm's clock is CLOCK_MONOTONIC. The
// wall clock's offset from it, read between two monotonic reads (the tightest of three pairs:
// a thread preempted between two reads would move the offset by as long), is taken once per
// operation, so that its GPU time is the timer's own difference.
int64_t wall_minus_monotonic() {
  int64_t best = 0;
  uint64_t tightest = UINT64_MAX;
  for (int i = 0; i < 3; ++i) {
    uint64_t before = ns_of(CLOCK_MONOTONIC), wall = ns_of(CLOCK_REALTIME);
    uint64_t after = ns_of(CLOCK_MONOTONIC);
    if (after - before < tightest) {
      tightest = after - before;
      best = int64_t(wall - (before + (after - before) / 2));
    }
  }
  return best;
}

struct Operation;

struct Communicator {
  uint64_t hash;
  int rank, nranks;
  Operation* live;  // its operations not written yet (written at finalize if they never end)
};

// The plugin's handles start with their kind: NCCL hands back only the handle.
enum class Handle : uint32_t { operation = 0x6f705f65, channel = 0x63685f65, spare = 0x73705f65 };

struct Operation {
  Handle kind;
  int refs;  // its own stop, its channels' completion (while it has channels), each channel
  Communicator* comm;
  Operation *prev, *next;  // in comm->live; `next` also chains the spares
  uint64_t gpu_first, gpu_last;  // globaltimer: the channels' earliest start, latest stop
  GpuCollective record;
  const char *func, *datatype, *algo, *proto;
};

struct Channel {
  Handle kind;
  Operation* op;
  uint64_t gpu_start, gpu_stop;  // globaltimer
};

// One lock for every operation's state: an operation has a handful of events, the lock is held
// for a few field updates, and NCCL calls the plugin from at most two threads per communicator.
pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;

struct Locked {
  Locked() { pthread_mutex_lock(&state_lock); }
  ~Locked() { pthread_mutex_unlock(&state_lock); }
};

// Operations are never given back to malloc: NCCL may still name a written one as a channel's
// parent (a CUDA graph's replays reuse the operation it captured), and must then find a spare,
// not freed memory. Spares are reused oldest first, only once kSpareDelay of them wait, so that
// such a late channel almost always meets a spare (and is left out) rather than a new operation.
constexpr size_t kSpareDelay = 1024;
Operation *spares_head = nullptr, *spares_tail = nullptr;
size_t spare_count = 0, outstanding = 0;

Operation* take_operation() {  // state_lock held
  if (spare_count > kSpareDelay) {
    Operation* op = spares_head;
    spares_head = op->next;
    if (!spares_head) spares_tail = nullptr;
    --spare_count;
    *op = Operation{};
    return op;
  }
  return static_cast<Operation*>(calloc(1, sizeof(Operation)));
}

void write_and_spare(Operation* op) {  // state_lock held
  if (op->gpu_first && op->gpu_last >= op->gpu_first) {
    int64_t offset = wall_minus_monotonic();
    op->record.start_ns = uint64_t(int64_t(op->gpu_first) - offset);
    op->record.end_ns = uint64_t(int64_t(op->gpu_last) - offset);
    op->record.flags |= eacgm::gputime::kCollectiveGpuClock;
  }
  eacgm::gputime::library_batcher.add(op->record, op->func, op->datatype, op->algo, op->proto,
                                      ns_of(CLOCK_MONOTONIC));
  (op->prev ? op->prev->next : op->comm->live) = op->next;
  if (op->next) op->next->prev = op->prev;
  op->kind = Handle::spare;
  op->next = nullptr;
  (spares_tail ? spares_tail->next : spares_head) = op;
  spares_tail = op;
  ++spare_count;
  // nothing in flight (a synchronous step's end): hand the rows over now, not at the next
  // operation, which may come minutes later (one uprobe trap per step on NCCL's proxy thread)
  if (--outstanding == 0) eacgm::gputime::library_batcher.flush();
}

// Drops a reference (state_lock held); the last one writes the operation.
void release(Operation* op) {
  if (--op->refs == 0) write_and_spare(op);
}

Operation* new_operation(Communicator* comm) {
  Locked lock;
  Operation* op = take_operation();
  if (!op) return nullptr;
  op->kind = Handle::operation;
  op->refs = 1;
  op->comm = comm;
  op->next = comm->live;
  if (comm->live) comm->live->prev = op;
  comm->live = op;
  ++outstanding;
  op->record.tid = uint32_t(syscall(SYS_gettid));  // gettid() is glibc 2.30+
  op->record.ns_pid = uint32_t(getpid());
  op->record.comm_hash = comm->hash;
  op->record.rank = comm->rank;
  op->record.nranks = comm->nranks;
  op->record.enqueue_ns = ns_of(CLOCK_MONOTONIC);
  return op;
}

// The operation's description, before NCCL has its handle (no other thread can see it yet).
Operation* start_collective(Communicator* comm, const CollDescr& d) {
  Operation* op = new_operation(comm);
  if (!op) return nullptr;
  op->record.seq = d.seq;
  op->record.count = d.count;
  op->record.root_or_peer = d.root;
  op->record.channels = d.channels;
  op->record.warps = d.warps;
  op->func = d.func, op->datatype = d.datatype, op->algo = d.algo, op->proto = d.proto;
  if (d.channels) ++op->refs;  // released when the last channel stopped
  return op;
}

Operation* start_p2p(Communicator* comm, const P2pDescr& d) {
  Operation* op = new_operation(comm);
  if (!op) return nullptr;
  op->record.seq = ~0ull;
  op->record.count = d.count;
  op->record.root_or_peer = d.peer;
  op->record.channels = d.channels;
  op->record.flags = eacgm::gputime::kCollectiveP2p;
  op->func = d.func, op->datatype = d.datatype;
  if (d.channels) ++op->refs;
  return op;
}

Channel* start_channel(void* parent, const KernelChDescr& d) {
  auto* op = static_cast<Operation*>(parent);
  if (!op) return nullptr;
  Locked lock;
  // a parent eacgm did not make, or one already written (a CUDA graph's replay): left out
  if (op->kind != Handle::operation) return nullptr;
  auto* ch = static_cast<Channel*>(calloc(1, sizeof(Channel)));
  if (!ch) return nullptr;
  ch->kind = Handle::channel;
  ch->op = op;
  ch->gpu_start = d.gpu_timer;
  ++op->refs;
  return ch;
}

void stop_channel(Channel* ch) {
  uint64_t now = ns_of(CLOCK_MONOTONIC);
  Locked lock;
  Operation* op = ch->op;
  ch->kind = Handle::spare;
  if (op->kind != Handle::operation) {  // written at its communicator's finalize
    free(ch);
    return;
  }
  GpuCollective& r = op->record;
  if (ch->gpu_start && ch->gpu_stop >= ch->gpu_start) {
    if (!op->gpu_first || ch->gpu_start < op->gpu_first) op->gpu_first = ch->gpu_start;
    if (ch->gpu_stop > op->gpu_last) op->gpu_last = ch->gpu_stop;
  }
  r.completed_ns = now;
  if (r.channels_seen < 255) ++r.channels_seen;
  if (r.channels && r.channels_seen == r.channels) release(op);  // every channel is done
  release(op);                                                   // this channel's
  free(ch);
}

Result start_event(Communicator* comm, void** handle, uint64_t type, void* parent,
                   const EventDetail& d) {
  *handle = nullptr;
  if (type == kColl && comm) {
    *handle = start_collective(comm, d.coll);
  } else if (type == kP2p && comm) {
    *handle = start_p2p(comm, d.p2p);
  } else if (type == kKernelCh) {
    *handle = start_channel(parent, d.kernel_channel);
  }
  return kSuccess;
}

Result start_event_v5(void* context, void** handle, void* descr) {
  auto* d = static_cast<EventDescrV5*>(descr);
  return start_event(static_cast<Communicator*>(context), handle, d->type, d->parent, d->detail);
}

Result start_event_v4(void* context, void** handle, void* descr) {
  auto* d = static_cast<EventDescrV4*>(descr);
  return start_event(static_cast<Communicator*>(context), handle, d->type, d->parent, d->detail);
}

Result stop_event(void* handle) {
  if (!handle) return kSuccess;
  Handle kind = *static_cast<Handle*>(handle);
  if (kind == Handle::operation) {
    auto* op = static_cast<Operation*>(handle);
    Locked lock;
    op->record.enqueued_ns = ns_of(CLOCK_MONOTONIC);
    release(op);
  } else if (kind == Handle::channel) {
    stop_channel(static_cast<Channel*>(handle));
  }
  return kSuccess;
}

Result record_event_state(void* handle, int state, EventStateArgs* args) {
  if (!handle || !args || state != kKernelChStop) return kSuccess;
  if (*static_cast<Handle*>(handle) != Handle::channel) return kSuccess;
  static_cast<Channel*>(handle)->gpu_stop = args->kernel_channel.gpu_timer;
  return kSuccess;
}

void flush_at_exit() { eacgm::gputime::library_batcher.flush(); }

Result init(void** context, int* mask, uint64_t comm_hash, int nranks, int rank, int version) {
  auto* comm = static_cast<Communicator*>(calloc(1, sizeof(Communicator)));
  if (!comm) return kInternalError;
  comm->hash = comm_hash, comm->rank = rank, comm->nranks = nranks;
  *context = comm;
  *mask = int(kColl | kP2p | kKernelCh);
  static bool said = false;  // one note per process, at its first communicator
  Locked lock;
  if (!said) {
    said = true;
    char text[160];
    snprintf(text, sizeof(text), "NCCL profiler plugin v%d (first communicator: rank %d of %d)",
             version, rank, nranks);
    eacgm::gputime::library_batcher.note(text);
    atexit(flush_at_exit);  // tied to this library: run at its unload too
  }
  return kSuccess;
}

Result init_v5(void** context, uint64_t comm_hash, int* mask, const char*, int, int nranks,
               int rank, void*) {
  return init(context, mask, comm_hash, nranks, rank, 5);
}

Result init_v4(void** context, int* mask, const char*, uint64_t comm_hash, int, int nranks,
               int rank, void*) {
  return init(context, mask, comm_hash, nranks, rank, 4);
}

// The communicator's operations still waiting for channels NCCL will not report now (an abort,
// a destroy before they ran) are written as they are: their rows say how many channels came.
Result finalize(void* context) {
  auto* comm = static_cast<Communicator*>(context);
  {
    Locked lock;
    while (comm && comm->live) write_and_spare(comm->live);
  }
  free(comm);
  eacgm::gputime::library_batcher.flush();
  return kSuccess;
}

}  // namespace

extern "C" {
__attribute__((visibility("default"))) ProfilerV5 ncclProfiler_v5 = {
    "eacgm", init_v5, start_event_v5, stop_event, record_event_state, finalize};
__attribute__((visibility("default"))) ProfilerV4 ncclProfiler_v4 = {
    "eacgm", init_v4, start_event_v4, stop_event, record_event_state, finalize};
}
