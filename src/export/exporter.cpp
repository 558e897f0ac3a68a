// Reads a recording and feeds the timeline writers.
#include "export/exporter.h"

#include "export/pprof.h"
#include "report/profile.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "export/chrome_json.h"
#include "export/perfetto.h"
#include "store/reader.h"
#include "store/table_readers.h"
#include "util/error.h"
#include "util/output_file.h"

namespace eacgm {
namespace {

// A call row's slice: its time, thread and name.
template <typename Row>
TimelineSlice call_slice(const Row& r, int64_t to_real, const char* layer) {
  TimelineSlice slice;
  slice.ts_ns = uint64_t(int64_t(r.ts_ns) + to_real);
  slice.dur_ns = r.dur_ns;
  slice.pid = r.pid;
  slice.tid = r.tid;
  slice.category = layer;
  slice.name = std::string(r.name);
  return slice;
}

// Python stacks of calls (python_stacks), each as one text: innermost frame first.
using PythonStacks = std::map<int64_t, std::string>;

PythonStacks python_stacks(const RecordingReader& rec) {
  PythonStacks stacks;
  each_python_frame(rec, [&](const PythonStackFrameRow& f) {
    std::string& text = stacks[f.id];
    text += fmt::format("{}{} ({}:{})", text.empty() ? "" : "\n", f.name, f.file,
                        f.line < 0 ? std::string("?") : std::to_string(f.line));
  });
  return stacks;
}

// The python_stack arg of a call slice (py_stack: its id; 0: none).
void add_python_stack(TimelineSlice& slice, int64_t py_stack, const PythonStacks& stacks) {
  if (!py_stack) return;
  if (auto it = stacks.find(py_stack); it != stacks.end())
    slice.args.push_back({"python_stack", it->second});
}

// How long the calling thread waited for a CPU during the call, when it did.
void add_cpu_wait(TimelineSlice& slice, int64_t runq_ns) {
  if (runq_ns > 0) slice.args.push_back({"cpu_wait_us", double(runq_ns) / 1e3});
}

void add_python_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  each_python_call(rec, [&](const PythonCallRow& c) {
    TimelineSlice slice = call_slice(c, to_real, "python");
    slice.args.push_back({"file", std::string(c.file)});
    slice.args.push_back({"line", c.line});
    add_cpu_wait(slice, c.runq_ns);
    sink.add_slice(slice);
  });
}

// The gputime layer's launch records, by process and thread: CUPTI's record of a runtime launch
// starts about a microsecond after eacgm's uprobe saw the same call begin, inside its span.
struct GpuLaunches {
  std::map<std::pair<uint32_t, uint32_t>, std::vector<std::pair<uint64_t, uint32_t>>> by_thread;
  std::set<uint64_t> linked;  // flow ids (pid << 32 | correlation) given to a launch slice

