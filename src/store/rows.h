// Rows of a recording, as the decoder produces them and the writer stores them.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace eacgm {

// One traced CUDA API call. Durations are host-side: for async calls, the enqueue time.
// String views point to storage that outlives the recording (op table, interned names).
struct CudaCallRow {
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC at entry
  uint64_t dur_ns = 0;
  uint32_t pid = 0, tid = 0;
  std::string_view name;  // the API function
  int64_t ret = 0;
  int64_t bytes = -1;            // -1: not applicable or unknown
  int64_t runq_ns = -1;          // waited for a CPU during the call; -1: unknown
  std::string_view memcpy_kind;  // empty: not a copy
  bool has_stream = false;
  uint64_t stream = 0;
  bool is_launch = false;
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint64_t shared_mem = 0;
  std::string_view kernel;  // demangled kernel name for launches
  uint64_t address = 0;     // allocation result, freed pointer, or launched function
  int64_t py_stack = 0;     // python_stacks id of the calling Python code; 0: none
};

// GPU-side time (the gputime layer): a kernel, copy or memset as it ran on the GPU, or a kernel
// launch as the CUDA runtime recorded it (its correlation id and thread), from CUPTI through
// eacgm's injection library. Times are on the recording's clock (CLOCK_MONOTONIC).
struct GpuActivityRow {
  uint64_t ts_ns = 0;  // GPU start; launches: the API call's start
  uint64_t dur_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;         // launches: the launching thread; 0 otherwise
  std::string_view kind;    // "kernel", "memcpy", "memset", "launch"
  uint32_t device = 0, context = 0, stream = 0;
  uint32_t correlation = 0;  // an execution's launch is the launch row with the same one
  std::string_view name;     // kernels: demangled; copies: HostToDevice...; launches: the API
  int64_t bytes = -1;        // copies and memsets; -1 otherwise
  int32_t grid[3] = {0, 0, 0};
  int32_t block[3] = {0, 0, 0};
  uint32_t shared_mem = 0;  // kernels: static + dynamic shared memory per block
  uint32_t registers = 0;   // kernels: per thread
};

// Duty-cycled GPU time (the gputime layer with EACGM_GPUTIME_DUTY ON/PERIOD): a span in which
// CUPTI's records of process `pid` were on. A process without such rows had them on throughout
// (or had no GPU time at all); with them, outside them nothing was collected, which is not idle.
struct GpuSliceRow {
  uint64_t ts_ns = 0;
  uint64_t dur_ns = 0;
  uint32_t pid = 0;
  uint64_t next_ns = 0;  // when the library's next slice is due; 0: none or unknown (not stored)
};

// An NCCL collective or point-to-point operation as NCCL's profiler plugin saw it (the gputime
// layer: eacgm's library as the plugin): enqueued by thread `tid`, run by the GPU on its
// channels, seen complete by NCCL's proxy thread. Times are on the recording's clock.
struct GpuCollectiveRow {
  uint64_t ts_ns = 0;   // NCCL started enqueueing it (inside the API call or its group's end)
  uint64_t dur_ns = 0;  // until the proxy thread saw its last channel stop; 0: never seen
  uint32_t pid = 0, tid = 0;
  std::string_view name;  // as comm_calls names the API: ncclAllReduce, ncclSend, ...
  uint64_t comm_hash = 0;  // NCCL's communicator hash, the same on every rank
  int64_t seq = -1;        // collectives: NCCL's sequence number in the communicator; p2p: -1
  int64_t rank = -1, nranks = -1;
  int64_t peer = -1;   // the root of a rooted collective, the peer of a send or recv
  int64_t count = -1;  // elements
  std::string_view datatype;  // as comm_calls: float32, bfloat16, ...
  int64_t bytes = -1;         // count x datatype size
  std::string_view algo, proto;  // collectives: RING, TREE, ...; LL, LL128, SIMPLE
  uint32_t channels = 0, channels_seen = 0, warps = 0;
  uint64_t enqueue_ns = 0;  // how long NCCL took to enqueue it
  bool has_gpu_time = false;
  uint64_t gpu_start_ns = 0;  // the first channel's kernel started on the GPU
  uint64_t gpu_dur_ns = 0;    // to the last channel's stop
  double algbw_gbps = -1;  // nccl-tests formulas over gpu_dur_ns; -1: unknown
  double busbw_gbps = -1;
};

