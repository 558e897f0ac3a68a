// Calls, samples and the agent's own state as Prometheus metrics.
#include "export/metrics.h"

#include <unistd.h>

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cmath>

#include "export/kernel_name.h"
#include "report/collectives.h"

namespace eacgm {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// 1 us to about 16 s, x4 per bucket: API calls, operators and collectives alike.
const prometheus::Histogram::BucketBoundaries& duration_buckets() {
  static const prometheus::Histogram::BucketBoundaries b = [] {
    prometheus::Histogram::BucketBoundaries v;
    for (double s = 1e-6; s < 20; s *= 4) v.push_back(s);
    return v;
  }();
  return b;
}

// Names a tally of one set of process labels holds before its choice: a job that runs more
// distinct kernels than this cannot grow it (later names can still take a slot left over).
constexpr size_t kKernelTallyNames = 4096;

}  // namespace

MetricsSink::MetricsSink(std::string hostname)
    : hostname_(std::move(hostname)),
      registry_(std::make_shared<prometheus::Registry>()),
      calls_(BuildCounter()
                 .Name("eacgm_calls_total")
                 .Help("Traced calls completed, by layer, operation and process name (with "
                       "--call-duty, those made while their probes were on: see "
                       "eacgm_call_duty_ratio)")
                 .Register(*registry_)),
      errors_(BuildCounter()
                  .Name("eacgm_call_errors_total")
                  .Help("Traced calls that returned an error (CUDA/NCCL status not 0, a c10d "
                        "collective that failed)")
                  .Register(*registry_)),
      bytes_(BuildCounter()
                 .Name("eacgm_call_bytes_total")
                 .Help("Bytes the traced calls moved or allocated (memcpy, malloc, collectives)")
                 .Register(*registry_)),
      seconds_(BuildHistogram()
                   .Name("eacgm_call_duration_seconds")
                   .Help("Duration of traced calls (host side: enqueue time for async CUDA/NCCL "
                         "calls; c10d collectives until they completed)")
                   .Register(*registry_)),
      runq_(BuildCounter()
                .Name("eacgm_process_runqueue_wait_seconds_total")
                .Help("Time the traced process's threads waited for a CPU")
                .Register(*registry_)),
      cpu_(BuildCounter()
               .Name("eacgm_process_cpu_seconds_total")
               .Help("CPU time of the traced process's threads")
               .Register(*registry_)),
      involuntary_(BuildCounter()
                       .Name("eacgm_process_involuntary_switches_total")
                       .Help("Times the traced process's threads were preempted")
                       .Register(*registry_)),
      retransmits_(BuildCounter()
                       .Name("eacgm_process_tcp_retransmits_total")
                       .Help("TCP segments the traced process sent again")
                       .Register(*registry_)),
      reclaim_(BuildCounter()
                   .Name("eacgm_process_reclaim_seconds_total")
                   .Help("Time the traced process stalled in direct memory reclaim")
                   .Register(*registry_)),
      stall_(BuildCounter()
                 .Name("eacgm_process_cpu_stall_seconds_total")
                 .Help("Time the CPU under one of the traced process's running threads stopped "
                       "(a vCPU its hypervisor did not run, or interrupts kept off)")
                 .Register(*registry_)),
      node_stall_seconds_(BuildCounter()
                              .Name("eacgm_cpu_stall_seconds_total")
                              .Help("Time a CPU of this node stopped, by CPU: a vCPU its "
                                    "hypervisor did not run (steal, which a guest without steal "
                                    "accounting never sees) or interrupts kept off, read from its "
                                    "scheduler tick firing 2 ms or more late")
                              .Register(*registry_)),
      node_stalls_(BuildCounter()
                       .Name("eacgm_cpu_stalls_total")
                       .Help("Stops of a CPU of this node (eacgm_cpu_stall_seconds_total), by CPU")
                       .Register(*registry_)),
      gpu_kernel_seconds_(BuildCounter()
                              .Name("eacgm_gpu_kernel_seconds_total")
                              .Help("Time the traced process's kernels ran on the GPU, by CUDA "
                                    "device (gputime layer: CUPTI)")
                              .Register(*registry_)),
      gpu_kernels_(BuildCounter()
                       .Name("eacgm_gpu_kernels_total")
                       .Help("Kernels of the traced process that ran on the GPU, by CUDA device "
                             "(gputime layer: CUPTI)")
                       .Register(*registry_)),
      collective_gpu_seconds_(BuildCounter()
                                  .Name("eacgm_collective_gpu_seconds_total")
                                  .Help("Time the traced process's NCCL operations ran on the "
                                        "GPU, by operation and rank (gputime layer: NCCL's "
                                        "profiler plugin)")
                                  .Register(*registry_)),
      collectives_on_gpu_(BuildCounter()
                              .Name("eacgm_collectives_on_gpu_total")
                              .Help("NCCL operations of the traced process timed on the GPU, by "
                                    "operation and rank (gputime layer)")
                              .Register(*registry_)),
      gpu_util_(BuildGauge()
                    .Name("DCGM_FI_DEV_GPU_UTIL")
                    .Help("GPU utilization (in %).")
                    .Register(*registry_)),
      fb_used_(BuildGauge()
                   .Name("DCGM_FI_DEV_FB_USED")
                   .Help("Framebuffer memory used (in MiB).")
                   .Register(*registry_)),
      power_(BuildGauge()
                 .Name("DCGM_FI_DEV_POWER_USAGE")
                 .Help("Power draw (in W).")
                 .Register(*registry_)),
      temp_(BuildGauge()
                .Name("DCGM_FI_DEV_GPU_TEMP")
                .Help("GPU temperature (in C).")
                .Register(*registry_)),
      sm_clock_(BuildGauge()
                    .Name("DCGM_FI_DEV_SM_CLOCK")
                    .Help("SM clock frequency (in MHz).")
                    .Register(*registry_)),
      mem_clock_(BuildGauge()
                     .Name("DCGM_FI_DEV_MEM_CLOCK")
                     .Help("Memory clock frequency (in MHz).")
                     .Register(*registry_)),
      xid_(BuildGauge()
               .Name("DCGM_FI_DEV_XID_ERRORS")
               .Help("Value of the last XID error encountered.")
               .Register(*registry_)),
      throttle_(BuildGauge()
                    .Name("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
                    .Help("Current clock throttle reasons (bitmask of NVML's "
                          "nvmlClocksEventReasons: 1 idle, 2 application clocks, 4 software "
                          "power cap, 8 hardware slowdown, 32 software thermal, 64 hardware "
                          "thermal, 128 power brake).")
                    .Register(*registry_)),
      agent_events_(BuildCounter()
                        .Name("eacgm_agent_events_total")
                        .Help("Events the agent decoded")
                        .Register(*registry_)),
      agent_dropped_(BuildCounter()
                         .Name("eacgm_agent_dropped_events_total")
                         .Help("Events lost because the ring buffer was full")
                         .Register(*registry_)),
      agent_probes_(BuildGauge()
                        .Name("eacgm_agent_probes")
                        .Help("Probe points attached")
                        .Register(*registry_)),
      agent_processes_(BuildGauge()
                           .Name("eacgm_agent_traced_processes")
                           .Help("Processes the agent traces now")
                           .Register(*registry_)),
      agent_cpu_(BuildCounter()
                     .Name("eacgm_agent_cpu_seconds_total")
                     .Help("CPU time of the agent, all its threads")
                     .Register(*registry_)),
      agent_rss_(BuildGauge()
                     .Name("eacgm_agent_resident_memory_bytes")
                     .Help("Resident memory of the agent")
                     .Register(*registry_)),
      call_duty_(BuildGauge()
                     .Name("eacgm_call_duty_ratio")
                     .Help("Share of the time the layer's hot probes are on (the agent's "
                           "--call-duty; 1: always): its calls counted, timed and modelled are "
                           "those made meanwhile, a sample of all")
                     .Register(*registry_)),
      peer_wait_(BuildCounter()
                     .Name("eacgm_collective_peer_wait_seconds_total")
                     .Help("Time a rank's collectives waited for the last rank on this node to "
                           "join the same instance, by job, rank and collective")
                     .Register(*registry_)),
      last_joined_(BuildCounter()
                       .Name("eacgm_collective_last_joined_total")
                       .Help("Collective instances this rank joined last of the ranks on this "
                             "node")
                       .Register(*registry_)),
      straggling_(BuildCounter()
                      .Name("eacgm_collective_straggling_seconds_total")
                      .Help("Time this rank made the first of its peers on this node wait, in "
                            "the instances it joined last: the straggler's share")
                      .Register(*registry_)),
      bus_bytes_(BuildCounter()
                     .Name("eacgm_collective_bus_bytes_total")
                     .Help("NCCL collectives' bus bytes (nccl-tests' busbw times the host-side "
                           "duration): rate() of it over rate() of "
                           "eacgm_call_duration_seconds_sum is the bus bandwidth")
                     .Register(*registry_)),
      anomalies_(BuildCounter()
                     .Name("eacgm_anomalies_total")
                     .Help("Anomalies the online detector found, by layer (window: the traced "
                           "processes' resources and activity together) and probable cause")
                     .Register(*registry_)),
      model_score_(BuildGauge()
                       .Name("eacgm_detector_last_score")
                       .Help("Log-density of the last sample scored by a model (lower is more "
                             "unusual; below the threshold is an anomaly)")
                       .Register(*registry_)),
      model_threshold_(BuildGauge()
                           .Name("eacgm_detector_threshold")
                           .Help("A model's threshold on the log-density")
                           .Register(*registry_)),
      models_(BuildGauge()
                  .Name("eacgm_detector_models")
                  .Help("Models the online detector has fitted (operations and the window)")
                  .Register(*registry_)),
      dismissed_(BuildCounter()
                     .Name("eacgm_detector_dismissed_total")
                     .Help("What the online detector scored as unusual and did not report: "
                           "call candidates no burst of their kind carried (reason no_burst), "
                           "anomalous windows alone, no run of them (lone_window), windows of "
                           "a slowdown under 15 s with nothing on the node to blame "
                           "(brief_slowdown)")
                     .Register(*registry_)) {
  for (const char* reason : {"no_burst", "lone_window", "brief_slowdown"})
    dismissed_.Add({{"reason", reason}});
  // every CPU's stop counters at 0 from the start (a CPU that stops later raises them)
  long cpus = sysconf(_SC_NPROCESSORS_CONF);
  for (long c = 0; c < cpus; ++c) {
    prometheus::Labels cpu{{"cpu", std::to_string(c)}};
    node_stall_seconds_.Add(cpu);
    node_stalls_.Add(cpu);
  }
}

const std::string& MetricsSink::process_name(uint32_t pid) const {
  static const std::string unknown = "unknown";
  auto it = process_names_.find(pid);
  return it == process_names_.end() ? unknown : it->second;
}

prometheus::Labels MetricsSink::process_labels(uint32_t pid, bool with_pid) {
  prometheus::Labels labels{{"process", process_name(pid)}};
  if (with_pid) labels["pid"] = std::to_string(pid);
  auto it = identities_.find(pid);
  auto gone = gone_.find(pid);
  if (it == identities_.end() && gone == gone_.end())
    it = identities_.emplace(pid, identify ? identify(pid) : JobIdentity{}).first;
  const JobIdentity& identity = it != identities_.end() ? it->second : gone->second.identity;
  for (auto& [k, v] : identity.labels())
    if (!v.empty()) labels[k] = v;
  return labels;
}

template <class T>
T& MetricsSink::track(prometheus::Family<T>& family, T& series, uint32_t pid,
                      std::function<void()> on_remove) {
  auto [it, fresh] = tracked_.try_emplace(&series);
  Tracked& t = it->second;
  if (fresh)
    t.remove = [&family, s = &series, then = std::move(on_remove)] {
      family.Remove(s);
      if (then) then();
    };
  if (gone_.contains(pid)) return series;  // counted, but not kept open by a dead pid
  if (t.pids.insert(pid).second) {
    t.idle_since_ns.reset();
    tracked_by_pid_[pid].push_back(&series);
  }
  return series;
}

void MetricsSink::release(uint32_t pid) {
  auto it = tracked_by_pid_.find(pid);
  if (it == tracked_by_pid_.end()) return;
  for (const void* s : it->second)
    if (auto t = tracked_.find(s); t != tracked_.end()) t->second.pids.erase(pid);
  tracked_by_pid_.erase(it);
}

void MetricsSink::expire_series(uint64_t now_ns, uint64_t linger_ns) {
  for (auto it = gone_.begin(); it != gone_.end();) {
    if (!it->second.since_ns) it->second.since_ns = now_ns;
    if (now_ns - *it->second.since_ns >= linger_ns)
      it = gone_.erase(it);
    else
      ++it;
  }
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    Tracked& t = it->second;
    if (!t.pids.empty()) {
      ++it;
      continue;
    }
    if (!t.idle_since_ns) t.idle_since_ns = now_ns;
    if (now_ns - *t.idle_since_ns < linger_ns) {
      ++it;
      continue;
    }
    t.remove();
    it = tracked_.erase(it);
  }
}