  static uint64_t flow_id(uint32_t pid, uint32_t correlation) {
    return uint64_t(pid) << 32 | correlation;
  }
  // The flow id of the launch record inside this runtime launch call, claimed once; 0: none.
  uint64_t claim(const CudaCallRow& c) {
    auto it = by_thread.find({c.pid, c.tid});
    if (it == by_thread.end()) return 0;
    auto& v = it->second;  // by time
    // (at most 2 us early: the two clocks are read a few instructions apart)
    auto at = std::lower_bound(v.begin(), v.end(),
                               std::pair<uint64_t, uint32_t>{c.ts_ns - std::min<uint64_t>(c.ts_ns, 2000), 0});
    if (at == v.end() || at->first > c.ts_ns + std::max<uint64_t>(c.dur_ns, 1)) return 0;
    uint64_t id = flow_id(c.pid, at->second);
    v.erase(at);
    linked.insert(id);
    return id;
  }
  // The same for a driver launch that no runtime launch call of eacgm's holds: a library that
  // carries its own copy of the runtime (cuBLASLt links it statically) launches through it, so
  // CUPTI records a runtime launch that eacgm's uprobes on libcudart never see; the driver call
  // inside it is eacgm's row. Its record starts before that driver call: 0.7 us (median), 2.3 us
  // (p99) and at most 22 us before it in a training on an H200 (bench/README.md); the latest
  // unclaimed one up to 50 us before is its.
  uint64_t claim_before(const CudaCallRow& c) {
    auto it = by_thread.find({c.pid, c.tid});
    if (it == by_thread.end()) return 0;
    auto& v = it->second;
    auto at = std::upper_bound(v.begin(), v.end(), std::pair<uint64_t, uint32_t>{c.ts_ns, UINT32_MAX});
    if (at == v.begin() || c.ts_ns - std::prev(at)->first > 50'000) return 0;
    --at;
    uint64_t id = flow_id(c.pid, at->second);
    v.erase(at);
    linked.insert(id);
    return id;
  }
};

GpuLaunches gpu_launches(const RecordingReader& rec) {
  GpuLaunches l;
  each_gpu_activity(rec, [&](const GpuActivityRow& g) {
    if (g.kind == "launch") l.by_thread[{g.pid, g.tid}].emplace_back(g.ts_ns, g.correlation);
  });
  return l;
}

bool is_runtime_launch(std::string_view name) {
  return name.starts_with("cudaLaunch") || name.starts_with("__cudaLaunch");
}

void add_cuda_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real,
                     const PythonStacks& stacks, GpuLaunches& launches) {
  // each thread's latest runtime launch call: a driver launch inside it is its, not a launch of
  // its own
  std::map<std::pair<uint32_t, uint32_t>, std::pair<uint64_t, uint64_t>> runtime_call;
  each_cuda_call(rec, [&](const CudaCallRow& c) {
    TimelineSlice slice = call_slice(c, to_real, "cuda");
    if (c.is_launch && is_runtime_launch(c.name)) {
      slice.flow_out = launches.claim(c);
      runtime_call[{c.pid, c.tid}] = {c.ts_ns, c.ts_ns + c.dur_ns};
    } else if (c.is_launch && c.name.starts_with("cuLaunch")) {
      auto rt = runtime_call.find({c.pid, c.tid});
      bool inside = rt != runtime_call.end() && c.ts_ns >= rt->second.first && c.ts_ns <= rt->second.second;
      if (!inside) slice.flow_out = launches.claim_before(c);
    }
    if (!c.kernel.empty()) slice.args.push_back({"kernel", std::string(c.kernel)});
    if (c.bytes >= 0) slice.args.push_back({"bytes", c.bytes});
    if (!c.memcpy_kind.empty()) slice.args.push_back({"kind", std::string(c.memcpy_kind)});
    if (c.has_stream) slice.args.push_back({"stream", c.stream});
    if (c.is_launch) {
      slice.args.push_back({"grid", fmt::format("({}, {}, {})", c.grid[0], c.grid[1], c.grid[2])});
      slice.args.push_back(
          {"block", fmt::format("({}, {}, {})", c.block[0], c.block[1], c.block[2])});
      slice.args.push_back({"shared_mem", int64_t(c.shared_mem)});
    }
    slice.args.push_back({"ret", c.ret});
    add_cpu_wait(slice, c.runq_ns);
    add_python_stack(slice, c.py_stack, stacks);
    sink.add_slice(slice);
  });
}

// The gputime layer's work on the GPU, each with the arrow from its launch where it has one.
void add_gpu_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real,
                    const GpuLaunches& launches) {
  each_gpu_activity(rec, [&](const GpuActivityRow& g) {
    if (g.kind == "launch") return;
    TimelineGpuSlice slice;
    slice.ts_ns = uint64_t(int64_t(g.ts_ns) + to_real);
    slice.dur_ns = g.dur_ns;
    slice.pid = g.pid;
    slice.device = g.device;
    slice.stream = g.stream;
    slice.category = "gpu";
    slice.name = g.kind == "kernel"   ? std::string(g.name)
                 : g.kind == "memcpy" ? fmt::format("memcpy {}", g.name)
                                      : std::string(g.kind);
    if (g.bytes >= 0) slice.args.push_back({"bytes", g.bytes});
    if (g.kind == "kernel") {
      slice.args.push_back({"grid", fmt::format("({}, {}, {})", g.grid[0], g.grid[1], g.grid[2])});
      slice.args.push_back(
          {"block", fmt::format("({}, {}, {})", g.block[0], g.block[1], g.block[2])});
      slice.args.push_back({"shared_mem", int64_t(g.shared_mem)});
      slice.args.push_back({"registers", int64_t(g.registers)});
    }
    slice.args.push_back({"correlation", int64_t(g.correlation)});
    uint64_t id = GpuLaunches::flow_id(g.pid, g.correlation);
    if (launches.linked.count(id)) slice.flow_in = id;
    sink.add_gpu_slice(slice);
  });
}

