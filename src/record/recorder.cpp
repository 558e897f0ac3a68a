// The record loop: probes in place before the target runs, events drained on a short timer,
// batches handed to the writer, and a complete recording however the run ends.
#include "record/recorder.h"

#include <bpf/bpf.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "export/exporter.h"
#include "probe/call_tracer.h"
#include "probe/cuda_ops.h"
#include "probe/host_tracer.h"
#include "record/gpu_layer.h"
#include "record/sampling.h"
#include "probe/library_finder.h"
#include "probe/proc_maps.h"
#include "probe/symbolizer.h"
#include "probe/target.h"
#include "python/python_decoder.h"
#include "python/python_layer.h"
#include "record/decoder.h"
#include "report/report.h"
#include "store/recording.h"
#include "util/error.h"
#include "version.h"

namespace eacgm {
namespace {

std::atomic<int> g_stop_signal{0};

void on_stop_signal(int sig) { g_stop_signal.store(sig); }

// Handlers without SA_RESTART so the ring-buffer poll returns at once on Ctrl-C.
void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void check_privileges() {
  if (geteuid() != 0)
    fail("recording needs root (eBPF uprobes): run with sudo, or grant CAP_BPF, CAP_PERFMON "
         "and CAP_SYS_RESOURCE to the eacgm binary");
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string hostname() {
  utsname u{};
  uname(&u);
  return u.nodename;
}

void check_layers(const std::vector<std::string>& layers) {
  static const std::set<std::string> known{"cuda", "comm", "python", "torch", "gpu", "host"};
  for (const auto& l : layers) {
    if (!known.count(l))
      throw UsageError(fmt::format(
          "unknown layer '{}' (choose from cuda, comm, python, torch, gpu, host)", l));
  }
}

ProbeSet probe_set(const std::vector<std::string>& layers, std::shared_ptr<TorchOps> torch,
                   std::function<void(const std::string&)> use_torch_layout) {
  ProbeSet set;
  for (const auto& l : layers) {
    if (l == "cuda") add_cuda_probes(set);
    if (l == "comm") {
      add_comm_probes(set);
      add_c10d_probes(set, use_torch_layout);
    }
    if (l == "torch") add_torch_probes(set, torch);
  }
  return set;
}

class Session {
 public:
  explicit Session(const RecordOptions& o)
      : opts_(o),
        writer_(o.output, o.force),
        tracer_(CallTracerOptions{o.all, o.ring_mb << 20, 256 * 1024, has_layer("python"),
                                  o.python_stack_depth}),
        decoder_(writer_, symbols_),
        torch_ops_(std::make_shared<TorchOps>(TorchOpFilter(o.torch_ops))),
        probes_(probe_set(o.layers, torch_ops_,
                          [this](const std::string& path) { use_torch_layout(path); })),
        planner_(tracer_, probes_) {
    decoder_.set_torch_ops(torch_ops_);
    if (has_layer("host")) {
      host_ = std::make_unique<HostTracer>(o.all ? -1 : tracer_.traced_map_fd(), o.all);
      std::string lines;
      for (const auto& m : host_->unavailable()) {
        if (!o.quiet) fprintf(stderr, "eacgm: layer host: %s is not recorded\n", m.c_str());
        lines += (lines.empty() ? "" : "\n") + m;
      }
      if (!lines.empty()) writer_.set_meta("host_unavailable_metrics", lines);
    }
    if (has_layer("python")) start_python();
    decoder_.on_code_mapped = [this](uint32_t pid) {
      // Snapshot the maps now, while the process surely runs (exec and dlopen wake the reader
      // at once): a short-lived process may be gone by the time its calls are decoded, and its
      // kernels can only be named through these maps. Probe planning can wait for the batch.
      if (auto maps = read_proc_maps(static_cast<int>(pid))) symbols_.update_maps(pid, *maps);
      dirty_.insert(pid);
    };
    decoder_.on_process_named = [this](uint32_t pid, const std::string& name) {
      if (host_) host_->name_process(pid, name);
    };
    decoder_.on_process_exit = [this](uint32_t pid, int) {
      live_.erase(pid);
      symbols_.forget(pid);
      if (python_) python_->forget(pid), python_decoder_->forget(pid);
    };
  }

  int run();

 private:
  void write_start_meta(const std::string& target);
  void use_torch_layout(const std::string& path);
  void plan_dirty();
  void drain();
  bool targets_done();
  void finish(std::optional<int> exit_status);
  void progress(uint64_t now_ns);
  void write_samples();
  void start_gpu();
  void start_python();
  void finish_python();
  bool has_layer(const std::string& l) const {
    return std::find(opts_.layers.begin(), opts_.layers.end(), l) != opts_.layers.end();
  }

  const RecordOptions& opts_;
  RecordingWriter writer_;
  CallTracer tracer_;
  Symbolizer symbols_;
  EventDecoder decoder_;
  std::shared_ptr<TorchOps> torch_ops_;  // op ids of the torch layer, shared with the decoder
  ProbeSet probes_;
  ProbePlanner planner_;
  std::unique_ptr<HostTracer> host_;
  std::unique_ptr<GpuLayer> gpu_;
  std::unique_ptr<PythonLayer> python_;
  std::unique_ptr<PythonDecoder> python_decoder_;
  std::unique_ptr<SamplingThread> sampling_;  // after the layers it reads: destroyed first
  uint64_t host_rows_ = 0;
  std::unique_ptr<LaunchedCommand> command_;
  std::set<uint32_t> dirty_;  // processes that mapped new code
  std::string torch_layout_;  // the PyTorch version whose layout the BPF side reads
  std::set<std::string> warned_layouts_;
  std::set<uint32_t> live_;   // -p targets still running
  uint64_t start_mono_ = 0;
  uint64_t last_progress_ = 0;
};

void Session::write_start_meta(const std::string& target) {
  start_mono_ = clock_ns(CLOCK_MONOTONIC);
  uint64_t real = clock_ns(CLOCK_REALTIME);
  writer_.set_meta("eacgm_version", EACGM_VERSION);
  writer_.set_meta("hostname", hostname());
  writer_.set_meta("start_realtime_ns", std::to_string(real));
  writer_.set_meta("start_monotonic_ns", std::to_string(start_mono_));
  writer_.set_meta("monotonic_to_realtime_ns", std::to_string(int64_t(real - start_mono_)));
  writer_.set_meta("command", target);
  writer_.set_meta("layers", join(opts_.layers, ","));
  writer_.set_meta("duration_note",
                   "cuda durations are host-side API times (enqueue time for async calls), "
                   "not GPU execution times");
  writer_.flush();
}

// c10d's bytes, ranks and sizes are read through PyTorch's own structures, whose layout is
// known per version: say once when a libtorch's is not.
void Session::use_torch_layout(const std::string& path) {
  std::string version;
  auto layout = torch_layout_for(path, &version);
  if (layout) {
    if (torch_layout_ == layout->version) return;
    torch_layout_ = layout->version;
    tracer_.set_torch_layout(layout->numel_offset, layout->dtype_offset, layout->pg_rank_offset);
    writer_.set_meta("torch_version", version);
  } else if (warned_layouts_.insert(version).second) {
    fprintf(stderr, "eacgm: layer comm: PyTorch %s (%s) is a version whose tensor layout eacgm "
            "does not know: c10d calls are traced with their durations, but without bytes, "
            "rank and world size\n", version.empty() ? "of unknown version" : version.c_str(),
            path.c_str());
  }
}

void Session::plan_dirty() {
  for (uint32_t pid : dirty_) {
    planner_.plan_process(pid);
    if (python_) python_->plan_process(pid);
  }
  dirty_.clear();
}

void Session::start_python() {
  python_ = std::make_unique<PythonLayer>(tracer_, !opts_.python_no_hook);
  PythonLayer* layer = python_.get();
  python_decoder_ = std::make_unique<PythonDecoder>(
      writer_, PythonFilter(opts_.python_filter),
      [layer](const eacgm_py_code_key& key, uint32_t verdict) { layer->set_verdict(key, verdict); });
  python_decoder_->on_hook_request = [layer](const eacgm_py_hook_event& r) {
    layer->install_hook(r);
  };
  decoder_.set_python(python_decoder_.get());
}

void Session::finish_python() {
  // The job may outlive the recording (-p, --duration): give it back its inlined calls.
  int restored = python_->restore_hooks();
  const PythonDecoderStats& s = python_decoder_->stats();
  writer_.set_meta("python_filter", opts_.python_filter);
  writer_.set_meta("python_interpreters", join(python_->interpreters(), ";"));
  writer_.set_meta("python_calls", std::to_string(s.calls));
  writer_.set_meta("python_code_objects", std::to_string(s.code_objects));
  writer_.set_meta("python_calls_filtered", std::to_string(s.filtered));
  writer_.set_meta("python_calls_unnamed", std::to_string(s.unnamed));
  writer_.set_meta("python_hooks_restored", std::to_string(restored));
  writer_.set_meta("python_hook", opts_.python_no_hook ? "off" : "on");
  std::string lines;
  for (const auto& w : python_->warnings()) {
    fprintf(stderr, "eacgm: %s\n", w.c_str());
    lines += (lines.empty() ? "" : "\n") + w;
  }
  writer_.set_meta("python_warnings", lines);
  if (python_->interpreters().empty() && lines.empty())
    fprintf(stderr, "eacgm: layer python: no CPython interpreter was found in the traced "
            "processes\n");
}

void Session::drain() {
  auto handler = [this](const void* d, size_t n) { decoder_.on_record(d, n); };
  // Until the ring is empty; bounded so a target that keeps producing cannot hold us forever.
  for (int i = 0; i < 64 && tracer_.poll(0, handler) > 0; ++i) {
  }
}

void Session::start_gpu() {
  // Only the traced processes' GPU use is kept: NVML reports host-wide pids, as the BPF side.
  int traced_fd = tracer_.traced_map_fd();
  std::function<bool(uint32_t)> keep;
  if (!opts_.all)
    keep = [traced_fd](uint32_t pid) {
      uint8_t v = 0;
      return bpf_map_lookup_elem(traced_fd, &pid, &v) == 0;
    };
  gpu_ = GpuLayer::start(opts_.nvml_library, opts_.interval_ms, std::move(keep), opts_.quiet);
  if (gpu_) writer_.set_meta("nvml_library", gpu_->library_path());
}

// What the sampling thread gathered goes into the recording here (the writer is this thread's).
void Session::write_samples() {
  if (gpu_) gpu_->drain(writer_);
  if (!sampling_) return;
  for (auto& row : sampling_->take_host_rows()) {
    writer_.add(std::move(row));
    ++host_rows_;
  }
}

bool Session::targets_done() {
  if (command_) return command_->poll_exit().has_value();
  if (opts_.all) return false;
  std::erase_if(live_, [](uint32_t pid) { return kill(pid_t(pid), 0) != 0 && errno == ESRCH; });
  return live_.empty();
}

void Session::progress(uint64_t now_ns) {
  if (opts_.quiet || !isatty(STDERR_FILENO) || now_ns - last_progress_ < 2'000'000'000ull) return;
  last_progress_ = now_ns;
  TracerCounters c = tracer_.counters();
  fprintf(stderr, "\reacgm: recording %.0f s, %llu calls, %llu dropped ",
          double(now_ns - start_mono_) / 1e9, (unsigned long long)decoder_.stats().calls,
          (unsigned long long)c.ring_drops);
  fflush(stderr);
}

int Session::run() {
  std::string target;
  if (std::string loader = own_dynamic_loader(); !loader.empty()) planner_.plan_loader(loader);
  if (!opts_.command.empty()) {
    command_ = std::make_unique<LaunchedCommand>(opts_.command);
    target = join(opts_.command, " ");
    tracer_.trace_pid(uint32_t(command_->pid()));
    if (python_) python_->plan_program(command_->program());
    const char* ldp = getenv("LD_LIBRARY_PATH");
    for (const auto& lib : candidate_libraries(probes_, ldp ? ldp : "")) planner_.plan_file(lib);
  } else if (opts_.all) {
    target = "--all";
    for (const auto& lib : candidate_libraries(probes_, "")) planner_.plan_file(lib);
  } else {
    check_pids_exist(opts_.pids);
    std::vector<std::string> names;
    for (uint32_t pid : opts_.pids) {
      names.push_back(std::to_string(pid));
      std::vector<uint32_t> all = descendants_of(pid);
      all.insert(all.begin(), pid);
      for (uint32_t p : all) {
        tracer_.trace_pid(p);
        decoder_.add_process(p, 0, clock_ns(CLOCK_MONOTONIC));
        dirty_.insert(p);
        live_.insert(p);
      }
    }
    target = "-p " + join(names, ",");
  }
  write_start_meta(target);
  if (has_layer("gpu")) start_gpu();
  plan_dirty();
  if (command_) {
    decoder_.expect_process(uint32_t(command_->pid()), uint32_t(getpid()));
    uint32_t child = uint32_t(command_->pid());
    command_->start([&] {
      if (auto maps = read_proc_maps(int(child))) symbols_.update_maps(child, *maps);
    });
  }
  // After the command's exec, so that the first sample names it by its program, not "eacgm";
  // the host counters count from the programs' attach, so nothing before is lost.
  if (host_ || gpu_)
    sampling_ = std::make_unique<SamplingThread>(host_.get(), gpu_.get(), opts_.interval_ms);
  if (!opts_.quiet)
    fprintf(stderr, "eacgm: recording %s to %s (Ctrl-C to stop)\n", target.c_str(),
            opts_.output.c_str());

  auto handler = [this](const void* d, size_t n) { decoder_.on_record(d, n); };
  uint64_t last_flush = clock_ns(CLOCK_MONOTONIC);
  uint64_t last_rescan = last_flush;
  uint64_t stop_deadline = 0;  // after a stop signal: how long the command may take to exit
  bool forwarded = false;
  for (;;) {
    // Events that need an answer (process lifecycle, new mappings, Python code objects) wake
    // this loop at once, calls when the ring fills; the timeout only paces the periodic work.
    // Every wakeup costs (about 45 us of CPU in a VM): 10 a second, and one at --duration's end.
    int timeout_ms = 100;
    if (opts_.duration_s > 0) {
      double elapsed_ms = double(clock_ns(CLOCK_MONOTONIC) - start_mono_) / 1e6;
      timeout_ms = std::clamp(int(opts_.duration_s * 1e3 - elapsed_ms) + 1, 1, timeout_ms);
    }
    tracer_.poll(timeout_ms, handler);
    uint64_t now = clock_ns(CLOCK_MONOTONIC);
    write_samples();
    if (!dirty_.empty()) plan_dirty();
    if (opts_.all && now - last_rescan > 2'000'000'000ull) {
      // --all has no mmap events (too many host-wide): look for new CUDA processes on a timer
      for (uint32_t p : descendants_of(1)) {
        planner_.plan_process(p);
        if (python_) python_->plan_process(p);
      }
      last_rescan = now;
    }
    if (writer_.pending() > 50'000 || now - last_flush >= 90'000'000ull) {
      writer_.flush();
      last_flush = now;
    }
    progress(now);
    if (!writer_.error().empty()) break;  // e.g. disk full: stop and keep what was written
    if (targets_done()) break;
    if (opts_.duration_s > 0 && double(now - start_mono_) / 1e9 >= opts_.duration_s) break;
    if (int sig = g_stop_signal.load()) {
      if (!command_) break;
      if (!forwarded) {
        // Ctrl-C reached the command too (same process group); SIGTERM/SIGHUP did not.
        if (sig != SIGINT) command_->send_signal(sig);
        forwarded = true;
        stop_deadline = now + 5'000'000'000ull;
      } else if (now > stop_deadline) {
        break;
      }
    }
  }
  drain();
  if (sampling_) sampling_->stop();  // with a last host sample of the partial interval
  if (gpu_) gpu_->stop();
  write_samples();
  std::optional<int> status = command_ ? command_->poll_exit() : std::nullopt;
  bool write_failed = !writer_.error().empty();
  finish(status);
  if (write_failed) {
    // Tracing failed, the job did not: it keeps running, untraced, rather than being killed.
    if (command_ && !status)
      fprintf(stderr, "eacgm: recording stopped; %s (pid %d) keeps running untraced\n",
              command_->program().c_str(), int(command_->pid()));
    return 1;
  }
  if (command_) {
    if (status) return exit_code_of_status(*status);
    return 128 + (g_stop_signal.load() ? g_stop_signal.load() : SIGTERM);
  }
  return 0;
}

void Session::finish(std::optional<int> exit_status) {
  if (!opts_.quiet && isatty(STDERR_FILENO) && last_progress_) fputc('\n', stderr);
  TracerCounters c = tracer_.counters();
  uint64_t end = clock_ns(CLOCK_MONOTONIC);
  writer_.set_meta("end_monotonic_ns", std::to_string(end));
  writer_.set_meta("events", std::to_string(decoder_.stats().calls));
  if (gpu_) {
    std::string lines;
    for (const auto& line : gpu_->unavailable()) {
      fprintf(stderr, "eacgm: %s\n", line.c_str());
      lines += (lines.empty() ? "" : "\n") + line;
    }
    writer_.set_meta("gpu_unavailable_metrics", lines);
    writer_.set_meta("gpus", std::to_string(gpu_->device_count()));
  }
  if (host_ || gpu_) writer_.set_meta("sample_interval_ms", fmt::format("{}", opts_.interval_ms));
  if (host_) {
    struct stat ns {};
    if (stat("/proc/self/ns/net", &ns) == 0)  // interfaces in other namespaces are named apart
      writer_.set_meta("netns", std::to_string(ns.st_ino));
    writer_.set_meta("host_samples", std::to_string(host_rows_));
  }
  if (python_) finish_python();
  writer_.set_meta("dropped_events", std::to_string(c.ring_drops));
  writer_.set_meta("unmatched_returns", std::to_string(c.entry_missing));
  writer_.set_meta("nesting_overflows", std::to_string(c.entry_overflow));
  writer_.set_meta("malformed_records", std::to_string(decoder_.stats().malformed));
  writer_.set_meta("probes", std::to_string(planner_.total_probes()));
  if (has_layer("comm")) {
    decoder_.finish_c10d();
    writer_.set_meta("c10d_incomplete", std::to_string(decoder_.stats().c10d_incomplete));
  }
  if (has_layer("torch")) {
    writer_.set_meta("torch_ops", join(opts_.torch_ops, ","));
    writer_.set_meta("torch_operators_probed", std::to_string(torch_ops_->size()));
  }
  rusage self{};
  getrusage(RUSAGE_SELF, &self);  // all of eacgm's threads: reader, decoder, writer
  double cpu = double(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
               double(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
  writer_.set_meta("recorder_cpu_seconds", fmt::format("{:.3f}", cpu));
  std::string files;
  for (const auto& f : planner_.probed_files()) files += (files.empty() ? "" : ";") + f.path;
  writer_.set_meta("probed_files", files);
  if (exit_status) writer_.set_meta("exit_status", std::to_string(exit_code_of_status(*exit_status)));
  if (int sig = g_stop_signal.load()) writer_.set_meta("stopped_by_signal", std::to_string(sig));
  std::string err = writer_.close();

  if (!err.empty()) fprintf(stderr, "eacgm: %s; the recording holds what was written before\n",
                            err.c_str());
  if (decoder_.stats().malformed)
    fprintf(stderr, "eacgm: warning: %llu records could not be decoded (BPF object and eacgm "
            "binary from different builds?)\n", (unsigned long long)decoder_.stats().malformed);
  if (c.ring_drops)
    fprintf(stderr, "eacgm: warning: %llu events were dropped because the ring buffer was full "
            "(raise --ring-mb)\n", (unsigned long long)c.ring_drops);
  for (const auto& f : planner_.probed_files())
    for (const auto& e : f.errors)
      fprintf(stderr, "eacgm: warning: could not probe %s in %s\n", e.c_str(), f.path.c_str());
  if (has_layer("torch") && torch_ops_->size() == 0)
    fprintf(stderr, "eacgm: layer torch: no PyTorch operators were found (no libtorch_cpu in the "
            "traced processes, or --torch-ops matched none)\n");
  if (has_layer("cuda") && decoder_.stats().calls == 0 && !planner_.found_in_target())
    fprintf(stderr, "eacgm: layer cuda: no CUDA runtime or driver library (libcudart, libcuda) "
            "was found in the traced processes; the recording holds the process tree only\n");
  if (!opts_.perfetto.empty()) {
    try {
      export_recording(opts_.output, opts_.perfetto, ExportFormat::Perfetto, opts_.force);
    } catch (const Error& e) {
      fprintf(stderr, "eacgm: %s (the recording %s is complete; retry with eacgm export)\n",
              e.what(), opts_.output.c_str());
    }
  }
  if (!opts_.quiet) {
    print_summary(opts_.output, stdout);
    fprintf(stdout, "recording: %s\n", opts_.output.c_str());
    if (!opts_.perfetto.empty())
      fprintf(stdout, "perfetto trace: %s (open in https://ui.perfetto.dev)\n",
              opts_.perfetto.c_str());
  }
}

}  // namespace

int run_record(const RecordOptions& options) {
  check_layers(options.layers);
  PythonFilter check_filter(options.python_filter);  // a bad pattern is a usage error, now
  int targets = (!options.command.empty()) + (!options.pids.empty()) + options.all;
  if (targets != 1)
    throw UsageError("say what to trace: -- COMMAND [ARGS], -p PID[,PID...], or --all");
  // Bad input first, before anything is created or loaded.
  if (!options.command.empty()) LaunchedCommand::check_program(options.command[0]);
  check_privileges();
  if (!options.perfetto.empty() && std::filesystem::exists(options.perfetto) && !options.force)
    throw UsageError(fmt::format(
        "output {} already exists (use --force to overwrite, or choose another --perfetto)",
        options.perfetto));
  install_signal_handlers();
  Session session(options);
  return session.run();
}

}  // namespace eacgm