// One traced communication call (NCCL). Durations are host-side: for collectives, which NCCL
// enqueues on a stream, the enqueue time; bandwidths from them are not the wire's.
struct CommCallRow {
  uint64_t ts_ns = 0;
  uint64_t dur_ns = 0;
  uint32_t pid = 0, tid = 0;
  std::string_view name;
  int64_t ret = 0;
  int64_t runq_ns = -1;  // waited for a CPU during the call; -1: unknown (c10d)
  // the calling thread's whole wait for a CPU so far, at entry (differences between two calls
  // of a thread: its wait between them); -1: unknown
  int64_t entry_run_delay_ns = -1;
  int64_t count = -1;  // elements, as passed; -1: not applicable
  std::string_view datatype;
  int64_t bytes = -1;  // count x datatype size
  std::string_view redop;
  int64_t peer = -1;    // root of a rooted collective, or the peer of send/recv
  uint64_t comm = 0;    // communicator handle (for creation calls: the new communicator)
  uint64_t comm_id = 0;  // its identity, the same on every rank (nccl_comm_identity); 0: unknown
  int64_t seq = -1;  // c10d: the call's sequence number in its process group, the same on every
                     // rank of it (PyTorch's sequenceNum_); -1: unknown
  int64_t rank = -1;    // this process's rank in it, when eacgm saw it created
  int64_t nranks = -1;  // its size, likewise
  bool has_stream = false;
  uint64_t stream = 0;
  double algbw_gbps = -1;  // nccl-tests formulas over the host-side duration; -1: unknown
  double busbw_gbps = -1;
  int64_t py_stack = 0;  // python_stacks id of the calling Python code; 0: none
};

// Is `name` (a comm_calls name: an NCCL symbol or a c10d collective) an operation that every
// rank of the communicator joins? Point-to-point calls, groups and communicator set-up are not.
inline bool is_collective(std::string_view name) {
  for (const char* not_one : {"send", "Send", "recv", "Recv", "Group", "Init", "Split", "Abort",
                              "Destroy", "Finalize"})
    if (name.find(not_one) != std::string_view::npos) return false;
  return true;
}

// One traced PyTorch operator call through the dispatcher (at::_ops::<op>::call). Calls nest:
// an operator that calls others (aten::linear calling aten::addmm) encloses them in time.
struct TorchCallRow {
  uint64_t ts_ns = 0;
  uint64_t dur_ns = 0;
  uint32_t pid = 0, tid = 0;
  std::string_view name;  // "aten::addmm", "aten::add.Tensor"
  int64_t py_stack = 0;   // python_stacks id of the calling Python code; 0: none
  int64_t runq_ns = -1;   // waited for a CPU during the call; -1: unknown
};

// An anomaly found by `eacgm detect`: a call or a time window whose log-density under its
// group's most likely component fell below the group's threshold.
struct AnomalyRow {
  uint64_t ts_ns = 0, dur_ns = 0;
  std::string layer, name;
  double score = 0, threshold = 0;
  std::string cause;
  std::string features;  // JSON: [[feature, contribution], ...], largest first
};

// What an anomaly is about, for people: its operation, or "(all layers)" for a time window
// (whose layer and name are both "window").
inline std::string_view anomaly_subject(std::string_view layer, std::string_view name) {
  return name == layer ? std::string_view("(all layers)") : name;
}

struct ProcessRow {
  uint32_t pid = 0, ppid = 0;
  std::string name;     // comm
  std::string command;  // full command line
  uint64_t start_ns = 0;
  // its place in a distributed job, as its launcher's environment says ("" and -1: not said)
  std::string job_id;
  int64_t rank = -1, local_rank = -1, world_size = -1;
};