// NCCL's operations as its profiler plugin saw them on the GPU (gputime), by the thread that
// enqueued them: the API call whose span holds an operation's enqueue starts its arrow.
struct GpuCollectives {
  struct Op {
    GpuCollectiveRow row;  // its text fields cleared: they are below (ops move)
    std::string name, algo, proto;
    bool linked = false;
  };
  std::vector<Op> ops;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<std::pair<uint64_t, size_t>>> by_thread;

  static uint64_t flow_id(const Op& op, size_t index) {  // apart from launches' (bit 63 clear)
    return uint64_t(1) << 63 | uint64_t(op.row.pid) << 31 | (index & 0x7fffffff);
  }
  // The arrow of the first operation this NCCL call enqueued, claimed once; 0: none.
  uint64_t claim(const CommCallRow& c) {
    auto it = by_thread.find({c.pid, c.tid});
    if (it == by_thread.end()) return 0;
    auto& v = it->second;  // by enqueue time
    auto at = std::lower_bound(v.begin(), v.end(), std::pair<uint64_t, size_t>{c.ts_ns, 0});
    if (at == v.end() || at->first > c.ts_ns + c.dur_ns) return 0;
    size_t index = at->second;
    v.erase(at);
    ops[index].linked = true;
    return flow_id(ops[index], index);
  }
};

GpuCollectives gpu_collectives(const RecordingReader& rec) {
  GpuCollectives g;
  each_gpu_collective(rec, [&](const GpuCollectiveRow& r) {
    if (!r.has_gpu_time) return;
    GpuCollectives::Op op{r, std::string(r.name), std::string(r.algo), std::string(r.proto)};
    op.row.name = op.row.datatype = op.row.algo = op.row.proto = {};
    g.by_thread[{r.pid, r.tid}].emplace_back(r.ts_ns, g.ops.size());
    g.ops.push_back(std::move(op));
  });
  return g;
}

// Duty-cycled GPU time (gpu_time_slices): each slice collected on a track of its own under its
// process ("GPU time collected"), so that the gaps between its kernels' bursts read as what was
// not collected, not as an idle GPU.
void add_gpu_time_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  each_gpu_slice(rec, [&](const GpuSliceRow& r) {
    TimelineGpuSlice slice;
    slice.ts_ns = uint64_t(int64_t(r.ts_ns) + to_real);
    slice.dur_ns = r.dur_ns;
    slice.pid = r.pid;
    slice.device = 0x3ffe, slice.stream = 0;  // a lane of its own, beside the GPUs' and NCCL's
    slice.track = "GPU time collected (EACGM_GPUTIME_DUTY)";
    slice.category = "gpu";
    slice.name = "collecting";
    sink.add_gpu_slice(slice);
  });
}

