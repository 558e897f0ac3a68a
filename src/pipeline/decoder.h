// Turns raw ring-buffer records into recording rows: CUDA calls with their meaning (bytes,
// kinds, geometry, kernel names), and the process tree with names.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "events.h"
#include "probe/c10d_ops.h"
#include "probe/cuda_ops.h"  // CallKind
#include "probe/symbolizer.h"
#include "probe/torch_ops.h"
#include "store/sink.h"
#include "util/interner.h"

namespace eacgm {

class PythonDecoder;

struct DecoderStats {
  uint64_t calls = 0;
  uint64_t proc_events = 0;
  uint64_t malformed = 0;  // records of an unknown kind or size: a BPF/userspace mismatch
  uint64_t c10d_incomplete = 0;  // c10d works queued but not seen to complete (no wait())
  uint64_t samples = 0;          // CPU samples (the profile)
  uint64_t offcpu_samples = 0;   // off-CPU samples (the waits' profile)
  uint64_t native_stacks = 0;    // distinct native stacks among them
  uint64_t gpu_activity = 0;     // gputime rows (executions and launches)
  uint64_t gpu_collectives = 0;  // gputime rows of NCCL operations (NCCL's profiler plugin)
  uint64_t gpu_slices = 0;       // duty-cycled GPU time: the spans collected
  uint64_t gpu_dropped = 0;      // records CUPTI dropped (its buffers were full)
  uint64_t gpu_off_clock = 0;    // records not on the recording's clock (left out)
};

class EventDecoder {
 public:
  EventDecoder(Sink& out, Symbolizer& symbols);

  void on_record(const void* data, size_t size);

  // A process enters the recording (the launched command, -p targets, forks).
  void add_process(uint32_t pid, uint32_t ppid, uint64_t ts_ns);

  // The launched command: its process row is written when it execs, with this parent.
  void expect_process(uint32_t pid, uint32_t ppid) { parents_[pid] = ppid; }

  // Called when a traced process maps new code (re-plan probes) and when one exits.
  std::function<void(uint32_t pid)> on_code_mapped;
  // A process made its first CUDA, NCCL or PyTorch call: it maps one of those libraries now,
  // even where no mmap event said so (the agent's --all has none; it would otherwise learn of
  // a dlopen only at its next rescan, after a short job may be gone).
  std::function<void(uint32_t pid)> on_first_call;
  std::function<void(uint32_t pid, int status)> on_process_exit;
  // A process got its name (fork: the parent's; exec: the new program's).
  std::function<void(uint32_t pid, const std::string& name)> on_process_named;
  // What the gputime injection library said about itself in a process (CUPTI found, errors).
  std::function<void(uint32_t pid, const std::string& note)> on_gpu_note;

  const DecoderStats& stats() const { return stats_; }
  // The first call decoded of each call layer (cuda, comm, torch), by layer: proof that the
  // layer is used, even where the process exited before its maps could be read.
  struct FirstCall {
    uint32_t pid = 0;
    uint64_t op = 0;
  };
  std::map<std::string, FirstCall> first_calls() const;
  // Processes the decoder holds state for (threads, allocations, handles), until they exit.
  size_t live_processes() const { return state_.size(); }

  // At the end: c10d calls still pending (raised before being queued) become rows; works never
  // seen to complete are counted (stats().c10d_incomplete).
  void finish_c10d();

  // Names of the torch layer's op ids (given out as libtorch files are probed).
  void set_torch_ops(std::shared_ptr<const TorchOps> ops) { torch_ops_ = std::move(ops); }
  // The python layer's records go to `python`, and call records get their Python stacks from it.
  void set_python(PythonDecoder* python);

 private:
  void decode_call(const eacgm_call_event& e);
  void decode_cuda(const eacgm_call_event& e);
  static bool is_launch(CallKind kind);
  void fill_launch(CallKind kind, const eacgm_call_event& e, CudaCallRow& row);
  void fill_memory_or_lookup(CallKind kind, const eacgm_call_event& e, CudaCallRow& row);
  void decode_comm(const eacgm_call_event& e);
  void decode_torch(const eacgm_call_event& e);
  void decode_c10d(const eacgm_call_event& e);
  void decode_proc(const eacgm_proc_event& e);
  void decode_name(const eacgm_name_event& e);
  void decode_exec_image(const eacgm_exec_image_event& e);
  void decode_sample(const eacgm_sample_event& e);
  void decode_offcpu(const eacgm_offcpu_event& e);
  void decode_gpu_batch(const eacgm_gpu_batch_event& e);  // decoder_gputime.cpp
  void decode_gpu_entry(const eacgm_gpu_batch_event& e, uint16_t kind, uint16_t bytes,
                        const unsigned char* entry);
  // A sample's Python stack (its PY_STACK record) and native stack into row's ids.
  template <class Event, class Row>
  void take_stacks(const Event& e, Row& row);
  // The id in native_stacks of a user stack (innermost first), its frames written when new;
  // 0 for an empty stack.
  int64_t native_stack_id(uint32_t pid, const uint64_t* ips, uint32_t nframes);
  std::string_view driver_kernel_name(uint32_t pid, uint64_t handle);
  std::string_view runtime_kernel_name(const eacgm_call_event& e, uint64_t func);
  void note_thread(uint32_t pid, uint32_t tid);

