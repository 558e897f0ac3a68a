// Reads calls and samples out of a recording into feature tables.
#include "detect/features.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "detect/gpu_time.h"
#include "report/collectives.h"
#include "store/reader.h"
#include "store/table_readers.h"
#include "util/error.h"

namespace eacgm::detect {
namespace {

struct CallGroup {
  std::vector<uint64_t> ts, dur;
  std::vector<uint32_t> pid, tid, late_pid;
  std::vector<int64_t> runq;
  std::vector<double> log_dur, log_bytes, log_peer_wait;
  bool has_bytes = false, has_peer_wait = false;
};

}  // namespace

std::vector<FeatureTable> call_features(const RecordingReader& rec, const Collectives* collectives) {
  std::map<std::pair<std::string, std::string>, CallGroup> groups;
  each_traced_call(
      rec,
      [&](const TracedCall& c) {
        CallGroup& g = groups[{std::string(c.layer), std::string(c.name)}];
        g.ts.push_back(c.ts_ns);
        g.pid.push_back(c.pid);
        g.tid.push_back(c.tid);
        g.runq.push_back(c.runq_ns);
        g.dur.push_back(c.dur_ns);
        // Net of the time the thread waited for a CPU (where known): preemption is the host's
        // doing, which the window model sees; the call itself was not slower.
        int64_t dur = int64_t(c.dur_ns) - std::max<int64_t>(c.runq_ns, 0);
        // And net of a collective's wait for the last rank to join. The part of that wait the
        // late rank's own progress explains (straggling: it took longer since the previous
        // instance, not for want of a CPU) is a feature of its own.
        const PeerWait* w =
            collectives && c.layer == "comm" ? collectives->find(c.pid, c.ts_ns) : nullptr;
        g.has_peer_wait |= w != nullptr;
        g.late_pid.push_back(w ? w->last_pid : 0);
        g.log_peer_wait.push_back(
            w ? std::log1p(double(w->straggling_ns()) / 1e3 / kStragglerWaitUnitUs) : 0.0);
        if (w && !w->on_gpu) dur -= int64_t(w->wait_ns);  // NCCL's GPU wait is not in its call
        g.log_dur.push_back(std::log(double(std::max<int64_t>(dur, 1)) / 1e3));
        bool bytes = c.bytes >= 0;
        g.has_bytes |= bytes;
        g.log_bytes.push_back(bytes ? std::log2(1.0 + double(c.bytes)) : 0.0);
      },
      true);
  // GPU time (the gputime layer): each kernel's time on the GPU, one model per kernel (a slow
  // kernel: throttling, contention for the GPU).
  // (the agent's DetectionSink takes them the same way: detect/gpu_time.h)
  each_gpu_activity(rec, [&](const GpuActivityRow& r) {
    if (!modelled_kernel(r)) return;
    CallGroup& g = groups[{"gpu", std::string(r.name)}];
    g.ts.push_back(r.ts_ns);
    g.pid.push_back(r.pid);
    g.tid.push_back(stream_thread(r));
    g.runq.push_back(-1);
    g.dur.push_back(r.dur_ns);
    g.log_dur.push_back(std::log(double(std::max<uint64_t>(r.dur_ns, 1)) / 1e3));
    g.log_peer_wait.push_back(0.0);
    g.late_pid.push_back(0);
    g.log_bytes.push_back(0.0);
  });
  // NCCL's collectives on the GPU: each one's own time there, net of its wait for the last rank
  // (as the agent: detect/gpu_time.h), in the order they ran
  std::vector<GpuCollectiveRow> on_gpu;
  std::vector<std::string> on_gpu_names;  // (the rows' strings live only in the callback)
  each_gpu_collective(rec, [&](const GpuCollectiveRow& r) {
    if (!modelled_collective(r)) return;
    on_gpu.push_back(r);
    on_gpu_names.push_back(gpu_collective_name(r.name));
  });
  std::vector<size_t> order(on_gpu.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return on_gpu[a].gpu_start_ns < on_gpu[b].gpu_start_ns;
  });
  for (size_t i : order) {
    const GpuCollectiveRow& r = on_gpu[i];
    const PeerWait* w = collectives ? collectives->find_on_gpu(r.pid, r.gpu_start_ns) : nullptr;
    uint64_t own = own_gpu_time(r, w ? w->wait_ns : 0);
    CallGroup& g = groups[{"comm", on_gpu_names[i]}];
    g.ts.push_back(r.gpu_start_ns);
    g.pid.push_back(r.pid);
    g.tid.push_back(communicator_thread(r));
    g.runq.push_back(-1);
    g.dur.push_back(r.gpu_dur_ns);
    g.log_dur.push_back(std::log(double(own) / 1e3));
    g.log_peer_wait.push_back(0.0);
    g.late_pid.push_back(0);
    bool bytes = r.bytes >= 0;
    g.has_bytes |= bytes;
    g.log_bytes.push_back(bytes ? std::log2(1.0 + double(r.bytes)) : 0.0);
  }
  std::vector<FeatureTable> out;
  for (auto& [key, g] : groups) {
    FeatureTable t;
    t.layer = key.first;
    t.name = key.second;
    t.group = key.first + "/" + key.second;
    t.feature_names = {"log_duration_us"};
    if (g.has_bytes) t.feature_names.push_back("log2_bytes");
    if (g.has_peer_wait) t.feature_names.push_back("log_straggler_wait_10us");
    t.values.resize(Eigen::Index(g.ts.size()), Eigen::Index(t.feature_names.size()));
    for (size_t i = 0; i < g.ts.size(); ++i) {
      Eigen::Index c = 0;
      t.values(Eigen::Index(i), c++) = g.log_dur[i];
      if (g.has_bytes) t.values(Eigen::Index(i), c++) = g.log_bytes[i];
      if (g.has_peer_wait) t.values(Eigen::Index(i), c++) = g.log_peer_wait[i];
    }
    t.ts_ns = std::move(g.ts);
    t.dur_ns = std::move(g.dur);
    t.pid = std::move(g.pid);
    t.tid = std::move(g.tid);
    t.runq_ns = std::move(g.runq);
    if (g.has_peer_wait) t.late_pid = std::move(g.late_pid);
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

// Accumulates one metric per window: a sum (counts, amounts) or a mean (levels).
struct WindowMetric {
  bool level = false;  // GPU state: mean of readings, carried over empty windows
  std::map<int64_t, std::pair<double, double>> by_window;  // window -> (sum, n)
  void add(int64_t w, double v) {
    auto& [sum, n] = by_window[w];
    sum += v;
    n += 1;
  }
};

}  // namespace

std::vector<std::pair<int64_t, double>> window_shares(int64_t from_ns, int64_t to_ns,
                                                     int64_t start_ns, int64_t window_ns) {
  std::vector<std::pair<int64_t, double>> out;
  if (window_ns <= 0) return out;
  auto window_of = [&](int64_t ts) {  // (floor, also before the start)
    int64_t d = ts - start_ns;
    return d >= 0 ? d / window_ns : -((-d + window_ns - 1) / window_ns);
  };
  if (to_ns <= from_ns) {  // no interval: all of it at its time
    out.emplace_back(window_of(to_ns), 1.0);
    return out;
  }
  int64_t first = window_of(from_ns), last = window_of(to_ns - 1);
  if (last - first > 1000) first = last - 1000;  // a damaged interval: its last 1000 windows
  for (int64_t w = first; w <= last; ++w) {
    int64_t a = std::max(from_ns, start_ns + w * window_ns);
    int64_t b = std::min(to_ns, start_ns + (w + 1) * window_ns);
    if (b > a) out.emplace_back(w, double(b - a) / double(to_ns - from_ns));
  }
  return out;
}

namespace {

using WindowMetrics = std::map<std::string, WindowMetric>;

// The host layer's samples of the traced processes and of the NIC.
void add_host_samples(const RecordingReader& rec, int64_t start, uint64_t window_ns,
                      WindowMetrics& m) {
  double per_s = 1e9 / double(window_ns);
  each_host_sample(rec, [&](const HostSampleRow& r) {
    if (r.scope == HostScope::Disk || r.scope == HostScope::Cpu) return;
    // A sample counts what happened in its interval: each window gets the share of it that
    // the window overlaps (0.1 s samples in 0.22 s windows are 2 or 3 a window, and a sample
    // the loaded machine took late spans 0.14 s: by its middle alone, a window read 2.7 cores
    // of CPU on a 2-core machine).
    int64_t end = int64_t(r.ts_ns);
    for (const auto& ws :
         window_shares(end - int64_t(r.interval_ns), end, start, int64_t(window_ns))) {
      // (not a structured binding: clang before 16 cannot capture one in a lambda)
      auto add = [&](const char* name, double v) { m[name].add(ws.first, v * ws.second); };
      double socket = (double(r.tx_bytes) + double(r.rx_bytes)) / 1e6 * per_s;
      if (r.scope == HostScope::Process) {
        add("runq_wait_ms_per_s", double(r.runq_wait_ns) / 1e6 * per_s);
        add("runq_waits_per_s", double(r.runq_waits) * per_s);
        add("involuntary_switches_per_s", double(r.involuntary_switches) * per_s);
        add("cpu_cores", double(r.oncpu_ns) / double(window_ns));
        add("socket_mb_per_s", socket);
        add("block_mb_per_s", double(r.io_bytes) / 1e6 * per_s);
        add("tcp_retransmits_per_s", double(r.tcp_retransmits) * per_s);
        add("page_faults_per_s", double(r.page_faults) * per_s);
        add("reclaim_ms_per_s", double(r.reclaim_ns) / 1e6 * per_s);
        add("pagein_mb_per_s", double(r.pagein_bytes) / 1e6 * per_s);
      } else {
        add("nic_mb_per_s", socket);
      }
    }
  });
}

// The GPU layer's samples: levels, averaged in a window and carried over empty ones.
void add_gpu_samples(const RecordingReader& rec, int64_t start, uint64_t window_ns,
                     WindowMetrics& m) {
  auto window_of = [&](int64_t ts) { return (ts - start) / int64_t(window_ns); };
  each_gpu_sample(rec, [&](const GpuSample& g) {
    int64_t w = window_of(int64_t(g.ts_ns));
    auto put = [&](const char* name, std::optional<double> v) {
      if (!v) return;
      WindowMetric& wm = m[name];
      wm.level = true;
      wm.add(w, *v);
    };
    auto opt = [](const auto& x, double scale) {
      return x ? std::optional<double>(double(*x) * scale) : std::nullopt;
    };
    put("gpu_util_pct", opt(g.sm_util_pct, 1));
    put("gpu_mem_gib", opt(g.mem_used_bytes, 1.0 / (1ull << 30)));
    put("gpu_power_w", opt(g.power_w, 1));
    put("gpu_temp_c", opt(g.temperature_c, 1));
    put("gpu_sm_clock_mhz", opt(g.sm_clock_mhz, 1));
    if (g.pcie_tx_bytes_per_s && g.pcie_rx_bytes_per_s)
      put("gpu_pcie_mb_per_s", double(*g.pcie_tx_bytes_per_s + *g.pcie_rx_bytes_per_s) * 1e-6);
    if (g.throttle_reasons)  // any reason but gpu_idle
      put("gpu_throttled", (*g.throttle_reasons & ~uint64_t(1)) != 0 ? 1.0 : 0.0);
  });
}

// The GPU's idle share (percent) of each window, the mean over the processes with GPU time
// (the gputime layer's executions) in it; a level, carried over windows where no process had
// its GPU span (GpuIdle says which windows count).
void add_gpu_idle(const RecordingReader& rec, int64_t start, uint64_t window_ns,
                  int64_t windows, WindowMetrics& m) {
  GpuIdle idle(start, window_ns);
  // duty-cycled processes: only what was collected counts (slices by start: in order)
  each_gpu_slice(rec, [&](const GpuSliceRow& r) { idle.collected(r.pid, r.ts_ns, r.dur_ns, 0); });
  each_gpu_activity(rec, [&](const GpuActivityRow& r) {
    if (gpu_execution(r)) idle.add(r.pid, r.ts_ns, r.dur_ns);
  });
  for (uint32_t pid : idle.pids()) idle.ended(pid);  // (a recording: every row is in)
  auto range = idle.window_range();
  if (!range) return;
  WindowMetric& wm = m["gpu_idle_pct"];
  wm.level = true;
  // (the recording's windows only: a row's time far off it, a damaged one, asks for nothing)
  for (int64_t w = std::max<int64_t>(range->first, 0); w <= std::min(range->second, windows); ++w)
    if (auto share = idle.mean_idle_share(w)) wm.add(w, 100 * *share);
}

// Each layer's call rate and mean log duration. Returns (first call, last call's end).
std::pair<int64_t, int64_t> add_calls(const RecordingReader& rec, int64_t start,
                                      uint64_t window_ns, WindowMetrics& m) {
  auto window_of = [&](int64_t ts) { return (ts - start) / int64_t(window_ns); };
  double per_s = 1e9 / double(window_ns);
  int64_t last_call_end = 0, first_call = INT64_MAX;
  each_traced_call(rec, [&](const TracedCall& c) {
    int64_t ts = int64_t(c.ts_ns), dur = int64_t(c.dur_ns);
    last_call_end = std::max(last_call_end, ts + dur);
    first_call = std::min(first_call, ts);
    int64_t w = window_of(ts);
    std::string layer(c.layer);
    m[layer + "_calls_per_s"].add(w, per_s);
    m[layer + "_call_log_duration_us"].add(w, std::log(double(std::max<int64_t>(dur, 1)) / 1e3));
  });
  return {first_call, last_call_end};
}

// The metrics that vary, one column per metric from `first_window` to `windows`; a constant
// one carries no information and no variance.
std::vector<std::pair<std::string, std::vector<double>>> varying_columns(
    WindowMetrics& m, int64_t first_window, int64_t windows) {
  // Rare-event counts are 0 in most training windows, so any small amount would be far in the
  // tail; only what exceeds a noise floor counts (a few spurious retransmits or tail-loss
  // probes, a library paged in at exit, a reclaim pass of microseconds are normal).
  const std::map<std::string, double> noise_floor = {{"tcp_retransmits_per_s", 50},
                                                     {"pagein_mb_per_s", 4},
                                                     {"reclaim_ms_per_s", 1},
                                                     {"page_faults_per_s", 1000}};
  std::vector<std::pair<std::string, std::vector<double>>> columns;
  for (auto& [name, wm] : m) {
    std::vector<double> col(size_t(windows), 0.0);
    double last = 0;
    bool mean = wm.level || name.ends_with("log_duration_us");
    for (int64_t w = 0; w < windows; ++w) {
      auto it = wm.by_window.find(w);
      if (it != wm.by_window.end()) {
        last = mean ? it->second.first / it->second.second : it->second.first;
        col[size_t(w)] = last;
      } else {
        col[size_t(w)] = wm.level ? last : 0.0;
      }
    }
    col.erase(col.begin(), col.begin() + first_window);  // levels carried over, then dropped
    if (auto floor = noise_floor.find(name); floor != noise_floor.end())
      for (double& v : col) v = std::max(0.0, v - floor->second);
    bool varies = false;
    for (double v : col) varies |= v != col.front();
    if (varies) columns.emplace_back(name, std::move(col));
  }
  return columns;
}

}  // namespace

FeatureTable window_features(const RecordingReader& rec, uint64_t window_ns) {
  FeatureTable t;
  t.group = t.layer = t.name = "window";
  int64_t start = rec.meta_ns("start_monotonic_ns"), end = rec.meta_ns("end_monotonic_ns");
  auto window_of = [&](int64_t ts) { return (ts - start) / int64_t(window_ns); };
  WindowMetrics m;
  add_host_samples(rec, start, window_ns, m);
  add_gpu_samples(rec, start, window_ns, m);
  constexpr int64_t kMaxWindows = 10'000'000;  // (a day at 0.1 s is 864,000)
  add_gpu_idle(rec, start, window_ns,
               end > start ? std::min((end - start) / int64_t(window_ns), kMaxWindows) : 0, m);
  auto [first_call, last_call_end] = add_calls(rec, start, window_ns, m);
  // Whole windows only, up to the last traced call: what follows is the job's exit (rates
  // falling to nothing, exit paths paging in code never run before), not its behaviour;
  if (last_call_end > start) end = std::min(end, last_call_end);
  int64_t windows = end > start ? (end - start) / int64_t(window_ns) : 0;
  // More than kMaxWindows is a damaged recording or a tiny --window.
  if (windows > kMaxWindows)
    fail("{}: {:.0f} s from its start to its last traced call make {} windows of {:g} s, more "
         "than {} (is the recording damaged? else pass a larger --window)",
         rec.path(), double(end - start) / 1e9, windows, double(window_ns) / 1e9, kMaxWindows);
  // and from the window of the first traced call: what precedes it is the job starting
  // (imports, loading: page faults and CPU without calls), not its behaviour, and a model that
  // learnt it would be too wide to see a noisy neighbour later.
  int64_t first_window =
      first_call != INT64_MAX && first_call > start ? std::min(windows, window_of(first_call)) : 0;
  auto columns = varying_columns(m, first_window, windows);
  t.values.resize(windows - first_window, Eigen::Index(columns.size()));
  for (size_t c = 0; c < columns.size(); ++c) {
    t.feature_names.push_back(columns[c].first);
    for (Eigen::Index r = 0; r < t.values.rows(); ++r)
      t.values(r, Eigen::Index(c)) = columns[c].second[size_t(r)];
  }
  for (int64_t w = first_window; w < windows; ++w) {
    t.ts_ns.push_back(uint64_t(start + w * int64_t(window_ns)));
    t.dur_ns.push_back(window_ns);
  }
  return t;
}

}  // namespace eacgm::detect