MetricsSink::CallMetrics& MetricsSink::call_metrics(const char* layer, std::string_view op,
                                                    uint32_t pid) {
  auto& by_op = calls_by_pid_[pid];
  auto it = by_op.find(op.data());
  if (it != by_op.end()) return it->second;
  prometheus::Labels labels = process_labels(pid, false);
  labels["layer"] = layer;
  labels["op"] = std::string(op);
  CallMetrics m{&track(calls_, calls_.Add(labels), pid), &track(errors_, errors_.Add(labels), pid),
                &track(bytes_, bytes_.Add(labels), pid),
                &track(seconds_, seconds_.Add(labels, duration_buckets()), pid)};
  return by_op.emplace(op.data(), m).first->second;
}

void MetricsSink::count_call(const char* layer, std::string_view op, uint32_t pid, uint64_t dur_ns,
                             bool failed, int64_t bytes) {
  CallMetrics& m = call_metrics(layer, op, pid);
  m.calls->Increment();
  if (failed) m.errors->Increment();
  if (bytes > 0) m.bytes->Increment(double(bytes));
  m.seconds->Observe(double(dur_ns) / 1e9);
}

void MetricsSink::add(const CudaCallRow& r) {
  count_call("cuda", r.name, r.pid, r.dur_ns, r.ret != 0, r.bytes);
}

