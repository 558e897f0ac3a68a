// What the trace exporters consume: processes, threads and slices, streamed in any order.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace eacgm {

struct TimelineProcess {
  uint32_t pid = 0;
  std::string name;  // command, e.g. "python3 train.py"
};

struct TimelineThread {
  uint32_t pid = 0;
  uint32_t tid = 0;
  std::string name;  // comm
};

// One argument shown with a slice (Perfetto debug annotation, Chrome "args").
struct TimelineArg {
  std::string name;
  std::variant<int64_t, uint64_t, double, std::string> value;
};

// One traced call: a complete slice on its thread's track.
struct TimelineSlice {
  uint64_t ts_ns = 0;  // wall clock (realtime) ns
  uint64_t dur_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  std::string category;  // layer: "cuda", "comm", ...
  std::string name;      // "cudaLaunchKernel"; for launches the exporter is given the kernel
  std::vector<TimelineArg> args;
  uint64_t flow_out = 0;  // a flow arrow starts here (a launch, to its work on the GPU); 0: none
};

// Work on a GPU (the gputime layer): a kernel, copy or memset as it ran, on a track of its own
// per device and stream under its process, as Nsight Systems draws them.
struct TimelineGpuSlice {
  uint64_t ts_ns = 0;  // wall clock (realtime) ns
  uint64_t dur_ns = 0;
  uint32_t pid = 0;
  uint32_t device = 0, stream = 0;  // its track's key in the process (with `track`)
  std::string track;     // its track's name; "": "GPU {device} stream {stream}"
  std::string category;  // "gpu"
  std::string name;      // the kernel, or "memcpy HostToDevice", "memset"
  std::vector<TimelineArg> args;
  uint64_t flow_in = 0;  // the flow_out of its launch's slice; 0: none
};

// One value of a sampled metric, on a counter track of a process (pid != 0) or of the machine
// (pid == 0: per GPU, per interface, per disk). Tracks are named by `track`.
struct TimelineCounter {
  uint64_t ts_ns = 0;  // wall clock (realtime) ns
  uint32_t pid = 0;
  std::string track;  // e.g. "run-queue wait (ms/s)", "eth0 rx (MB/s)"
  double value = 0;
};

// A point in time worth a marker (an anomaly), on a machine-wide track named `track`.
struct TimelineInstant {
  uint64_t ts_ns = 0;  // wall clock (realtime) ns
  std::string track;   // "anomalies"
  std::string category;
  std::string name;
  std::vector<TimelineArg> args;
};

// One frame of a CPU profile's stack (record --sample-hz).
struct TimelineFrame {
  std::string name;   // Python: module.qualname; native: the function (or unknown+0x...)
  std::string file;   // Python: the source file; native: the module
  int64_t line = -1;  // Python: the line executing; -1: unknown or native
  bool python = false;
};

// A CPU profile sample: the thread's stack when it was sampled, one of the stacks given before
// with add_stack.
struct TimelineStackSample {
  uint64_t ts_ns = 0;  // wall clock (realtime) ns
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t stack = 0;  // the id given to add_stack
};

// Receives a timeline. Processes and threads are announced before their first slice.
class TimelineSink {
 public:
  virtual ~TimelineSink() = default;
  virtual void add_process(const TimelineProcess& process) = 0;
  virtual void add_thread(const TimelineThread& thread) = 0;
  virtual void add_slice(const TimelineSlice& slice) = 0;
  // Formats without GPU tracks ignore them.
  virtual void add_gpu_slice(const TimelineGpuSlice& /*slice*/) {}
  virtual void add_counter(const TimelineCounter& counter) = 0;
  virtual void add_instant(const TimelineInstant& instant) = 0;
  // CPU profile samples (formats without stack samples ignore them): each stack, innermost
  // frame first, once, under an id of the caller's; then the samples that refer to it.
  virtual void add_stack(uint32_t /*id*/, const std::vector<TimelineFrame>& /*frames*/) {}
  virtual void add_stack_sample(const TimelineStackSample& /*sample*/) {}
  // Flushes everything to the output. Throws eacgm::Error if the output cannot be written.
  virtual void finish() = 0;
};

}  // namespace eacgm
