// The tracing pipeline: layers loaded and probed, events decoded into the sinks, samples taken,
// new processes and libraries followed, and the counters of a session.
#include "pipeline/pipeline.h"

#include <bpf/bpf.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "gpu/gpu_samples.h"  // monotonic_now_ns, realtime_now_ns
#include "probe/host_tracer.h"
#include "probe/library_finder.h"
#include "probe/proc_maps.h"
#include "probe/symbolizer.h"
#include "probe/target.h"
#include "python/python_decoder.h"
#include "python/python_layer.h"
#include "pipeline/decoder.h"
#include "pipeline/gpu_layer.h"
#include "pipeline/sampling.h"
#include "util/error.h"
#include "version.h"

namespace eacgm {
namespace {

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

ProbeSet probe_set(const LayerChoice& choice, std::shared_ptr<TorchOps> torch,
                   std::function<void(const std::string&)> use_torch_layout, bool duty_cycled) {
  ProbeSet set;
  if (choice.armed("cuda")) add_cuda_probes(set);
  if (choice.armed("comm")) {
    add_comm_probes(set);
    add_c10d_probes(set, std::move(use_torch_layout));
  }
  if (choice.armed("torch")) add_torch_probes(set, std::move(torch));
  if (choice.armed("gputime")) add_gputime_probes(set);
  set.duty_cycled = duty_cycled;
  return set;
}

}  // namespace

Pipeline::Pipeline(const TraceOptions& o, Sink& out)
    : opts_(o), choice_(LayerChoice::parse(o.layers, !o.python_calls.empty())), out_(out) {
  if (choice_.python_calls()) PythonFilter check(o.python_calls);  // a usage error, now
  CallTracerOptions tracer_options{o.all, o.ring_mb << 20, 256 * 1024, choice_.python_stacks(),
                                   o.python_stack_depth, o.sample_hz, o.off_cpu};
  bool python = tracer_options.python;
  try {
    tracer_ = std::make_unique<CallTracer>(tracer_options);
  } catch (const Error& e) {
    // The python layer's stack walk is the largest program: a kernel whose verifier refuses it
    // (6.18.44 refused a version of it) costs auto's Python stacks, not the recording. Asked
    // for by name, or with --python-calls, it is the error it was.
    if (!python || choice_.python_calls() || choice_.named.count("python")) throw;
    tracer_options.python = false;
    tracer_ = std::make_unique<CallTracer>(tracer_options);  // (the rest refused too: its error)
    python = false;
    std::string why = load_refusal(e.what());
    active_.off("python-stacks", why);
    if (!o.quiet) fprintf(stderr, "eacgm: layer python-stacks is off: %s\n", why.c_str());
  }
  symbols_ = std::make_unique<Symbolizer>();
  decoder_ = std::make_unique<EventDecoder>(out_, *symbols_);
  torch_ops_ = std::make_shared<TorchOps>(TorchOpFilter(o.torch_ops));
  planner_ = std::make_unique<ProbePlanner>(
      *tracer_,
      probe_set(
          choice_, torch_ops_, [this](const std::string& path) { use_torch_layout(path); },
          o.duty_cycled_calls));
  decoder_->set_torch_ops(torch_ops_);
  if (choice_.armed("host")) start_host();
  if (python) start_python();
  decoder_->on_code_mapped = [this](uint32_t pid) {
    // Snapshot the maps now, while the process surely runs (exec and dlopen wake the reader
    // at once): a short-lived process may be gone by the time its calls are decoded, and its
    // kernels can only be named through these maps. Probe planning can wait for the batch.
    if (auto maps = read_proc_maps(static_cast<int>(pid))) symbols_->update_maps(pid, *maps);
    dirty_.insert(pid);
    rescanned_.erase(pid);  // a new program (exec) maps its libraries now: young again
  };
  // the process maps an ML library: its Python gets stacks now (python_with_ml_only), and
  // its kernels names, without waiting for the --all rescan that a short job may not live to
  decoder_->on_first_call = decoder_->on_code_mapped;
  decoder_->on_process_named = [this](uint32_t pid, const std::string& name) {
    if (host_) host_->name_process(pid, name);
  };
  // What the injection library says: kept for the meta (a few lines); its problems said now
  // (where its CUPTI came from and its duty cycle are facts, not problems)
  decoder_->on_gpu_note = [this](uint32_t pid, const std::string& note) {
    std::string line = fmt::format("pid {}: {}", pid, note);
    if (std::count(gpu_notes_.begin(), gpu_notes_.end(), '\n') < 20)
      gpu_notes_ += (gpu_notes_.empty() ? "" : "\n") + line;
    if (!note.starts_with("CUPTI from") && !note.starts_with("GPU time on for") &&
        !note.starts_with("CUPTI detached and attached") && !opts_.quiet)
      fprintf(stderr, "eacgm: layer gputime: %s\n", line.c_str());
  };
  decoder_->on_process_exit = [this](uint32_t pid, int) {
    symbols_->forget(pid);
    if (python_) python_->forget(pid), python_decoder_->forget(pid);
    if (on_process_exit) on_process_exit(pid);
  };
  if (std::string loader = own_dynamic_loader(); !loader.empty()) planner_->plan_loader(loader);
}

Pipeline::~Pipeline() = default;

void Pipeline::start_host() {
  try {
    host_ = std::make_unique<HostTracer>(opts_.all ? -1 : tracer_->traced_map_fd(), opts_.all);
  } catch (const Error& e) {
    if (choice_.named.count("host")) throw;
    active_.off("host", e.what());  // auto: the other layers go on without it
    return;
  }
  active_.on("host", choice_.named.count("host") ? "asked for" : "always");
  std::string lines;
  for (const auto& m : host_->unavailable()) {
    if (!opts_.quiet) fprintf(stderr, "eacgm: layer host: %s is not recorded\n", m.c_str());
    lines += (lines.empty() ? "" : "\n") + m;
  }
  if (!lines.empty()) out_.set_meta("host_unavailable_metrics", lines);
}

void Pipeline::start_python() {
  python_ = std::make_unique<PythonLayer>(*tracer_, choice_.python_calls(), !opts_.python_no_hook);
  PythonLayer* layer = python_.get();
  python_decoder_ =
      std::make_unique<PythonDecoder>(out_, PythonFilter(choice_.python_calls() ? opts_.python_calls : "*"),
                                      [layer](const eacgm_py_code_key& key, uint32_t verdict) {
                                        layer->set_verdict(key, verdict);
                                      });
  python_decoder_->on_hook_request = [layer](const eacgm_py_hook_event& r) {
    layer->install_hook(r);
  };
  decoder_->set_python(python_decoder_.get());
}

void Pipeline::start_gpu() {
  // Only the traced processes' GPU use is kept: NVML reports host-wide pids, as the BPF side.
  int traced_fd = tracer_->traced_map_fd();
  std::function<bool(uint32_t)> keep;
  if (!opts_.all)
    keep = [traced_fd](uint32_t pid) {
      uint8_t v = 0;
      return bpf_map_lookup_elem(traced_fd, &pid, &v) == 0;
    };
  bool named = choice_.named.count("gpu") != 0;
  std::string why_not;
  gpu_ = GpuLayer::start(opts_.nvml_library, opts_.interval_ms, std::move(keep), opts_.quiet,
                         named ? nullptr : &why_not);
  if (gpu_) {
    out_.set_meta("nvml_library", gpu_->library_path());
    active_.on("gpu",
               fmt::format("{} GPU(s) through {}", gpu_->device_count(), gpu_->library_path()));
  } else {
    active_.off("gpu", why_not);
  }
}

void Pipeline::expect_command(uint32_t pid, const std::string& program,
                              const std::string& gputime_library) {
  tracer_->trace_pid(pid);
  if (python_) python_->plan_program(program);
  const char* ldp = getenv("LD_LIBRARY_PATH");
  for (const auto& lib : candidate_libraries(planner_->probes(), ldp ? ldp : ""))
    planner_->plan_file(lib);
  // the injection library the command will load (record wrote it): probed before it runs, so
  // that its first batch (at CUDA's start) is not missed
  if (!gputime_library.empty() && choice_.armed("gputime")) planner_->plan_file(gputime_library);
  decoder_->expect_process(pid, uint32_t(getpid()));
}

void Pipeline::expect_all() {
  for (const auto& lib : candidate_libraries(planner_->probes(), "")) planner_->plan_file(lib);
}

std::vector<uint32_t> Pipeline::attach_process(uint32_t pid) {
  std::vector<uint32_t> all = descendants_of(pid);
  all.insert(all.begin(), pid);
  for (uint32_t p : all) {
    tracer_->trace_pid(p);
    decoder_->add_process(p, 0, monotonic_now_ns());
    dirty_.insert(p);
  }
  return all;
}

// CPU time (user + system) of all of eacgm's threads so far: reader, decoder, writer, and the
// kernel's verifier at load.
double Pipeline::own_cpu_seconds() {
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  return double(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
         double(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
}

void Pipeline::start(const std::string& target) {
  start_mono_ = monotonic_now_ns();
  // the two clocks read together (merge lines hosts up by this; a write between the reads once
  // put it 0.3 ms off)
  int64_t to_real = realtime_minus_monotonic_ns();
  // before the recording: mostly the kernel verifying the BPF programs (seconds, once), which a
  // per-second figure of the recorder's cost must leave out
  out_.set_meta("recorder_start_cpu_seconds", fmt::format("{:.3f}", own_cpu_seconds()));
  out_.set_meta("eacgm_version", EACGM_VERSION);
  out_.set_meta("hostname", hostname());
  out_.set_meta("start_realtime_ns", std::to_string(int64_t(start_mono_) + to_real));
  out_.set_meta("start_monotonic_ns", std::to_string(start_mono_));
  out_.set_meta("monotonic_to_realtime_ns", std::to_string(to_real));
  out_.set_meta("command", target);
  out_.set_meta("layers", choice_.text());
  out_.set_meta("recording_state", "recording");  // "complete" once finish() ran
  out_.set_meta("end_monotonic_ns", std::to_string(start_mono_));
  out_.set_meta("events", "0");
  out_.set_meta("dropped_events", "0");
  out_.set_meta("duration_note",
                "cuda durations are host-side API times (enqueue time for async calls), "
                "not GPU execution times");
  if (opts_.sample_hz) {
    std::string why = tracer_->start_sampling();
    if (why.empty()) {
      out_.set_meta("sample_hz", std::to_string(opts_.sample_hz));
    } else {
      out_.set_meta("profile_off", why);
      if (!opts_.quiet) fprintf(stderr, "eacgm: CPU profile off: %s\n", why.c_str());
    }
    if (opts_.off_cpu) {
      if (std::string off = tracer_->start_off_cpu(); !off.empty()) {
        out_.set_meta("offcpu_profile_off", off);
        if (!opts_.quiet) fprintf(stderr, "eacgm: off-CPU profile off: %s\n", off.c_str());
      }
    }
  }
  out_.flush();
  if (choice_.armed("gpu")) start_gpu();
  plan_dirty();
  last_flush_ = last_rescan_ = last_progress_meta_ = monotonic_now_ns();
}

void Pipeline::command_exec(uint32_t pid) {
  if (auto maps = read_proc_maps(int(pid))) symbols_->update_maps(pid, *maps);
  // the call layers' probes only: its libraries are not mapped yet (the loader has not run),
  // so the python layer waits for them (the exec event plans the process again)
  plan_process(pid, false);
}

void Pipeline::start_sampling() {
  // the host counters count from the programs' attach, so nothing before is lost
  if (host_ || gpu_)
    sampling_ = std::make_unique<SamplingThread>(host_.get(), gpu_.get(), opts_.interval_ms);
}

// c10d's bytes, ranks and sizes are read through PyTorch's own structures, whose layout is
// known per version: say once when a libtorch's is not.
void Pipeline::use_torch_layout(const std::string& path) {
  std::string version;
  auto layout = torch_layout_for(path, &version);
  if (layout) {
    if (torch_layout_ == layout->version) return;
    torch_layout_ = layout->version;
    tracer_->set_torch_layout(*layout);
    out_.set_meta("torch_version", version);
  } else if (warned_layouts_.insert(version).second) {
    fprintf(stderr,
            "eacgm: layer comm: PyTorch %s (%s) is a version whose tensor layout eacgm "
            "does not know: c10d calls are traced with their durations, but without bytes, "
            "rank and world size\n",
            version.empty() ? "of unknown version" : version.c_str(), path.c_str());
  }
}

// Probes what the process maps, and notes which layers that turns on and why.
void Pipeline::plan_process(uint32_t pid, bool python) {
  std::vector<const ProbedFile*> mapped;
  planner_->plan_process(pid, &mapped);
  bool ml = false;
  for (const ProbedFile* f : mapped)
    for (const std::string& layer : f->layers) {
      active_.on(layer, fmt::format("{}, pid {}",
                                    std::filesystem::path(f->path).filename().string(), pid));
      ml |= layer == "cuda" || layer == "comm" || layer == "torch";
    }
  if (!python || !python_ || (opts_.python_with_ml_only && !ml))
    return;  // (planned again at its dlopen)
  if (const CPythonBuild* b = python_->plan_process(pid))
    active_.on(choice_.python_calls() ? "python" : "python-stacks",
               fmt::format("CPython {} in {}, pid {}", b->version(),
                           std::filesystem::path(b->path).filename().string(), pid));
}

void Pipeline::note_layers_of_calls() {
  // A process that maps a library and exits before its maps are read (a dlopen, a few calls,
  // exit) is only known by its calls: they say the layer was used, and through which file.
  for (const auto& [layer, first] : decoder_->first_calls())
    if (!active_.is_on(layer))
      if (const ProbedFile* f = planner_->file_of_op(first.op))
        active_.on(layer,
                   fmt::format("{}, pid {}", std::filesystem::path(f->path).filename().string(),
                               first.pid));
}

void Pipeline::plan_dirty() {
  for (uint32_t pid : dirty_) plan_process(pid);
  dirty_.clear();
}

void Pipeline::drain() {
  auto handler = [this](const void* d, size_t n) { decoder_->on_record(d, n); };
  // Until the ring is empty; bounded so a target that keeps producing cannot hold us forever.
  for (int i = 0; i < 64 && tracer_->poll(0, handler) > 0; ++i) {
  }
}

// What the sampling thread gathered goes to the sinks here (they are this thread's).
void Pipeline::write_samples() {
  if (gpu_) gpu_->drain(out_);
  if (!sampling_) return;
  for (auto& row : sampling_->take_host_rows()) {
    out_.add(row);
    ++host_rows_;
  }
}

void Pipeline::step(int timeout_ms) {
  tracer_->poll(timeout_ms, [this](const void* d, size_t n) { decoder_->on_record(d, n); });
  uint64_t now = monotonic_now_ns();
  write_samples();
  if (!dirty_.empty()) plan_dirty();
  bool no_hook = !opts_.all && !planner_->loader_error().empty();
  if (no_hook && !warned_loader_) {
    if (!opts_.quiet)
      fprintf(stderr,
              "eacgm: the dynamic loader's hook could not be attached (%s): libraries a "
              "process loads later are found within 2 s instead of at once\n",
              planner_->loader_error().c_str());
    warned_loader_ = true;
  }
  if ((opts_.all || no_hook) && now - last_rescan_ > 2'000'000'000ull) {
    // --all has no mmap events (too many host-wide): look for new processes on a timer; so
    // does a recording whose loader hook could not be attached, for its own processes
    rescan(now);
    last_rescan_ = now;
  }
  uint64_t rows = calls();
  if (now - last_progress_meta_ >= 1'000'000'000ull) {
    // A recorder killed outright (SIGKILL, OOM) leaves no finish(): the recording says how far
    // it got and what it had dropped, as of the last second (recording_state "recording").
    TracerCounters c = tracer_->counters();
    out_.set_meta("end_monotonic_ns", std::to_string(now));
    out_.set_meta("events", std::to_string(calls()));  // the python layer's too
    out_.set_meta("dropped_events", std::to_string(c.ring_drops));
    last_progress_meta_ = now;
  }
  if (rows - calls_at_flush_ > 50'000 || now - last_flush_ >= 90'000'000ull) {
    out_.flush();
    last_flush_ = now;
    calls_at_flush_ = rows;
  }
}

// Under --all (the agent), plans new processes at once and young ones at each rescan (a job
// maps its libraries in its first seconds: an import of torch, CUDA's first call); one older
// than a minute only every 16 s. Each plan reads the process's maps: a PyTorch job has ~1,700
// mappings, and rereading every process's every 2 s was a tenth of the agent's pipeline thread
// beside a training (session 59). A library an old process loads later is found within 16 s, or at its first
// traced call where another process's plan probed it already. A recording without the
// loader's hook rescans only its own processes, each every 2 s, as its warning promises.
void Pipeline::rescan(uint64_t now_ns) {
  constexpr uint64_t kYoungNs = 60'000'000'000ull, kOldEveryNs = 16'000'000'000ull;
  std::vector<uint32_t> pids = opts_.all ? descendants_of(1) : tracer_->traced_pids();
  std::unordered_map<uint32_t, Rescanned> seen;
  seen.reserve(pids.size());
  for (uint32_t p : pids) {
    Rescanned r{now_ns, 0};
    if (auto it = rescanned_.find(p); it != rescanned_.end()) r = it->second;
    if (!opts_.all || now_ns - r.first_seen_ns < kYoungNs ||
        now_ns - r.planned_ns >= kOldEveryNs) {
      plan_process(p);
      r.planned_ns = now_ns;
    }
    seen.emplace(p, r);
  }
  rescanned_ = std::move(seen);  // (a pid that went is forgotten: a new process may reuse it)
}

void Pipeline::stop() {
  drain();
  if (sampling_) sampling_->stop();  // with a last host sample of the partial interval
  if (gpu_) gpu_->stop();
  write_samples();
}

uint64_t Pipeline::calls() const {
  return decoder_->stats().calls + (python_decoder_ ? python_decoder_->stats().calls : 0);
}

size_t Pipeline::probes() const { return planner_->total_probes(); }

TracerCounters Pipeline::counters() const { return tracer_->counters(); }

void Pipeline::finish_python() {
  // The job may outlive the recording (-p, --duration): give it back its inlined calls.
  int restored = python_->restore_hooks();
  const PythonDecoderStats& s = python_decoder_->stats();
  out_.set_meta("python_filter", choice_.python_calls() ? opts_.python_calls : "(stacks only)");
  out_.set_meta("python_interpreters", join(python_->interpreters(), ";"));
  out_.set_meta("python_calls", std::to_string(s.calls));
  out_.set_meta("python_code_objects", std::to_string(s.code_objects));
  out_.set_meta("python_calls_pending", std::to_string(s.pending));
  out_.set_meta("python_stacks_reused", std::to_string(tracer_->counters().py_stacks_reused));
  out_.set_meta("python_calls_filtered", std::to_string(s.filtered));
  out_.set_meta("python_calls_unnamed", std::to_string(s.unnamed));
  out_.set_meta("python_hooks_restored", std::to_string(restored));
  out_.set_meta("python_hook", opts_.python_no_hook || !choice_.python_calls() ? "off" : "on");
  std::string lines;
  for (const auto& w : python_->warnings()) {
    fprintf(stderr, "eacgm: %s\n", w.c_str());
    lines += (lines.empty() ? "" : "\n") + w;
  }
  out_.set_meta("python_warnings", lines);
  if (choice_.python_calls() && python_->interpreters().empty() && lines.empty())
    fprintf(stderr,
            "eacgm: layer python: no CPython interpreter was found in the traced "
            "processes\n");
}

void Pipeline::finish() {
  TracerCounters c = tracer_->counters();
  out_.set_meta("end_monotonic_ns", std::to_string(monotonic_now_ns()));
  out_.set_meta("events", std::to_string(calls()));  // the python layer's too
  out_.set_meta("recording_state", "complete");
  if (opts_.sample_hz) out_.set_meta("cpu_samples", std::to_string(decoder_->stats().samples));
  if (opts_.sample_hz && opts_.off_cpu) {
    out_.set_meta("offcpu_samples", std::to_string(decoder_->stats().offcpu_samples));
    // waits not in the profile because the kernel would not make a thread's storage then
    out_.set_meta("offcpu_waits_lost", std::to_string(c.offcpu_lost));
    // blocking switches whose native stack was their thread's last one, not walked again
    out_.set_meta("offcpu_stacks_reused", std::to_string(c.offcpu_stacks_reused));
  }
  if (gpu_) {
    std::string lines;
    for (const auto& line : gpu_->unavailable()) {
      fprintf(stderr, "eacgm: %s\n", line.c_str());
      lines += (lines.empty() ? "" : "\n") + line;
    }
    out_.set_meta("gpu_unavailable_metrics", lines);
    out_.set_meta("gpus", std::to_string(gpu_->device_count()));
  }
  if (host_ || gpu_) out_.set_meta("sample_interval_ms", fmt::format("{}", opts_.interval_ms));
  if (host_) {
    struct stat ns {};
    if (stat("/proc/self/ns/net", &ns) == 0)  // interfaces in other namespaces are named apart
      out_.set_meta("netns", std::to_string(ns.st_ino));
    out_.set_meta("host_samples", std::to_string(host_rows_));
    out_.set_meta("host_cpu_scan", host_->scan_kind());
  }
  if (python_) finish_python();
  out_.set_meta("dropped_events", std::to_string(c.ring_drops));
  out_.set_meta("unmatched_returns", std::to_string(c.entry_missing));
  out_.set_meta("nesting_overflows", std::to_string(c.entry_overflow));
  out_.set_meta("malformed_records", std::to_string(decoder_->stats().malformed));
  out_.set_meta("probes", std::to_string(planner_->total_probes()));
  if (choice_.armed("comm")) {
    decoder_->finish_c10d();
    out_.set_meta("c10d_incomplete", std::to_string(decoder_->stats().c10d_incomplete));
  }
  if (choice_.armed("gputime")) {
    const DecoderStats& d = decoder_->stats();
    out_.set_meta("gpu_activity_rows", std::to_string(d.gpu_activity));
    out_.set_meta("gpu_collective_rows", std::to_string(d.gpu_collectives));
    if (d.gpu_slices) out_.set_meta("gpu_time_slices", std::to_string(d.gpu_slices));
    if (d.gpu_dropped) out_.set_meta("gpu_activity_dropped", std::to_string(d.gpu_dropped));
    if (d.gpu_off_clock) out_.set_meta("gpu_activity_off_clock", std::to_string(d.gpu_off_clock));
    if (!gpu_notes_.empty()) out_.set_meta("gputime_notes", gpu_notes_);
  }
  if (choice_.armed("torch")) {
    out_.set_meta("torch_ops", join(opts_.torch_ops, ","));
    out_.set_meta("torch_operators_probed", std::to_string(torch_ops_->size()));
  }
  if (choice_.automatic) {
    note_layers_of_calls();
    out_.set_meta("layers_requested", choice_.text());
    out_.set_meta("layers", active_.names());
    out_.set_meta("layers_why", active_.describe(choice_));
  }
  out_.set_meta("recorder_cpu_seconds", fmt::format("{:.3f}", own_cpu_seconds()));
  std::string files;
  for (const auto& f : planner_->probed_files()) files += (files.empty() ? "" : ";") + f.path;
  out_.set_meta("probed_files", files);
  finish_warnings();
}

void Pipeline::finish_warnings() {
  TracerCounters c = tracer_->counters();
  if (decoder_->stats().malformed)
    fprintf(stderr,
            "eacgm: warning: %llu records could not be decoded (BPF object and eacgm "
            "binary from different builds?)\n",
            (unsigned long long)decoder_->stats().malformed);
  if (c.ring_drops)
    fprintf(stderr,
            "eacgm: warning: %llu events were dropped because the ring buffer was full "
            "(raise --ring-mb)\n",
            (unsigned long long)c.ring_drops);
  for (const auto& f : planner_->probed_files())
    for (const auto& e : f.errors)
      fprintf(stderr, "eacgm: warning: could not probe %s in %s\n", e.c_str(), f.path.c_str());
  if (decoder_->stats().gpu_dropped)
    fprintf(stderr,
            "eacgm: layer gputime: CUPTI dropped %llu records (its buffers were full): GPU time "
            "is missing for some kernels\n",
            (unsigned long long)decoder_->stats().gpu_dropped);
  if (decoder_->stats().gpu_off_clock)
    fprintf(stderr,
            "eacgm: layer gputime: %llu records were not on the recording's clock (a CUPTI "
            "without the timestamp callback) and were left out\n",
            (unsigned long long)decoder_->stats().gpu_off_clock);
  if (choice_.named.count("torch") && torch_ops_->size() == 0)
    fprintf(stderr,
            "eacgm: layer torch: no PyTorch operators were found (no libtorch_cpu in the "
            "traced processes, or --torch-ops matched none)\n");
  if (choice_.named.count("cuda") && decoder_->stats().calls == 0 && !planner_->found_in_target())
    fprintf(stderr,
            "eacgm: layer cuda: no CUDA runtime or driver library (libcudart, libcuda) "
            "was found in the traced processes; the recording holds the process tree only\n");
  if (choice_.automatic && !opts_.quiet)
    fprintf(stderr, "eacgm: %s\n", active_.describe(choice_).c_str());
}

}  // namespace eacgm