// Each NCCL operation's kernels on a track of its communicator ("NCCL comm 3fa2c1 on the GPU")
// under its process, with the arrow from its API call.
void add_gpu_collective_slices(const GpuCollectives& g, TimelineSink& sink, int64_t to_real) {
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> lanes;  // (pid, communicator) -> its lane
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const GpuCollectives::Op& op = g.ops[i];
    const GpuCollectiveRow& r = op.row;
    TimelineGpuSlice slice;
    slice.ts_ns = uint64_t(int64_t(r.gpu_start_ns) + to_real);
    slice.dur_ns = r.gpu_dur_ns;
    slice.pid = r.pid;
    slice.device = 0x3fff;  // a lane of its own per communicator, beside the devices' streams
    slice.stream = lanes.try_emplace({r.pid, r.comm_hash}, uint32_t(lanes.size())).first->second;
    slice.track = fmt::format("NCCL comm {:06x} on the GPU", r.comm_hash & 0xffffff);
    slice.category = "gpu";
    slice.name = op.name;
    if (r.seq >= 0) slice.args.push_back({"seq", r.seq});
    if (r.rank >= 0) slice.args.push_back({"rank", r.rank});
    if (r.nranks >= 0) slice.args.push_back({"nranks", r.nranks});
    if (r.peer >= 0) slice.args.push_back({"root_or_peer", r.peer});
    if (r.bytes >= 0) slice.args.push_back({"bytes", r.bytes});
    if (!op.algo.empty()) slice.args.push_back({"algo", op.algo});
    if (!op.proto.empty()) slice.args.push_back({"proto", op.proto});
    slice.args.push_back({"channels", int64_t(r.channels)});
    if (r.busbw_gbps >= 0) slice.args.push_back({"busbw_gbps", r.busbw_gbps});
    if (op.linked) slice.flow_in = GpuCollectives::flow_id(op, i);
    sink.add_gpu_slice(slice);
  }
}

void add_comm_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real,
                     const PythonStacks& stacks, GpuCollectives& collectives) {
  each_comm_call(rec, [&](const CommCallRow& c) {
    TimelineSlice slice = call_slice(c, to_real, "comm");
    if (c.name.starts_with("nccl")) slice.flow_out = collectives.claim(c);
    if (c.count >= 0) slice.args.push_back({"count", c.count});
    if (!c.datatype.empty()) slice.args.push_back({"datatype", std::string(c.datatype)});
    if (c.bytes >= 0) slice.args.push_back({"bytes", c.bytes});
    if (!c.redop.empty()) slice.args.push_back({"op", std::string(c.redop)});
    if (c.peer >= 0) slice.args.push_back({"root_or_peer", c.peer});
    if (c.comm) slice.args.push_back({"comm", c.comm});
    if (c.rank >= 0) slice.args.push_back({"rank", c.rank});
    if (c.nranks >= 0) slice.args.push_back({"nranks", c.nranks});
    if (c.has_stream) slice.args.push_back({"stream", c.stream});
    slice.args.push_back({"ret", c.ret});
    add_cpu_wait(slice, c.runq_ns);
    add_python_stack(slice, c.py_stack, stacks);
    sink.add_slice(slice);
  });
}

// Operators nest (aten::linear around aten::addmm): their slices nest on the thread's track.
void add_torch_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real,
                      const PythonStacks& stacks) {
  each_torch_call(rec, [&](const TorchCallRow& c) {
    TimelineSlice slice = call_slice(c, to_real, "torch");
    add_cpu_wait(slice, c.runq_ns);
    add_python_stack(slice, c.py_stack, stacks);
    sink.add_slice(slice);
  });
}

// Turns interval samples into counter tracks: each value holds from the start of its interval,
// and a track drops to zero where it has no sample (rows are written only for active intervals).
class CounterSeries {
 public:
  explicit CounterSeries(TimelineSink& sink) : sink_(sink) {}
  void add(uint32_t pid, const std::string& track, uint64_t end_ns, uint64_t interval_ns,
           double value) {
    uint64_t start = end_ns - std::min(interval_ns, end_ns);
    auto [it, fresh] = last_end_.try_emplace({pid, track}, start);
    if (!fresh && start > it->second) sink_.add_counter({it->second, pid, track, 0});
    sink_.add_counter({start, pid, track, value});
    it->second = end_ns;
  }
  void finish() {
    for (const auto& [key, end] : last_end_) sink_.add_counter({end, key.first, key.second, 0});
  }