  Sink& out_;
  Symbolizer& symbols_;
  DecoderStats stats_;
  std::unordered_map<uint32_t, uint32_t> parents_;
  std::unordered_map<uint32_t, std::string> commands_;
  // What is known of each live process; dropped when it exits (the agent sees days of churn).
  struct CommInfo {
    int64_t rank = -1, nranks = -1;
    uint64_t id = 0;  // nccl_comm_identity; 0: unknown
  };
  struct ProcessState {
    std::unordered_set<uint32_t> threads;  // threads given a row
    // the process's name as its fork or exec said: a thread gone before its first event was
    // decoded (its /proc entry with it) is named so, as the kernel names a new thread
    std::string name;
    // live allocations, so that frees can say how many bytes they return
    std::unordered_map<uint64_t, int64_t> allocations;
    // driver handles (CUfunction, CUkernel) named by cuModuleGetFunction & co
    std::unordered_map<uint64_t, std::string_view> driver_names;
    // each thread's last driver launch (its start and kernel): a runtime launch returns after
    // the driver launch it made, so a stub with no symbol is named by the kernel inside it
    std::unordered_map<uint32_t, std::pair<uint64_t, std::string_view>> last_driver_launch;
    std::unordered_map<uint64_t, CommInfo> comms;  // NCCL communicators created while traced
    std::unordered_map<uint32_t, std::string_view> gpu_names;  // the gputime library's name ids
    // The library names threads as the process sees them: in a container, by their ids in its
    // own pid namespace. The process's pid there; 0: the host's namespace; -1: not known yet.
    int64_t ns_pid = -1;
    std::unordered_map<uint32_t, uint32_t> host_tids;  // namespace's tid -> the host's
    uint64_t host_tids_read_ns = 0;
    bool called = false;                           // on_first_call was said
  };
  std::unordered_map<uint32_t, ProcessState> state_;
  ProcessState& state_of(uint32_t pid);
  // The host's id of a thread of `pid` the gputime library named (see ProcessState).
  uint32_t host_tid(ProcessState& st, uint32_t pid, uint32_t tid, uint64_t now_ns);
  ProcessState* last_state_ = nullptr;  // state_of's cache: the last process looked up
  uint32_t last_pid_ = 0;
  // by layer: cuda, comm, torch (a hot path: no string per call); op ~0: none yet
  FirstCall first_calls_[3] = {{0, ~0ull}, {0, ~0ull}, {0, ~0ull}};
  // the place in a job of the processes whose launcher said one (job id, ranks), by pid
  std::unordered_map<uint32_t, ProcessRow> places_;
  void note_place(ProcessRow& row, const ProcessRow* parent);
  Interner names_;
  // the profile's native stacks, by their frames (function and module of each), to their id
  std::unordered_map<std::string, int64_t> native_ids_;
  std::shared_ptr<const TorchOps> torch_ops_;
  std::vector<std::string_view> torch_names_;  // by op id - kTorchOpBase, filled on first use
  PythonDecoder* python_ = nullptr;
  // c10d: a call waits for its Work (queued or constructed on the calling thread), then for the
  // Work's completion (on any thread of the process)
  struct C10dCall {
    CommCallRow row;
    Collective collective = Collective::None;
  };
  void emit_c10d(C10dCall call, uint64_t end_ns, int64_t ret);
  void forget_c10d(uint32_t pid);                                 // at its exit
  std::unordered_map<uint32_t, C10dCall> c10d_pending_;           // by tid
  std::map<std::pair<uint32_t, uint64_t>, C10dCall> c10d_works_;  // by (pid, Work*)
};

// The nccl-tests algorithm and bus bandwidths of a completed collective, over its duration
// (left unknown when it failed, or when the formula needs a rank count that is not known).
void set_bandwidths(CommCallRow& row, Collective collective);

// argument `index` of a call (0..5 registers, 6..8 stack words)
uint64_t call_arg(const eacgm_call_event& e, int index);

// the calling thread's whole wait for a CPU at the call's entry; -1 where not known
int64_t run_delay_of(const eacgm_call_event& e);

}  // namespace eacgm