void MetricsSink::add(const CommCallRow& r) {
  count_call("comm", r.name, r.pid, r.dur_ns, r.ret != 0, r.bytes);
  if (r.busbw_gbps > 0) {
    prometheus::Labels labels = process_labels(r.pid, false);
    labels["op"] = std::string(r.name);
    if (r.rank >= 0) labels["rank"] = std::to_string(r.rank);
    track(bus_bytes_, bus_bytes_.Add(labels), r.pid)
        .Increment(r.busbw_gbps * 1e9 * double(r.dur_ns) / 1e9);
  }
}

// GPU time, per process and CUDA device, and with --gpu-kernel-names per kernel name among a
// bounded few (kernel_label()); no launches.
void MetricsSink::add(const GpuActivityRow& r) {
  if (r.kind != "kernel") return;
  const prometheus::Labels process = process_labels(r.pid, false);
  prometheus::Labels labels = process;
  labels["device"] = std::to_string(r.device);
  if (kernel_names_ > 0) labels["kernel"] = kernel_label(process, r.name, r.ts_ns, r.dur_ns);
  kernel_series(gpu_kernel_seconds_, labels, process, r.pid).Increment(double(r.dur_ns) / 1e9);
  kernel_series(gpu_kernels_, labels, process, r.pid).Increment();
}