 private:
  TimelineSink& sink_;
  std::map<std::pair<uint32_t, std::string>, uint64_t> last_end_;
};

void add_host_counters(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  CounterSeries series(sink);
  const std::string own_netns = rec.meta_or("netns", "");
  each_host_sample(rec, [&](const HostSampleRow& r) {
    if (r.interval_ns == 0) return;
    uint64_t end = uint64_t(int64_t(r.ts_ns) + to_real), dt = r.interval_ns;
    double per_s = 1e9 / double(dt), mb_per_s = per_s / 1e6;
    std::string name = r.name;
    auto put = [&](uint32_t pid, const std::string& track, double v) {
      series.add(pid, track, end, dt, v);
    };
    switch (r.scope) {
      case HostScope::Process: {
        uint32_t pid = uint32_t(r.id);
        double waits = double(r.runq_waits);
        put(pid, "cpu (%)", 100.0 * double(r.oncpu_ns) / double(dt));
        put(pid, "run-queue wait, mean (us)", waits ? double(r.runq_wait_ns) / waits / 1e3 : 0);
        put(pid, "involuntary switches (/s)", double(r.involuntary_switches) * per_s);
        put(pid, "socket tx (MB/s)", double(r.tx_bytes) * mb_per_s);
        put(pid, "socket rx (MB/s)", double(r.rx_bytes) * mb_per_s);
        put(pid, "block I/O (MB/s)", double(r.io_bytes) * mb_per_s);
        put(pid, "TCP retransmits (/s)", double(r.tcp_retransmits) * per_s);
        put(pid, "page faults (/s)", double(r.page_faults) * per_s);
        put(pid, "memory reclaim (ms/s)", double(r.reclaim_ns) / 1e6 * per_s);
        put(pid, "page-cache fills (MB/s)", double(r.pagein_bytes) * mb_per_s);
        break;
      }
      case HostScope::NetDevice:
        if (std::to_string(r.netns) != own_netns) name += fmt::format(" (netns {})", r.netns);
        put(0, name + " tx (MB/s)", double(r.tx_bytes) * mb_per_s);
        put(0, name + " rx (MB/s)", double(r.rx_bytes) * mb_per_s);
        break;
      case HostScope::Disk: {
        double ops = double(r.io_ops);
        put(0, name + " read (MB/s)", double(r.read_bytes) * mb_per_s);
        put(0, name + " write (MB/s)", double(r.write_bytes) * mb_per_s);
        put(0, name + " latency, mean (ms)", ops ? double(r.io_latency_ns) / ops / 1e6 : 0);
        break;
      }
      case HostScope::Cpu:  // (a vCPU its hypervisor did not run, interrupts kept off)
        put(0, name + " stopped (ms/s)", double(r.stall_ns) / 1e6 * per_s);
        break;
    }
  });
  series.finish();
}

