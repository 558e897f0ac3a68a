// GPU-side time (the gputime layer): the bytes eacgm's CUDA injection library hands to
// eacgm_gputime_batch() and eacgm's uprobe on that function copies into the ring buffer. One
// contract between the library (src/gputime/, built into libeacgm_cupti.so and loaded by CUDA
// into the traced process) and the decoder (pipeline/decoder_gputime.cpp).
//
// Why a uprobe on a function of our own (a USDT probe in all but name) and not a socket or a
// shared-memory ring: the library needs nothing from eacgm to run (no path, no handshake, no
// eacgm at all: the call is a no-op then), the records reach eacgm through the ring buffer
// every other layer uses (ordered with them, counted in the same drops), and a process eacgm
// did not launch (-p, the agent) is covered the moment it maps the library, as with libcudart.
//
// A batch is entries back to back from its first byte, each starting with a GpuEntryHeader and
// 8-byte aligned; the library's buffer is always kGpuBatchBytes long (the probe copies that
// much), of which the first `bytes` (eacgm_gputime_batch's second argument) are used.
#pragma once
#include <cstdint>

namespace eacgm::gputime {

inline constexpr uint32_t kGpuBatchBytes = 16384;  // = EACGM_GPU_BATCH_BYTES (src/events.h)

enum class EntryKind : uint16_t {
  kernel = 1,   // GpuExecution
  memcpy = 2,   // GpuExecution
  memset = 3,   // GpuExecution
  launch = 4,   // GpuLaunch: the runtime's record of a kernel launch (its correlation id)
  name = 5,     // GpuText: a kernel name's id, before the first execution that uses it
  note = 6,     // GpuText: what the library says about itself (CUPTI found, an error)
  dropped = 7,  // GpuDropped: records CUPTI dropped (its buffers full)
  collective = 8,  // GpuCollective: an NCCL collective or point-to-point operation (the library
                   // as NCCL's profiler plugin, nccl_profiler.cpp)
  slice = 9,       // GpuSlice: a span in which CUPTI's records were on (duty-cycled, duty.h)
};

struct EntryHeader {
  uint16_t kind;   // EntryKind
  uint16_t bytes;  // the whole entry, header included; a multiple of 8
};

// A kernel, copy or memset as it ran on the GPU. Times are CLOCK_MONOTONIC ns (CUPTI's
// timestamp callback), the clock of eacgm's BPF timestamps.
struct GpuExecution {
  EntryHeader h;
  uint32_t correlation;  // the launching API call's (GpuLaunch::correlation)
  uint64_t start_ns;
  uint64_t end_ns;
  uint32_t device;
  uint32_t context;
  uint32_t stream;
  uint32_t name_id;  // kernels: a GpuText name's id; 0 otherwise
  uint64_t bytes;    // copies and memsets
  int32_t grid[3];
  int32_t block[3];
  uint32_t shared_bytes;  // static + dynamic shared memory per block
  uint16_t registers;     // per thread
  uint8_t copy_kind;      // copies: CUpti_ActivityMemcpyKind (1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP)
  uint8_t reserved;
};
static_assert(sizeof(GpuExecution) == 80, "entry layout");

struct GpuLaunch {
  EntryHeader h;
  uint32_t correlation;
  uint64_t start_ns;  // the API call, on the launching thread
  uint64_t end_ns;
  uint32_t tid;   // the launching thread (the kernel's id for it)
  uint32_t cbid;  // CUPTI's runtime callback id (cudaLaunchKernel 211, ...)
};
static_assert(sizeof(GpuLaunch) == 32, "entry layout");

// A name or note: this header, then NUL-terminated text, the entry padded to a multiple of 8.
struct GpuText {
  EntryHeader h;
  uint32_t id;
};
static_assert(sizeof(GpuText) == 8, "entry layout");
inline constexpr uint32_t kMaxTextBytes = 2048;  // names longer are cut

struct GpuDropped {
  EntryHeader h;
  uint32_t reserved;
  uint64_t records;
};

// Duty-cycled GPU time (EACGM_GPUTIME_DUTY, duty.h): CUPTI's records were on from start_ns to
// end_ns (CLOCK_MONOTONIC). Sent after each slice's records (and at exit); a library that keeps
// them on all the time sends none, so a process without slices had them on throughout.
struct GpuSlice {
  EntryHeader h;
  uint32_t reserved;
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t next_ns;  // when the next slice is due (nothing is collected until then); 0: none
};
static_assert(sizeof(GpuSlice) == 32, "entry layout");

// An NCCL operation as NCCL's profiler plugin saw it: enqueued by a thread of the process, run
// by its kernel on every channel, seen complete by NCCL's proxy thread. Host times are
// CLOCK_MONOTONIC ns; GPU times are the GPU's globaltimer (which NCCL reads on the device, and
// which the driver keeps on the host's wall clock) moved onto CLOCK_MONOTONIC by the library
// with the wall-to-monotonic offset of the moment the channel stopped; 0 where no channel said.
struct GpuCollective {
  EntryHeader h;
  uint32_t tid;        // the enqueuing thread
  uint64_t comm_hash;  // NCCL's communicator hash, the same on every rank
  uint64_t seq;        // collectives: NCCL's sequence number in the communicator; p2p: ~0
  uint64_t enqueue_ns;   // NCCL started the operation (inside the API call or its group end)
  uint64_t enqueued_ns;  // NCCL had enqueued it
  uint64_t start_ns;     // the GPU: the first channel's kernel started on it
  uint64_t end_ns;       // the last channel's kernel stopped
  uint64_t completed_ns;  // the proxy thread saw the last channel stop (host)
  uint64_t count;         // elements, as NCCL describes the operation
  int32_t rank, nranks;
  int32_t root_or_peer;  // collectives: the root (-1 none); p2p: the peer
  uint8_t channels;       // channels NCCL planned for it
  uint8_t channels_seen;  // channels whose kernel said it stopped
  uint8_t warps;
  uint8_t flags;  // kCollectiveP2p, kCollectiveGpuClock
  // NCCL's strings, NUL-terminated (cut to fit), in the entry itself: a probe attached after a
  // process's first batch (the agent) would have missed name entries sent once
  char func[24];      // "AllReduce", "Send", ...
  char datatype[16];  // "ncclFloat32", ...
  char algo[16];      // "RING", "TREE", ...; "" for p2p
  char proto[16];     // "LL", "LL128", "SIMPLE"; "" for p2p
  uint32_t ns_pid;    // the process's pid in its own pid namespace (a container's): tid is too
  uint32_t reserved;
};
static_assert(sizeof(GpuCollective) == 168, "entry layout");
inline constexpr uint8_t kCollectiveP2p = 1;       // a send or recv
inline constexpr uint8_t kCollectiveGpuClock = 2;  // start/end from the GPU's timer (else none)

inline constexpr uint16_t entry_bytes(uint32_t payload) { return uint16_t((payload + 7u) & ~7u); }

}  // namespace eacgm::gputime
