// The tracing pipeline that `record` and `agent` both drive: probes -> ring buffer -> decoder ->
// sinks, with the sampled layers (gpu, host) feeding the same sinks. The driver owns the loop,
// the targets' lifetime and the sinks; the pipeline owns every kernel object and layer.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "pipeline/layers.h"
#include "store/sink.h"
#include "probe/call_tracer.h"
#include "python/code_filter.h"

namespace eacgm {

class EventDecoder;
class GpuLayer;
class HostTracer;
class ProbePlanner;
class PythonDecoder;
class PythonLayer;
class SamplingThread;
class Symbolizer;
struct ProbeSet;
class TorchOps;

// What to trace and how: the options `record` and `agent` share.
struct TraceOptions {
  std::vector<std::string> layers{"auto"};  // --layers (LayerChoice)
  bool all = false;                         // every process, not a tree
  uint64_t ring_mb = 32;
  double interval_ms = 100;                       // sampling interval of the gpu and host layers
  std::vector<std::string> torch_ops{"default"};  // --torch-ops patterns (TorchOpFilter)
  std::string nvml_library;  // --nvml-library; empty: $EACGM_NVML_LIBRARY, else the driver's
  bool quiet = false;
  std::string python_calls;          // --python-calls: functions timed per call; empty: none
  uint32_t python_stack_depth = 8;  // --python-stack-depth
  bool python_no_hook = false;      // --python-no-hook
  uint32_t sample_hz = 0;  // --sample-hz: CPU profile of the traced threads; 0: none
  bool off_cpu = true;     // with sample_hz: the off-CPU profile too (--no-off-cpu)
  // The python layers only in processes that map a CUDA, NCCL or PyTorch library (the agent's
  // default: on a GPU node the jobs are those; system Python tools are not)
  bool python_with_ml_only = false;
  // The hot calls' probes can be taken off and put back (pause_calls): the agent's --call-duty
  bool duty_cycled_calls = false;
};

class Pipeline {
 public:
  // Loads the programs of the chosen layers; every row goes to `out`. Throws Error naming the
  // cause and the fix (privileges, kernel support), UsageError for bad options.
  Pipeline(const TraceOptions& options, Sink& out);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Targets, before start(). A command forked and waiting to exec: it, its interpreter and the
  // libraries it may load are probed before it runs.
  // `gputime_library`: the injection library the command will load (record wrote it), probed
  // before the command runs so that its first batch is not missed; empty: none.
  void expect_command(uint32_t pid, const std::string& program,
                      const std::string& gputime_library = "");
  // The gputime layer cannot be on, and why (one line in the layers line).
  void gputime_off(const std::string& why) { active_.off("gputime", why); }
  // A running process (-p) and its descendants; returns them all, `pid` first.
  std::vector<uint32_t> attach_process(uint32_t pid);
  // --all: the known libraries now, running processes on a timer.
  void expect_all();

  // Writes the start meta (`target` says what is traced), starts the gpu layer and probes what
  // the targets map.
  void start(const std::string& target);
  // The command, held just after its exec: reads its maps now (its kernels can only be named
  // through them) and probes its program, so that a short program's own functions (a
  // statically linked CUDA runtime, the gputime layer's test program) are traced from its start.
  void command_exec(uint32_t pid);
  // Starts the sampling thread of the sampled layers (after the command's exec, so that its
  // first sample names the program).
  void start_sampling();

  // One pass: waits up to `timeout_ms` for events (those that need an answer wake it at once),
  // decodes them into the sinks, hands over the samples, probes what processes newly mapped, and
  // flushes the sinks about every 90 ms.
  void step(int timeout_ms);
  // With duty_cycled_calls: the torch layer's and the cuda layer's hot probes off (the traced
  // threads stop paying for them) and on again; see CallTracer::pause_calls. resume_calls
  // returns "" or what could not be attached again.
  void pause_calls() { tracer_->pause_calls(); }
  std::string resume_calls() { return tracer_->resume_calls(); }

  // At the end: drains the ring, takes the last samples, stops sampling.
  void stop();
  // Writes the end-of-run meta (counters, layers, warnings) and prints the warnings.
  void finish();

  // A traced process exited (after the pipeline forgot it).
  std::function<void(uint32_t pid)> on_process_exit;

  uint64_t start_monotonic_ns() const { return start_mono_; }
  static double own_cpu_seconds();
  uint64_t calls() const;
  size_t probes() const;
  TracerCounters counters() const;
  const LayerChoice& layer_choice() const { return choice_; }
  const ActiveLayers& active_layers() const { return active_; }

 private:
  void use_torch_layout(const std::string& path);
  void plan_process(uint32_t pid, bool python = true);
  void plan_dirty();
  void drain();
  void write_samples();
  void start_host();
  void start_gpu();
  void start_python();
  void finish_python();
  void finish_warnings();
  void note_layers_of_calls();

  const TraceOptions& opts_;
  LayerChoice choice_;
  Sink& out_;
  std::unique_ptr<CallTracer> tracer_;
  std::unique_ptr<Symbolizer> symbols_;
  std::unique_ptr<EventDecoder> decoder_;
  std::shared_ptr<TorchOps> torch_ops_;  // op ids of the torch layer, shared with the decoder
  std::unique_ptr<ProbePlanner> planner_;
  std::unique_ptr<HostTracer> host_;
  std::unique_ptr<GpuLayer> gpu_;
  std::unique_ptr<PythonLayer> python_;
  std::unique_ptr<PythonDecoder> python_decoder_;
  std::unique_ptr<SamplingThread> sampling_;  // after the layers it reads: destroyed first
  ActiveLayers active_;
  uint64_t host_rows_ = 0;
  std::set<uint32_t> dirty_;  // processes that mapped new code
  std::string torch_layout_;  // the PyTorch version whose layout the BPF side reads
  std::set<std::string> warned_layouts_;
  std::string gpu_notes_;  // what the gputime injection library said, one line per note
  uint64_t start_mono_ = 0;
  uint64_t last_flush_ = 0, last_rescan_ = 0, last_progress_meta_ = 0;
  // the rescan's processes: when each was first seen and last planned (CLOCK_MONOTONIC)
  struct Rescanned {
    uint64_t first_seen_ns, planned_ns;
  };
  std::unordered_map<uint32_t, Rescanned> rescanned_;
  void rescan(uint64_t now_ns);
  bool warned_loader_ = false;
  uint64_t calls_at_flush_ = 0;
};

}  // namespace eacgm