void add_gpu_counters(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  // Samples are instantaneous readings: each value holds until the next one.
  each_gpu_sample(rec, [&](const GpuSample& g) {
    uint64_t ts = uint64_t(int64_t(g.ts_ns) + to_real);
    std::string gpu = fmt::format("GPU {} ", g.gpu);
    auto put = [&](const auto& value, const char* track, double scale) {
      if (value) sink.add_counter({ts, 0, gpu + track, double(*value) * scale});
    };
    put(g.sm_util_pct, "SM util (%)", 1);
    put(g.mem_util_pct, "memory util (%)", 1);
    put(g.mem_used_bytes, "memory used (GiB)", 1.0 / (1ull << 30));
    put(g.temperature_c, "temperature (C)", 1);
    put(g.power_w, "power (W)", 1);
    put(g.sm_clock_mhz, "SM clock (MHz)", 1);
    put(g.mem_clock_mhz, "memory clock (MHz)", 1);
    put(g.pcie_tx_bytes_per_s, "PCIe tx (MB/s)", 1e-6);
    put(g.pcie_rx_bytes_per_s, "PCIe rx (MB/s)", 1e-6);
    put(g.nvlink_tx_bytes_per_s, "NVLink tx (MB/s)", 1e-6);
    put(g.nvlink_rx_bytes_per_s, "NVLink rx (MB/s)", 1e-6);
    put(g.throttle_reasons, "throttle reasons (bits)", 1);
  });
  each_gpu_process_sample(rec, [&](const GpuProcessSample& p) {
    uint64_t ts = uint64_t(int64_t(p.ts_ns) + to_real);
    std::string gpu = fmt::format("GPU {} ", p.gpu);
    if (p.sm_util_pct) sink.add_counter({ts, p.pid, gpu + "SM util (%)", double(*p.sm_util_pct)});
    if (p.mem_util_pct)
      sink.add_counter({ts, p.pid, gpu + "memory util (%)", double(*p.mem_util_pct)});
    if (p.used_memory_bytes)
      sink.add_counter({ts, p.pid, gpu + "memory (MiB)", double(*p.used_memory_bytes) / (1 << 20)});
  });
  // An XID is an event: a spike to its number on the GPU's track, back to 0 just after.
  each_gpu_xid(rec, [&](const GpuXidEvent& x) {
    uint64_t ts = uint64_t(int64_t(x.ts_ns) + to_real);
    std::string track = fmt::format("GPU {} XID", x.gpu);
    sink.add_counter({ts, 0, track, double(x.xid)});
    sink.add_counter({ts + 1'000'000, 0, track, 0});
  });
}

// Anomalies from eacgm detect: a marker each on an "anomalies" track, with cause and score.
void add_anomalies(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  each_anomaly(rec, [&](const AnomalyRow& a) {
    TimelineInstant i;
    i.ts_ns = uint64_t(int64_t(a.ts_ns) + to_real);
    i.track = "anomalies";
    i.category = "anomaly";
    i.name = a.cause;
    i.args = {{"layer", a.layer}, {"operation", a.name}, {"duration_ns", int64_t(a.dur_ns)}};
    // (a late join no model scored has none: NaN would read "NaN" in Perfetto's UI)
    if (!std::isnan(a.score)) i.args.push_back({"score", a.score});
    if (!std::isnan(a.threshold)) i.args.push_back({"threshold", a.threshold});
    i.args.push_back({"features", a.features});
    sink.add_instant(i);
  });
}

}  // namespace

// The off-CPU profile's waits of a sampling period or more (all of them are recorded, whole) as
// slices on their thread, named by where the thread blocked: its innermost Python function,
// else its innermost native one; the stacks as arguments. Shorter waits are only sampled: the
// profile, not the timeline, shows them.
void add_offcpu_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real,
                       const PythonStacks& stacks) {
  std::map<int64_t, std::string> native;  // id -> innermost frames, one a line
  each_native_frame(rec, 8, [&](const NativeFrameRow& f) {
    std::string& text = native[f.id];
    text += fmt::format("{}{} ({})", text.empty() ? "" : "\n", f.name, f.module);
  });
  auto first_line = [](const std::string& text) {
    std::string line = text.substr(0, text.find('\n'));
    return line.substr(0, line.rfind(" ("));
  };
  each_whole_offcpu_wait(rec, [&](const OffCpuSampleRow& w) {
    TimelineSlice slice{uint64_t(int64_t(w.ts_ns) + to_real), w.dur_ns, w.pid, w.tid,
                        "off-cpu", "blocked", {}};
    auto py = w.py_stack ? stacks.find(w.py_stack) : stacks.end();
    auto nat = w.native_stack ? native.find(w.native_stack) : native.end();
    if (py != stacks.end())
      slice.name = "blocked in " + first_line(py->second);
    else if (nat != native.end())
      slice.name = "blocked in " + first_line(nat->second);
    if (py != stacks.end()) slice.args.push_back({"python_stack", py->second});
    if (nat != native.end()) slice.args.push_back({"native_stack", nat->second});
    sink.add_slice(slice);
  });
}