std::string MetricsSink::kernel_label(const prometheus::Labels& process, std::string_view name,
                                      uint64_t ts_ns, uint64_t dur_ns) {
  auto [it, fresh] = kernel_choices_.try_emplace(process);
  KernelChoice& c = it->second;
  if (fresh) c.first_ts_ns = ts_ns;
  std::string kernel = short_kernel_name(name);
  if (!c.chosen) {
    if (c.gpu_ns.size() < kKernelTallyNames || c.gpu_ns.contains(kernel))
      c.gpu_ns[kernel] += dur_ns;
    // the choice: the K with the most time (ties by name: the same run chooses the same)
    if (ts_ns >= c.first_ts_ns + kernel_choice_ns_) {
      std::vector<std::pair<std::string, uint64_t>> by_time(c.gpu_ns.begin(), c.gpu_ns.end());
      size_t k = std::min(kernel_names_, by_time.size());
      std::partial_sort(by_time.begin(), by_time.begin() + ptrdiff_t(k), by_time.end(),
                        [](const auto& a, const auto& b) {
                          return a.second != b.second ? a.second > b.second : a.first < b.first;
                        });
      for (size_t i = 0; i < k; ++i) c.named.insert(by_time[i].first);
      c.gpu_ns = {};  // from now on the names chosen are all it needs
      c.chosen = true;
    }
  }
  if (c.named.contains(kernel)) return kernel;
  if (c.chosen && c.named.size() < kernel_names_) return *c.named.insert(kernel).first;
  return "other";
}

