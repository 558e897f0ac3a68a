// Owns the loaded call-tracing BPF object: process filter, uprobe links, ring buffer, counters.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "probe/c10d_ops.h"

struct calls_bpf;
struct ring_buffer;
struct bpf_link;

namespace eacgm {

struct CallTracerOptions {
  bool trace_all = false;              // every process, not just the traced tree
  uint64_t ring_bytes = 32ull << 20;   // power of two
  uint64_t wakeup_bytes = 256 * 1024;  // reader wakeup mark
  bool python = false;                 // the python layer: stacks for calls, eval probes
  uint32_t python_stack_depth = 8;     // innermost Python frames kept per call (at most 32)
  uint32_t sample_hz = 0;              // CPU profile: samples per second of each traced thread
  bool off_cpu = false;                // off-CPU profile too, one sample per 1/sample_hz of waiting
};

struct TracerCounters {
  uint64_t ring_drops = 0;
  uint64_t entry_missing = 0;
  uint64_t entry_overflow = 0;
  uint64_t offcpu_lost = 0;  // blocking switches without storage for their stacks
  uint64_t py_stacks_reused = 0;  // call stacks that were one of the thread's last ones again
  uint64_t offcpu_stacks_reused = 0;  // blocking switches whose native stack was the last one's
};

// What a refused program's libbpf log says, in one line: "program NAME: " and the verifier's
// last word before its statistics ("combined stack size of 4 calls is 528. Too large"); "" when
// the log holds none.
std::string verifier_reason(const std::string& log);

// A CallTracer construction error without its "cannot load the BPF programs: " lead, for a
// line that names the layer it costs ("layer python-stacks is off: ...").
std::string load_refusal(const std::string& error);

class CallTracer {
 public:
  // Loads and verifies the BPF programs and attaches the process-tree tracepoints.
  // Throws eacgm::Error naming the cause (permissions, kernel support) and the fix.
  explicit CallTracer(const CallTracerOptions& options);
  ~CallTracer();
  CallTracer(const CallTracer&) = delete;
  CallTracer& operator=(const CallTracer&) = delete;

  // Adds a process (tgid) to the traced set; its future children join automatically.
  void trace_pid(uint32_t pid);

  // The loaded program the kernel's verifier went through the most instructions of (its
  // limit is 1,000,000 a program), and that count; {"", 0} where the kernel does not say
  // (before Linux 5.16).
  struct VerifierLoad {
    std::string program;
    uint32_t instructions = 0;
  };
  VerifierLoad most_verified() const;

  // A function to probe in a file: where it is, and the cookie its events carry.
  struct ProbePoint {
    uint64_t file_offset;
    uint64_t cookie;
    // File offsets of the function's exit instructions (ret, tail jumps). Empty: the return is
    // caught by a uretprobe. C++ functions that may throw need these: an exception unwinding
    // through a uretprobe's trampoline aborts the process.
    struct Exit {
      uint64_t file_offset;
      uint64_t cookie_bits;  // EACGM_COOKIE_EXIT_INSN and how to find the entry's stack pointer
    };
    std::vector<Exit> exits;
    bool entry_only = false;  // no return or exit probe: the record goes out at entry
    bool duty = false;        // detached while the calls are paused (pause_calls)
  };
  // Attaches the entry and return (or exit) programs at each point of the ELF file `path`, for
  // every process that maps it. Returns one error message per point ("" where it worked).
  std::vector<std::string> attach(const std::string& path, const std::vector<ProbePoint>& points);

  // The duty-cycled points (ProbePoint::duty) off and on again. Detached, they cost the traced
  // threads nothing (no trap); attached again, each file's points come back through a
  // descriptor held since their first attach (the process that named the file may be gone).
  // Closing the links waits for RCU grace periods (~30-76 ms here, together). resume_calls
  // returns "" or what could not be attached again, in one line.
  void pause_calls();
  std::string resume_calls();

  // Tells the BPF side where a PyTorch build keeps tensor sizes and process-group ranks and
  // sequence numbers (c10d).
  void set_torch_layout(const TorchLayout& layout);

  // Attaches the hook that reports a traced process's dlopen (see loader_update in the BPF).
  std::string attach_loader_hook(const std::string& path, uint64_t file_offset);

  // Attaches the python layer's entry and return programs to CPython's eval function at
  // `file_offset` of `path`; `layout` is the py_layouts index its events use. "" or why not.
  std::string attach_python_eval(const std::string& path, uint64_t file_offset, uint32_t layout);

  // Starts the CPU profile: a perf event on each online CPU at the sample rate given at load,
  // whose program samples the traced thread running there. "" or why not (no sampling asked for,
  // no perf events).
  std::string start_sampling();
  // Starts the off-CPU profile (the scheduler's switch tracepoint). "" or why not.
  std::string start_off_cpu();

  // Says a process was added to py_procs: threads that found their process missing look again.
  void python_process_added();

  // A map of the loaded object by name (the python layer's py_layouts, py_procs, py_codes).
  int map_fd(const char* name) const;

  // Waits up to timeout_ms for data, then hands every waiting record to the callback.
  // Returns the number of records consumed.
  using RecordHandler = std::function<void(const void* data, size_t size)>;
  int poll(int timeout_ms, const RecordHandler& handler);

  TracerCounters counters() const;

  // The set of traced processes, for other layers' programs to share.
  int traced_map_fd() const;
  // The processes in that set now.
  std::vector<uint32_t> traced_pids() const;

 private:
  struct SkeletonDeleter {
    void operator()(calls_bpf* s) const;
  };
  struct RingDeleter {
    void operator()(ring_buffer* r) const;
  };
  struct LinkDeleter {
    void operator()(bpf_link* l) const;
  };
  std::unique_ptr<calls_bpf, SkeletonDeleter> skel_;
  std::unique_ptr<ring_buffer, RingDeleter> ring_;
  // Links owned together: uprobe_multi links by fd, the rest (perf-event uprobes,
  // tracepoints) as libbpf's.
  struct LinkSet {
    std::vector<int> fds;
    std::vector<std::unique_ptr<bpf_link, LinkDeleter>> links;
    // moves every link into `releases` (see link_release.h)
    void take(std::vector<std::function<void()>>& releases);
  };
  std::vector<std::string> attach_points(const std::string& path,
                                         const std::vector<ProbePoint>& points, LinkSet& into,
                                         bool exits_first);
  std::string attach_one(const std::string& path, const ProbePoint& point, LinkSet& into);
  bool attach_multi(const std::string& path, const std::vector<ProbePoint>& points, LinkSet& into,
                    bool exits_first);

  LinkSet base_;  // every link but the duty-cycled ones
  struct DutyFile {
    int fd = -1;  // the file, open since its first attach
    std::vector<ProbePoint> points;  // those that attached
    LinkSet links;
  };
  std::vector<DutyFile> duty_files_;
  bool paused_ = false;
  bool session_supported_ = false;  // session uprobes for the Python eval function
  bool multi_supported_ = true;     // until the kernel says otherwise
  bool per_event_loaded_ = true;    // call_entry, call_return and call_exit (the fallback)
  bool trace_all_ = false;
  uint32_t sample_hz_ = 0;
  bool off_cpu_ = false;
  const RecordHandler* handler_ = nullptr;  // valid during poll()
};

}  // namespace eacgm