// The CPU profile's samples (record --sample-hz), each with its Python and native stack.
void add_stack_samples(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  CpuProfile profile(rec);
  const auto& frames = profile.frames();
  for (size_t id = 0; id < profile.stacks().size(); ++id) {
    std::vector<TimelineFrame> stack;
    for (uint32_t f : profile.stacks()[id])
      stack.push_back({frames[f].name, frames[f].file, frames[f].line, frames[f].python});
    sink.add_stack(uint32_t(id), stack);
  }
  for (const auto& s : profile.samples())
    sink.add_stack_sample({uint64_t(int64_t(s.ts_ns) + to_real), s.pid, s.tid, s.stack});
}

void emit_timeline(const RecordingReader& rec, TimelineSink& sink) {
  int64_t to_real = rec.monotonic_to_realtime_ns();
  std::set<uint32_t> pids;
  // the latest row of a pid names it (after exec); merged recordings and ranks of a job say
  // where each process ran: "node-b rank 1: python3 train.py"
  each_process(rec, [&](const RecordedProcess& p) {
    pids.insert(p.pid);
    std::string where = p.host;
    if (p.rank >= 0) where += fmt::format("{}rank {}", where.empty() ? "" : " ", p.rank);
    const std::string& name = p.command.empty() ? p.name : p.command;
    sink.add_process({p.pid, where.empty() ? name : where + ": " + name});
  });
  // processes seen only through their calls (e.g. --all) still get a track; threads by their
  // latest name (after an exec, the program they became)
  std::vector<ThreadRow> threads;
  each_thread(rec, [&](const ThreadRow& t) { threads.push_back(t); });
  for (const auto& t : threads)
    if (pids.insert(t.pid).second) sink.add_process({t.pid, fmt::format("pid {}", t.pid)});
  for (const auto& t : threads) sink.add_thread({t.pid, t.tid, t.name});
  PythonStacks stacks = python_stacks(rec);  // none in recordings made before the python layer
  GpuLaunches launches = gpu_launches(rec);
  add_cuda_slices(rec, sink, to_real, stacks, launches);
  add_gpu_slices(rec, sink, to_real, launches);
  add_gpu_time_slices(rec, sink, to_real);
  GpuCollectives collectives = gpu_collectives(rec);
  add_comm_slices(rec, sink, to_real, stacks, collectives);
  add_gpu_collective_slices(collectives, sink, to_real);
  add_torch_slices(rec, sink, to_real, stacks);
  add_python_slices(rec, sink, to_real);
  add_offcpu_slices(rec, sink, to_real, stacks);
  add_host_counters(rec, sink, to_real);
  add_gpu_counters(rec, sink, to_real);
  add_anomalies(rec, sink, to_real);
  add_stack_samples(rec, sink, to_real);
}

void export_recording(const std::string& db, const std::string& out, ExportFormat format,
                      bool force) {
  RecordingReader rec(db);
  if (format == ExportFormat::Pprof) {
    check_output_file(out, force, "--pprof");
    CpuProfile profile(rec), off_cpu(rec, ProfileKind::OffCpu);
    if (profile.empty() && off_cpu.empty())
      fail("{} has no CPU profile: record it with --sample-hz above 0 (the default is 99; "
           "recordings from eacgm versions before profiles have none)",
           db);
    int64_t start = rec.meta_ns("start_monotonic_ns"), end = rec.meta_ns("end_monotonic_ns");
    std::string bytes = gzip(pprof_profile(
        profile, &off_cpu, start + rec.monotonic_to_realtime_ns(), end > start ? end - start : 0));
    write_then_rename(out, [&](std::ostream& file) { file.write(bytes.data(), std::streamsize(bytes.size())); });
    return;
  }
  check_output_file(out, force, format == ExportFormat::Perfetto ? "--perfetto" : "--chrome");
  write_then_rename(out, [&](std::ostream& file) {
    auto sink = format == ExportFormat::Perfetto ? make_perfetto_writer(file)
                                                 : make_chrome_json_writer(file);
    emit_timeline(rec, *sink);
    sink->finish();
  });
}

}  // namespace eacgm