// The kernel counters' series; with kernel names, each new one holds its choice open.
prometheus::Counter& MetricsSink::kernel_series(prometheus::Family<prometheus::Counter>& family,
                                                const prometheus::Labels& labels,
                                                const prometheus::Labels& process, uint32_t pid) {
  prometheus::Counter& series = family.Add(labels);
  if (kernel_names_ == 0 || tracked_.contains(&series)) return track(family, series, pid);
  ++kernel_choices_[process].series;
  return track(family, series, pid, [this, process] {
    auto it = kernel_choices_.find(process);
    if (it != kernel_choices_.end() && --it->second.series == 0) kernel_choices_.erase(it);
  });
}

// NCCL's operations on the GPU, by operation (a bounded set: NCCL's API) and rank.
void MetricsSink::add(const GpuCollectiveRow& r) {
  if (!r.has_gpu_time) return;
  prometheus::Labels labels = process_labels(r.pid, false);
  labels["op"] = std::string(r.name);
  if (r.rank >= 0) labels["rank"] = std::to_string(r.rank);
  track(collective_gpu_seconds_, collective_gpu_seconds_.Add(labels), r.pid)
      .Increment(double(r.gpu_dur_ns) / 1e9);
  track(collectives_on_gpu_, collectives_on_gpu_.Add(labels), r.pid).Increment();
}

std::string MetricsSink::job_of(uint32_t pid) {
  for (auto& [k, v] : process_labels(pid, false))
    if (k == "job_id") return v;
  return {};
}

// Every rank issues a communicator's collectives in the same order, so the k-th call of each
// rank on this node is one instance (CollectiveMatcher: detect's and the agent's detector's
// rule): the ranks that joined before the last waited for it, and the last one's straggling is
// that wait less what its previous collective and its wait for a CPU explain. Only the ranks
// this node runs are matched; a job across nodes is matched per node (its cross-node
// stragglers: the fleet rules, or `eacgm merge`).
void MetricsSink::add_instance(std::string_view op, const CollectiveMatcher::Instance& inst) {
  uint64_t straggled = 0;
  for (const PeerWait& w : inst.waits) straggled = std::max(straggled, w.straggling_ns());
  for (size_t i = 0; i < inst.calls.size(); ++i) {
    const RankCall& c = inst.calls[i];
    prometheus::Labels labels = process_labels(c.pid, false);
    labels.erase("process");
    labels["op"] = std::string(op);
    labels["rank"] = std::to_string(c.rank);
    track(peer_wait_, peer_wait_.Add(labels), c.pid).Increment(double(inst.waits[i].wait_ns) / 1e9);
    // Every rank's join and straggling counters exist from its first instance, at 0: a counter
    // born at its first increment is invisible to rate() and increase() at that increment, so
    // the straggler alert would miss a rank's first late steps.
    prometheus::Counter& last = track(last_joined_, last_joined_.Add(labels), c.pid);
    prometheus::Counter& straggling = track(straggling_, straggling_.Add(labels), c.pid);
    if (c.rank == inst.waits[i].last_rank) {
      last.Increment();
      straggling.Increment(double(straggled) / 1e9);
    }
  }
}