struct ProcessExitRow {
  uint32_t pid = 0;
  uint64_t end_ns = 0;
  int exit_code = 0;  // as a shell reports it: the code, or 128 + the signal
};

struct ThreadRow {
  uint32_t pid = 0, tid = 0;
  std::string name;
};

}  // namespace eacgm

namespace eacgm {

// What a host sample is about.
enum class HostScope : uint8_t { Process, NetDevice, Disk, Cpu };

// One host-layer sample: counts over [ts_ns - interval_ns, ts_ns]. Fields that do not apply to
// the scope stay 0 and are stored as NULL.
struct HostSampleRow {
  uint64_t ts_ns = 0;
  uint64_t interval_ns = 0;
  HostScope scope = HostScope::Process;
  uint64_t id = 0;     // pid, interface index, dev_t (major << 20 | minor), or CPU number
  uint32_t netns = 0;  // network namespace inode of an interface
  std::string name;    // process comm, interface name, disk name, "cpu N"
  // Process: scheduler
  uint64_t runq_wait_ns = 0, runq_waits = 0, runq_max_ns = 0;
  uint64_t voluntary_switches = 0, involuntary_switches = 0;
  uint64_t offcpu_ns = 0, oncpu_ns = 0;
  // Interface: frames with link-layer headers. Process: socket payload sent and received.
  uint64_t tx_bytes = 0, tx_packets = 0, rx_bytes = 0, rx_packets = 0;
  // Process: block I/O it submitted (bios); disk: requests by direction, with latency
  uint64_t io_ops = 0, io_bytes = 0;
  uint64_t read_ops = 0, read_bytes = 0, write_ops = 0, write_bytes = 0;
  uint64_t io_latency_ns = 0, io_latency_max_ns = 0;
  // Process: TCP segments sent again; memory (user page faults, time and count of reclaim
  // stalls, file data read into the page cache)
  uint64_t tcp_retransmits = 0, page_faults = 0, reclaim_ns = 0, reclaims = 0, pagein_bytes = 0;
  // Process: time a CPU stopped (a vCPU its hypervisor did not run, interrupts kept off) under
  // one of its running threads, when the last such stop ended (0: none), and how many stops.
  // CPU: the same for the CPU, whatever it ran.
  uint64_t stall_ns = 0, stall_end_ns = 0, stalls = 0;
  // Process: who had the CPUs its threads waited for the most (waits of 0.1 ms or more, each
  // charged to the task a CPU ran until the waiting thread got it), by process name: the name,
  // the wait charged to processes of that name, how many they were and the one charged the
  // most; "" and 0: none (no such wait, or none behind another process).
  std::string taker_name;
  uint64_t taker_ns = 0;
  uint32_t taker_procs = 0, taker_pid = 0;
};

// One CPU sample of a traced thread that was running (record --sample-hz): its stacks, as ids
// in native_stacks and python_stacks (0: none).
struct StackSampleRow {
  uint64_t ts_ns = 0;
  uint32_t pid = 0, tid = 0;
  int64_t native_stack = 0;
  int64_t py_stack = 0;
};

// One off-CPU sample (record --sample-hz): a traced thread blocked from ts_ns for dur_ns, where
// its stacks say; weight_ns: the time it stands for (dur_ns, or one sampling period for a short
// wait kept with probability dur / period), so weights sum to the time spent blocked.
struct OffCpuSampleRow {
  uint64_t ts_ns = 0, dur_ns = 0, weight_ns = 0;
  uint32_t pid = 0, tid = 0;
  int64_t native_stack = 0;
  int64_t py_stack = 0;
};

// One frame of a deduplicated native stack (native_stacks): depth 0 is the innermost.
struct NativeFrameRow {
  int64_t id = 0;
  uint32_t depth = 0;
  std::string_view name;    // the function; "unknown+0x<offset>" where it cannot be named
  std::string_view module;  // the file the code is in; empty where not file-backed
};

}  // namespace eacgm