void MetricsSink::add(const TorchCallRow& r) {
  count_call("torch", r.name, r.pid, r.dur_ns, false, -1);
}

// Python function names are unbounded: all of a process's calls are one series.
void MetricsSink::add(const PythonCallRow& r) {
  static const char kAll[] = "(python functions)";
  count_call("python", kAll, r.pid, r.dur_ns, false, -1);
}

void MetricsSink::add(const ProcessRow& r) {
  gone_.erase(r.pid);  // a new process under a reused pid
  auto it = process_names_.find(r.pid);
  if (it != process_names_.end() && it->second == r.name) return;
  process_names_[r.pid] = r.name;
  calls_by_pid_.erase(r.pid);  // its next calls count under its new name
  release(r.pid);
  identities_.erase(r.pid);  // and its new environment
}

void MetricsSink::add(const ProcessExitRow& r) {
  // Call series are per process name and outlive a pid (expire_series() removes them once no
  // process has used them for a while); per-pid host series go with it.
  calls_by_pid_.erase(r.pid);
  release(r.pid);
  process_names_.erase(r.pid);
  if (auto it = identities_.find(r.pid); it != identities_.end()) {
    gone_[r.pid] = {std::move(it->second), std::nullopt};
    identities_.erase(it);
  } else {
    gone_[r.pid] = {};
  }
  if (auto it = host_.find(r.pid); it != host_.end()) {
    runq_.Remove(it->second.runq);
    cpu_.Remove(it->second.cpu);
    involuntary_.Remove(it->second.involuntary);
    retransmits_.Remove(it->second.retransmits);
    reclaim_.Remove(it->second.reclaim);
    stall_.Remove(it->second.stall);
    host_.erase(it);
  }
}

void MetricsSink::add(const HostSampleRow& r) {
  if (r.scope == HostScope::Cpu) {
    prometheus::Labels cpu{{"cpu", std::to_string(r.id)}};
    node_stall_seconds_.Add(cpu).Increment(double(r.stall_ns) / 1e9);
    node_stalls_.Add(cpu).Increment(double(r.stalls));
    return;
  }
  uint32_t pid = uint32_t(r.id);
  // per traced process: the host layer sees every process of the node under the agent
  if (r.scope != HostScope::Process || !calls_by_pid_.count(pid)) return;
  auto it = host_.find(pid);
  if (it == host_.end()) {
    prometheus::Labels labels = process_labels(pid, true);
    HostMetrics m{&runq_.Add(labels), &cpu_.Add(labels), &involuntary_.Add(labels),
                  &retransmits_.Add(labels), &reclaim_.Add(labels), &stall_.Add(labels)};
    it = host_.emplace(pid, m).first;
  }
  HostMetrics& m = it->second;
  m.runq->Increment(double(r.runq_wait_ns) / 1e9);
  m.cpu->Increment(double(r.oncpu_ns) / 1e9);
  m.involuntary->Increment(double(r.involuntary_switches));
  m.retransmits->Increment(double(r.tcp_retransmits));
  m.reclaim->Increment(double(r.reclaim_ns) / 1e9);
  m.stall->Increment(double(r.stall_ns) / 1e9);
}

void MetricsSink::add(const GpuDevice& r) { devices_[r.index] = r; }

void MetricsSink::add(const GpuSample& r) {
  auto dev = devices_.find(r.gpu);
  prometheus::Labels labels{{"gpu", std::to_string(r.gpu)},
                            {"UUID", dev != devices_.end() ? dev->second.uuid : ""},
                            {"modelName", dev != devices_.end() ? dev->second.name : ""},
                            {"Hostname", hostname_}};
  // Family::Add returns the existing series for the same labels: a few GPUs, 10 times a second
  if (r.sm_util_pct) gpu_util_.Add(labels).Set(*r.sm_util_pct);
  if (r.mem_used_bytes) fb_used_.Add(labels).Set(double(*r.mem_used_bytes) / (1 << 20));
  if (r.power_w) power_.Add(labels).Set(*r.power_w);
  if (r.temperature_c) temp_.Add(labels).Set(*r.temperature_c);
  if (r.sm_clock_mhz) sm_clock_.Add(labels).Set(*r.sm_clock_mhz);
  if (r.mem_clock_mhz) mem_clock_.Add(labels).Set(*r.mem_clock_mhz);
  if (r.throttle_reasons) throttle_.Add(labels).Set(double(*r.throttle_reasons));
}

void MetricsSink::add(const GpuXidEvent& r) {
  auto dev = devices_.find(r.gpu);
  xid_.Add({{"gpu", std::to_string(r.gpu)},
            {"UUID", dev != devices_.end() ? dev->second.uuid : ""},
            {"modelName", dev != devices_.end() ? dev->second.name : ""},
            {"Hostname", hostname_}})
      .Set(double(r.xid));
}

void MetricsSink::set_agent_stats(const AgentStats& s) {
  // counters only go up: add what is new since the last call
  agent_events_.Add({}).Increment(double(s.events - std::min(s.events, last_stats_.events)));
  agent_dropped_.Add({}).Increment(double(s.dropped - std::min(s.dropped, last_stats_.dropped)));
  agent_cpu_.Add({}).Increment(std::max(0.0, s.cpu_seconds - last_stats_.cpu_seconds));
  agent_probes_.Add({}).Set(double(s.probes));
  agent_processes_.Add({}).Set(double(s.processes));
  agent_rss_.Add({}).Set(double(s.rss_bytes));
  last_stats_ = s;
}

void MetricsSink::set_call_duty(double ratio) {
  for (const char* layer : {"cuda", "torch"}) call_duty_.Add({{"layer", layer}}).Set(ratio);
  // (never cycled: a series each, so that every layer's call rates can be divided by it)
  for (const char* layer : {"comm", "python"}) call_duty_.Add({{"layer", layer}}).Set(1.0);
}

void MetricsSink::count_anomaly(const std::string& layer, const std::string& cause_kind) {
  anomalies_.Add({{"layer", layer}, {"cause", cause_kind}}).Increment();
}

void MetricsSink::zero_anomalies(const std::vector<std::pair<std::string, std::string>>& kinds) {
  for (const auto& [layer, kind] : kinds) anomalies_.Add({{"layer", layer}, {"cause", kind}});
}

void MetricsSink::set_models(const std::vector<ModelState>& models, size_t fitted) {
  for (const auto& m : models) {
    // (Python functions and kernels are unbounded sets of names: no series per model)
    if (m.layer == "python" || m.layer == "gpu") continue;
    prometheus::Labels labels{{"layer", m.layer}, {"op", m.name}};
    model_score_.Add(labels).Set(m.last_score);
    model_threshold_.Add(labels).Set(m.threshold);
  }
  models_.Add({}).Set(double(fitted));
}

void MetricsSink::set_dismissed(const Dismissed& d) {
  // counters only go up: add what is new since the last call
  auto add = [this](const char* reason, size_t now, size_t& last) {
    dismissed_.Add({{"reason", reason}}).Increment(double(now - std::min(now, last)));
    last = std::max(last, now);
  };
  add("no_burst", d.no_burst, last_dismissed_.no_burst);
  add("lone_window", d.lone_window, last_dismissed_.lone_window);
  add("brief_slowdown", d.brief_slowdown, last_dismissed_.brief_slowdown);
}

std::string MetricsSink::text() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace eacgm
