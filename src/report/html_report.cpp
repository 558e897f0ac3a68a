// The data behind `eacgm report --html`, cut down per pixel column, and the page around it.
#include "report/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "report/collectives.h"
#include "report/gpu_time.h"
#include "report/html_gpu_time.h"
#include "report/html_json.h"
#include "report/profile.h"
#include "report/report.h"
#include "store/anomalies.h"
#include "store/reader.h"
#include "store/rows.h"
#include "store/table_readers.h"
#include "util/error.h"
#include "util/output_file.h"

// The page's assets, compiled in from the files CMake names (the chart library from npm, the
// page's own script and style): .incbin keeps a 1 MB library out of a generated C++ array.
#define EACGM_EMBED(name, path)                                                                    \
  asm(".pushsection .rodata\n.balign 16\n.global " #name "_begin\n.hidden " #name "_begin\n" #name \
      "_begin:\n.incbin \"" path "\"\n.global " #name "_end\n.hidden " #name "_end\n" #name        \
      "_end:\n.byte 0\n.popsection\n");                                                            \
  extern "C" const char name##_begin[], name##_end[];
EACGM_EMBED(eacgm_echarts_js, EACGM_ECHARTS_JS)
EACGM_EMBED(eacgm_report_js, EACGM_REPORT_JS)
EACGM_EMBED(eacgm_report_css, EACGM_REPORT_CSS)

namespace eacgm {
namespace {

using nlohmann::json;

std::string_view embedded(const char* begin, const char* end) {
  return {begin, size_t(end - begin)};
}

// Per column of the time axis, the lowest and the highest value with their times: drawn at the
// page's width, a series of millions of points looks as the whole series does (its envelope and
// every spike) at a size that does not grow with the recording.
class ColumnDecimator {
 public:
  ColumnDecimator(double span_s, size_t columns)
      : span_s_(span_s > 0 ? span_s : 1), columns_(std::max<size_t>(columns, 1)) {}

  void add(double t_s, double v) {
    if (!std::isfinite(t_s) || !std::isfinite(v)) return;
    double pos =
        std::clamp(t_s / span_s_ * double(columns_.size()), 0.0, double(columns_.size() - 1));
    Column& c = columns_[size_t(pos)];
    ++total_;
    if (c.n++ == 0) {
      c.t_lo = c.t_hi = t_s;
      c.lo = c.hi = v;
      return;
    }
    if (v < c.lo) c.lo = v, c.t_lo = t_s;
    if (v > c.hi) c.hi = v, c.t_hi = t_s;
  }

  uint64_t total() const { return total_; }

  // [[t_s, value], ...] in time order
  json points(int digits = 3) const {
    json out = json::array();
    auto add = [&](double t, double v) { out.push_back({rounded(t, 6), rounded(v, digits)}); };
    for (const Column& c : columns_) {
      if (c.n == 0) continue;
      if (c.n == 1 || (c.t_lo == c.t_hi && c.lo == c.hi)) {
        add(c.t_lo, c.lo);
      } else if (c.t_lo <= c.t_hi) {
        add(c.t_lo, c.lo), add(c.t_hi, c.hi);
      } else {
        add(c.t_hi, c.hi), add(c.t_lo, c.lo);
      }
    }
    return out;
  }

 private:
  struct Column {
    uint64_t n = 0;
    double t_lo = 0, lo = 0, t_hi = 0, hi = 0;
  };
  double span_s_;
  std::vector<Column> columns_;
  uint64_t total_ = 0;
};

// Latency histograms: 8 bins per decade from 10 ns (bin i starts at 10 * 10^(i/8) ns).
constexpr int kBinsPerDecade = 8, kBins = 8 * 12;
int latency_bin(uint64_t dur_ns) {
  if (dur_ns <= 10) return 0;
  return std::clamp(int(std::floor(kBinsPerDecade * std::log10(double(dur_ns) / 10.0))), 0,
                    kBins - 1);
}

std::string human_duration(double s) {
  if (s < 1) return fmt::format("{:.0f} ms", s * 1e3);
  if (s < 120) return fmt::format("{:.1f} s", s);
  return fmt::format("{:.1f} min", s / 60);
}

// The recording's time line: from its start (meta) to its last event or sample.
struct TimeBase {
  int64_t t0 = 0;
  double span_s = 1;
  double at(int64_t ts_ns) const { return double(ts_ns - t0) / 1e9; }
};

TimeBase time_base(const RecordingReader& rec) {
  auto [first, last] = recorded_extent(rec);
  TimeBase b;
  b.t0 = rec.meta_ns("start_monotonic_ns");
  if (b.t0 == 0 || (first != INT64_MAX && first < b.t0)) b.t0 = first == INT64_MAX ? 0 : first;
  last = std::max(last, rec.meta_ns("end_monotonic_ns"));
  b.span_s = std::max(1e-3, double(last - b.t0) / 1e9);
  return b;
}

json summary(const RecordingReader& rec, const TimeBase& tb) {
  json s;
  s["recording"] = rec.path();
  for (const char* key :
       {"command", "hostname", "layers", "events", "dropped_events", "recording_state",
        "exit_status", "stopped_by_signal", "eacgm_version", "detect_trained_on", "merged_hosts"})
    if (auto v = rec.meta_or(key, ""); !v.empty()) s[key] = v;
  if (int64_t wall = rec.meta_ns("start_realtime_ns"); wall > 0) {
    time_t secs = time_t(wall / 1'000'000'000);
    char buf[64];
    struct tm tm_utc;
    if (gmtime_r(&secs, &tm_utc) && strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm_utc))
      s["started"] = buf;
  }
  s["duration_s"] = rounded(tb.span_s, 3);
  s["duration"] = human_duration(tb.span_s);
  json procs = json::array();
  // one line per process: its latest row (after an exec, what it became)
  each_process(rec, [&](const RecordedProcess& p) {
    if (procs.size() >= 200) return;
    std::string cmd = p.command;
    if (cmd.size() > 300) cmd = cmd.substr(0, 300) + "...";
    json j{{"pid", p.pid}, {"name", p.name}, {"command", cmd}};
    if (p.rank >= 0) j["rank"] = p.rank;
    if (p.exit_code >= 0) j["exit_code"] = p.exit_code;
    if (!p.host.empty()) j["host"] = p.host;
    procs.push_back(j);
  });
  s["processes"] = procs;
  return s;
}

struct AnomalyPoint {
  int64_t ts_ns, dur_ns;
  std::string layer, name, cause, features;
  double score, threshold;
};

std::vector<AnomalyPoint> read_anomalies(const RecordingReader& rec, size_t limit, size_t& total) {
  std::vector<AnomalyPoint> out;
  total = 0;
  total = anomaly_count(rec);
  for (const AnomalyRow& a : strongest_anomalies(rec, limit))
    out.push_back({int64_t(a.ts_ns), int64_t(a.dur_ns), a.layer, a.name, a.cause, a.features,
                   a.score, a.threshold});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ts_ns < b.ts_ns; });
  return out;
}

// An anomaly's strongest features as detect prints them (measured and usual, in their units).
std::string top_features(const std::string& text, size_t n) { return features_text(text, n); }

const char* const kCallLayers[] = {"cuda", "comm", "torch", "python"};

// Per layer: its top operations' latency over time and their distributions, and its anomalies.
json layer_sections(const RecordingReader& rec, const TimeBase& tb,
                    const std::vector<OperationStats>& ops,
                    const std::vector<AnomalyPoint>& anomalies, const HtmlReportOptions& opt) {
  json layers = json::array();
  for (const char* layer : kCallLayers) {
    std::vector<const OperationStats*> top;
    for (const auto& o : ops)
      if (o.layer == layer && top.size() < opt.top_operations) top.push_back(&o);
    if (top.empty()) continue;
    std::map<std::string, size_t> index;
    std::vector<ColumnDecimator> over_time;
    std::vector<std::vector<uint64_t>> hist(top.size(), std::vector<uint64_t>(kBins, 0));
    for (const auto* o : top) {
      index[o->name] = over_time.size();
      over_time.emplace_back(tb.span_s, opt.columns);
    }
    each_call_in_layer(rec, layer, [&](const TracedCall& c) {
      auto it = index.find(std::string(c.name));
      if (it == index.end()) return;
      over_time[it->second].add(tb.at(int64_t(c.ts_ns)), double(c.dur_ns) / 1e3);
      ++hist[it->second][size_t(latency_bin(c.dur_ns))];
    });
    json series = json::array(), dists = json::array();
    int lo_bin = kBins, hi_bin = -1;
    for (const auto& h : hist)
      for (int b = 0; b < kBins; ++b)
        if (h[size_t(b)]) lo_bin = std::min(lo_bin, b), hi_bin = std::max(hi_bin, b);
    json edges = json::array();
    for (int b = lo_bin; b <= hi_bin + 1 && hi_bin >= 0; ++b)
      edges.push_back(rounded(10.0 * std::pow(10.0, double(b) / kBinsPerDecade) / 1e3, 4));
    for (size_t i = 0; i < top.size(); ++i) {
      series.push_back({{"name", top[i]->name},
                        {"calls", over_time[i].total()},
                        {"points", over_time[i].points()}});
      json counts = json::array();
      for (int b = lo_bin; b <= hi_bin && hi_bin >= 0; ++b) counts.push_back(hist[i][size_t(b)]);
      dists.push_back({{"name", top[i]->name}, {"counts", counts}});
    }
    json marks = json::array();
    for (size_t i = 0; i < anomalies.size(); ++i)
      if (anomalies[i].layer == layer)
        marks.push_back({rounded(tb.at(anomalies[i].ts_ns), 6),
                         rounded(double(anomalies[i].dur_ns) / 1e3, 3), i});
    size_t n_ops = 0;
    for (const auto& o : ops) n_ops += o.layer == layer;
    layers.push_back({{"layer", layer},
                      {"operations", n_ops},
                      {"series", series},
                      {"histogram_edges_us", edges},
                      {"histograms", dists},
                      {"anomalies", marks}});
  }
  return layers;
}

// One time series per subject and metric, cut down per column.
class SeriesSet {
 public:
  SeriesSet(const TimeBase& tb, size_t columns) : tb_(tb), columns_(columns) {}
  void add(const std::string& chart, const std::string& series, int64_t ts_ns, double v) {
    auto& by_series = charts_[chart];
    auto it = by_series.find(series);
    if (it == by_series.end())
      it = by_series.emplace(series, ColumnDecimator(tb_.span_s, columns_)).first;
    it->second.add(tb_.at(ts_ns), v);
  }
  bool empty() const { return charts_.empty(); }
  // [{id, series: [{name, points}]}] in the order `order` names the charts
  json charts(const std::vector<std::pair<std::string, std::string>>& order) const {
    json out = json::array();
    for (const auto& [id, title] : order) {
      auto it = charts_.find(id);
      if (it == charts_.end()) continue;
      json series = json::array();
      for (const auto& [name, d] : it->second)
        series.push_back({{"name", name}, {"points", d.points()}});
      out.push_back({{"id", id}, {"title", title}, {"series", series}});
    }
    return out;
  }

 private:
  const TimeBase& tb_;
  size_t columns_;
  std::map<std::string, std::map<std::string, ColumnDecimator>> charts_;
};

json gpu_section(const RecordingReader& rec, const TimeBase& tb, const HtmlReportOptions& opt,
                 json& notes) {
  std::map<int64_t, std::string> names;
  each_gpu_device(rec, [&](const GpuDevice& d) { names[d.index] = d.name; });
  SeriesSet set(tb, opt.columns);
  each_gpu_sample(rec, [&](const GpuSample& g) {
    int64_t ts = int64_t(g.ts_ns);
    std::string gpu = fmt::format("GPU {}", g.gpu);
    auto put = [&](const char* chart, const std::string& series, const auto& value, double scale) {
      if (value) set.add(chart, series, ts, double(*value) * scale);
    };
    put("gpu_util", gpu + " SM", g.sm_util_pct, 1);
    put("gpu_util", gpu + " memory", g.mem_util_pct, 1);
    put("gpu_memory", gpu, g.mem_used_bytes, 1.0 / (1 << 30));
    put("gpu_power", gpu, g.power_w, 1);
    put("gpu_temperature", gpu, g.temperature_c, 1);
    put("gpu_clocks", gpu + " SM", g.sm_clock_mhz, 1);
    put("gpu_clocks", gpu + " memory", g.mem_clock_mhz, 1);
    if (g.throttle_reasons)
      set.add("gpu_throttle", gpu, ts, double(std::popcount(*g.throttle_reasons)));
    put("gpu_pcie", gpu + " tx", g.pcie_tx_bytes_per_s, 1e-6);
    put("gpu_pcie", gpu + " rx", g.pcie_rx_bytes_per_s, 1e-6);
  });
  // per process on each GPU (NVML's accounting): the processes with most memory and SM time
  std::map<int64_t, std::string> process_names;
  each_process(rec, [&](const RecordedProcess& p) {
    if (!p.name.empty()) process_names[p.pid] = p.name;
  });
  // (gpu, pid) -> mean memory in GB + mean SM util (%), over its samples
  std::map<std::pair<int64_t, int64_t>, std::tuple<double, double, size_t>> use;
  each_gpu_process_sample(rec, [&](const GpuProcessSample& p) {
    auto& [memory, sm, n] = use[{p.gpu, p.pid}];
    memory += double(p.used_memory_bytes.value_or(0));
    sm += double(p.sm_util_pct.value_or(0));
    ++n;
  });
  std::vector<std::tuple<double, int64_t, int64_t>> busiest;  // (weight, gpu, pid)
  for (const auto& [key, u] : use)
    busiest.emplace_back(std::get<0>(u) / double(std::get<2>(u)) / 1e9 +
                             std::get<1>(u) / double(std::get<2>(u)),
                         key.first, key.second);
  std::sort(busiest.rbegin(), busiest.rend());
  std::set<std::pair<int64_t, int64_t>> shown;
  for (size_t i = 0; i < busiest.size() && i < opt.max_subjects; ++i)
    shown.insert({std::get<1>(busiest[i]), std::get<2>(busiest[i])});
  if (busiest.size() > shown.size())
    notes.push_back(fmt::format("GPU processes: {} of {} drawn (the most memory and SM "
                                "time); all are in the gpu_process_samples table",
                                shown.size(), busiest.size()));
  each_gpu_process_sample(rec, [&](const GpuProcessSample& p) {
    if (!shown.count({p.gpu, p.pid})) return;
    auto name = process_names.find(p.pid);
    std::string who = fmt::format("{} ({}) on GPU {}",
                                  name == process_names.end() ? "pid" : name->second, p.pid, p.gpu);
    int64_t ts = int64_t(p.ts_ns);
    if (p.sm_util_pct) set.add("gpu_proc_sm", who, ts, double(*p.sm_util_pct));
    if (p.mem_util_pct) set.add("gpu_proc_mem_util", who, ts, double(*p.mem_util_pct));
    if (p.used_memory_bytes)
      set.add("gpu_proc_memory", who, ts, double(*p.used_memory_bytes) / (1 << 30));
  });
  if (set.empty()) return nullptr;
  json devices = json::array();
  for (const auto& [gpu, name] : names) devices.push_back({{"gpu", gpu}, {"name", name}});
  return {{"devices", devices},
          {"charts", set.charts({{"gpu_util", "utilization (%)"},
                                 {"gpu_memory", "memory used (GiB)"},
                                 {"gpu_power", "power (W)"},
                                 {"gpu_temperature", "temperature (°C)"},
                                 {"gpu_clocks", "clocks (MHz)"},
                                 {"gpu_throttle", "active throttle reasons (count)"},
                                 {"gpu_pcie", "PCIe (MB/s)"},
                                 {"gpu_proc_sm", "SM utilization per process (%)"},
                                 {"gpu_proc_mem_util", "memory utilization per process (%)"},
                                 {"gpu_proc_memory", "memory used per process (GiB)"}})}};
}

json host_section(const RecordingReader& rec, const TimeBase& tb, const HtmlReportOptions& opt,
                  json& notes) {
  // the busiest processes by CPU time have series of their own
  std::map<uint64_t, double> cpu_ns;
  each_host_sample(rec, [&](const HostSampleRow& r) {
    if (r.scope == HostScope::Process) cpu_ns[r.id] += double(r.oncpu_ns);
  });
  std::vector<std::pair<double, uint64_t>> busiest;
  for (const auto& [id, ns] : cpu_ns) busiest.push_back({ns, id});
  std::sort(busiest.rbegin(), busiest.rend());
  std::set<uint64_t> shown;
  for (size_t i = 0; i < busiest.size() && i < opt.max_subjects; ++i)
    shown.insert(busiest[i].second);
  if (busiest.size() > shown.size())
    notes.push_back(
        fmt::format("host: {} of {} processes drawn (the most CPU time); the others "
                    "are in `eacgm report`",
                    shown.size(), busiest.size()));
  SeriesSet set(tb, opt.columns);
  // recordings older than these columns have none of them (no chart of zeros)
  bool reclaim = host_samples_have(rec, "reclaim_ns"), faults = host_samples_have(rec, "page_faults");
  // Intervals without activity have no row: a subject's silence is drawn as zero, not as a
  // line from its last busy interval to its next.
  // (by scope, id and, for CPUs, name: a merged recording's hosts each have a CPU 0)
  std::map<std::tuple<HostScope, uint64_t, std::string>, int64_t> last_ts;
  std::map<std::string, int64_t> stall_interval;  // per CPU, by name: its sampling interval
  each_host_sample(rec, [&](const HostSampleRow& r) {
    if (r.interval_ns == 0 || r.scope == HostScope::Disk) return;
    bool process = r.scope == HostScope::Process;
    if (process && !shown.count(r.id)) return;
    int64_t ts = int64_t(r.ts_ns);
    double dt = double(r.interval_ns);
    auto rate = [&](uint64_t v, double scale) { return double(v) / dt * 1e9 * scale; };
    std::string who = process ? fmt::format("{} ({})", r.name, r.id) : r.name;
    auto put = [&](int64_t at, bool idle) {
      auto v = [&](double x) { return idle ? 0.0 : x; };
      if (r.scope == HostScope::Cpu) {  // (rows only where it stopped: a chart only then)
        set.add("host_stall", who, at, v(rate(r.stall_ns, 1e-6)));
      } else if (process) {
        set.add("host_cpu", who, at, v(100 * double(r.oncpu_ns) / dt));
        set.add("host_runq", who, at, v(rate(r.runq_wait_ns, 1e-6)));
        set.add("host_socket", who + " tx", at, v(rate(r.tx_bytes, 1e-6)));
        set.add("host_socket", who + " rx", at, v(rate(r.rx_bytes, 1e-6)));
        if (reclaim) set.add("host_reclaim", who, at, v(rate(r.reclaim_ns, 1e-6)));
        if (faults) set.add("host_faults", who, at, v(rate(r.page_faults, 1)));
      } else {
        set.add("host_nic", who + " tx", at, v(rate(r.tx_bytes, 1e-6)));
        set.add("host_nic", who + " rx", at, v(rate(r.rx_bytes, 1e-6)));
      }
    };
    auto [last, first] = last_ts.try_emplace(
        {r.scope, r.id, r.scope == HostScope::Cpu ? r.name : std::string()}, ts);
    int64_t interval = int64_t(dt);
    if (!first && ts - last->second > 2 * interval) {
      put(last->second + interval, true);
      put(ts - interval, true);
    }
    // (a CPU has rows only where it stopped: each stop rises from zero and falls back to it)
    if (first && r.scope == HostScope::Cpu) put(ts - interval, true);
    last->second = ts;
    put(ts, false);
    if (r.scope == HostScope::Cpu) stall_interval[r.name] = interval;
  });
  for (const auto& [name, interval] : stall_interval)
    for (const auto& [key, ts] : last_ts)
      if (std::get<0>(key) == HostScope::Cpu && std::get<2>(key) == name)
        set.add("host_stall", name, ts + interval, 0.0);
  if (set.empty()) return nullptr;
  return {{"charts", set.charts({{"host_cpu", "CPU per process (%)"},
                                 {"host_runq", "run-queue wait per process (ms per s)"},
                                 {"host_reclaim", "memory reclaim per process (ms per s)"},
                                 {"host_faults", "page faults per process (per s)"},
                                 {"host_socket", "socket traffic per process (MB/s)"},
                                 {"host_nic", "network interfaces (MB/s)"},
                                 {"host_stall", "CPU stalls: time each CPU stopped (ms per s)"}})}};
}

// Per collective: each rank's wait for the last rank to join, per step (a heat map in which a
// straggling rank is the row that never waits while the others do), what each rank straggled,
// and the bandwidth over time.
json collectives_section(const RecordingReader& rec, const TimeBase& tb,
                         const HtmlReportOptions& opt, json& notes) {
  if (!rec.has_table("comm_calls")) return nullptr;
  Collectives c(rec);
  for (const auto& n : c.notes()) notes.push_back("collectives: " + n);
  std::map<std::string, ColumnDecimator> bandwidth;
  std::map<std::string, int64_t> bw_bytes;
  each_comm_call(rec, [&](const CommCallRow& r) {
    if (r.bytes <= 0 || r.dur_ns == 0) return;
    std::string name(r.name);
    auto it = bandwidth.find(name);
    if (it == bandwidth.end())
      it = bandwidth.emplace(name, ColumnDecimator(tb.span_s, opt.columns)).first;
    it->second.add(tb.at(int64_t(r.ts_ns)), double(r.bytes) / double(r.dur_ns));
    bw_bytes[name] += r.bytes;
  });
  // one heat map per communicator's collective as the text report names it (communicators of
  // one size told apart by their identity), its rows the ranks (with their hosts when merged)
  json heatmaps = json::array();
  for (const auto& [key, sides] : c.rank_waits()) {
    size_t steps = 0;
    for (const auto& r : sides) steps = std::max(steps, r.waits_ns.size());
    if (steps == 0 || sides.empty()) continue;
    size_t nranks = sides.size();
    size_t cols = std::min(steps, std::max<size_t>(20, std::min<size_t>(500, 200000 / nranks)));
    size_t per_col = (steps + cols - 1) / std::max<size_t>(cols, 1);
    json cells = json::array(), ranks = json::array(), straggled = json::array();
    double max_ms = 0;
    for (size_t row = 0; row < nranks; ++row) {
      const RankWaits& r = sides[row];
      ranks.push_back(fmt::format("rank {}{}", r.rank, c.on_host(r.pid)));
      const auto& v = r.waits_ns;
      for (size_t col = 0; col * per_col < v.size(); ++col) {
        uint64_t m = 0;
        for (size_t k = col * per_col; k < std::min(v.size(), (col + 1) * per_col); ++k)
          m = std::max(m, v[k]);
        max_ms = std::max(max_ms, double(m) / 1e6);
        cells.push_back({col, row, rounded(double(m) / 1e6, 3)});
      }
      straggled.push_back({{"rank", r.rank},
                           {"label", ranks.back()},
                           {"calls", r.calls},
                           {"joined_last", r.joined_last},
                           {"waited_ms", rounded(double(r.waited_ns) / 1e6, 3)},
                           {"straggled_ms", rounded(double(r.straggled_ns) / 1e6, 3)}});
    }
    heatmaps.push_back({{"name", key.first},
                        {"nranks", key.second},
                        {"steps", steps},
                        {"steps_per_column", per_col},
                        {"ranks", ranks},
                        {"cells", cells},
                        {"max_ms", rounded(max_ms, 3)},
                        {"ranks_detail", straggled}});
  }
  std::vector<std::pair<int64_t, std::string>> by_bytes;
  for (const auto& [name, b] : bw_bytes) by_bytes.push_back({b, name});
  std::sort(by_bytes.rbegin(), by_bytes.rend());
  json bw = json::array();
  for (size_t i = 0; i < by_bytes.size() && i < opt.top_operations; ++i)
    bw.push_back(
        {{"name", by_bytes[i].second}, {"points", bandwidth.at(by_bytes[i].second).points(4)}});
  if (heatmaps.empty() && bw.empty()) return nullptr;
  return {{"heatmaps", heatmaps}, {"bandwidth", bw}};
}

// A profile (CPU, or off-CPU): the top functions, and the samples' stacks merged into a tree
// from the outermost frame (the flame graph), nodes under 1/2000 of the weight left out. Values
// are samples (CPU) or nanoseconds blocked (off-CPU).
json profile_section(const RecordingReader& rec, json& notes, ProfileKind kind) {
  CpuProfile p(rec, kind);
  const bool off = kind == ProfileKind::OffCpu;
  if (p.empty()) {
    if (!off)
      notes.push_back(
          "CPU profile: none in this recording (record with --sample-hz above 0, "
          "the default)");
    return nullptr;
  }
  const double n = double(p.total_weight());
  json functions = json::array();
  for (const auto& f : p.top_functions(50)) {
    functions.push_back({{"name", f.name}, {"where", f.where}, {"python", f.python},
                         {"self", f.self}, {"total", f.total},
                         {"self_pct", rounded(100.0 * double(f.self) / n, 2)},
                         {"total_pct", rounded(100.0 * double(f.total) / n, 2)}});
  }
  struct Node {
    uint32_t frame = 0;
    uint64_t value = 0;
    std::map<std::pair<std::string, std::string>, Node> children;  // by (name, where)
  };
  Node root;
  std::vector<uint64_t> weight(p.stacks().size(), 0);
  for (const auto& s : p.samples()) weight[s.stack] += s.weight;
  for (size_t i = 0; i < p.stacks().size(); ++i) {
    if (!weight[i]) continue;
    Node* at = &root;
    at->value += weight[i];
    const auto& stack = p.stacks()[i];
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
      const ProfileFrame& f = p.frames()[*it];
      Node& child = at->children[{f.name, f.file}];
      child.frame = *it;
      child.value += weight[i];
      at = &child;
    }
  }
  const uint64_t least = std::max<uint64_t>(1, uint64_t(n / 2000));
  std::function<json(const Node&)> to_json = [&](const Node& node) {
    json children = json::array();
    for (const auto& [key, c] : node.children)
      if (c.value >= least) {
        const ProfileFrame& f = p.frames()[c.frame];
        json j = to_json(c);
        j["n"] = f.name;
        j["w"] = f.file;
        j["p"] = f.python;
        children.push_back(std::move(j));
      }
    return json{{"v", node.value}, {"c", children}};
  };
  auto threads = p.threads();
  json by_thread = json::array();
  for (const auto& t : threads) {
    if (by_thread.size() == 16) break;
    by_thread.push_back({{"pid", t.pid},
                         {"tid", t.tid},
                         {"name", t.name},
                         {"weight", t.weight},
                         {"pct", rounded(100.0 * double(t.weight) / n, 2)},
                         {"python", t.python},
                         {"native", t.native}});
  }
  json out{{"samples", p.samples().size()}, {"threads", threads.size()},
           {"by_thread", by_thread},        {"hz", p.hz()},
           {"functions", functions},        {"tree", to_json(root)}};
  if (off) out["blocked_ns"] = p.total_weight();
  return out;
}

// The Python stack most calls of each operation of a layer were made from (its frames as
// text, innermost first); launches_by_kernel: the cuda layer's kernels'.
std::map<std::string, json> usual_stacks(const RecordingReader& rec, const std::string& layer,
                                         bool launches_by_kernel = false) {
  std::map<std::string, json> out;
  std::map<int64_t, json> frames;
  for (const auto& [name, id] : usual_python_stacks(rec, layer, launches_by_kernel)) {
    auto found = frames.try_emplace(id, json::array());
    json& stack = found.first->second;
    if (found.second)
      for (const auto& f : python_stack(rec, id, 64))
        stack.push_back(fmt::format("{} ({}:{})", f.name, f.file, std::max<int64_t>(f.line, 0)));
    out[name] = stack;
  }
  return out;
}

json top_tables(const RecordingReader& rec, const std::vector<OperationStats>& ops) {
  json out;
  json kernels = json::array();
  if (rec.has_table("cuda_calls")) {
    auto stacks = usual_stacks(rec, "cuda", true);  // launches
    for (const auto& k : top_kernels(rec, 20)) {
      json r{{"kernel", k.kernel},
             {"launches", k.launches},
             {"launch_ms", rounded(double(k.total_ns) / 1e6, 3)}};
      if (auto it = stacks.find(k.kernel); it != stacks.end()) r["stack"] = it->second;
      kernels.push_back(r);
    }
  }
  out["kernels"] = kernels;
  // the gputime layer: kernels by their time on the GPU, and how busy each GPU was
  GpuTimeSummary gpu = gpu_time_summary(rec, 20);
  json gpu_kernels = json::array();
  for (const auto& k : gpu.kernels)
    gpu_kernels.push_back({{"kernel", k.kernel},
                           {"executions", k.executions},
                           {"gpu_ms", rounded(double(k.total_ns) / 1e6, 3)},
                           {"p50_us", rounded(double(k.p50_ns) / 1e3, 3)},
                           {"max_us", rounded(double(k.max_ns) / 1e3, 3)},
                           {"queue_p50_us", rounded(double(k.queue_p50_ns) / 1e3, 3)}});
  out["gpu_kernels"] = gpu_kernels;
  json devices = json::array();
  for (const auto& d : gpu.devices)
    devices.push_back({{"device", d.device},
                       {"busy_pct", rounded(d.span_ns ? 100.0 * double(d.busy_ns) / double(d.span_ns) : 0, 1)},
                       {"span_s", rounded(double(d.span_ns) / 1e9, 3)}});
  out["gpu_devices"] = devices;
  for (const char* layer : kCallLayers) {
    auto stacks = usual_stacks(rec, layer);
    // Python functions: where they are defined (file and first line)
    std::map<std::string, std::string> where;
    if (std::string_view(layer) == "python")
      for (const auto& [name, at] : python_definitions(rec))
        where[name] = fmt::format("{}:{}", at.first, at.second);
    json rows = json::array();
    for (const auto& o : ops) {
      if (o.layer != layer) continue;
      json r{{"name", o.name},
             {"calls", o.count},
             {"total_ms", rounded(double(o.total_ns) / 1e6, 3)},
             {"mean_us", rounded(o.mean_ns / 1e3, 3)},
             {"p99_us", rounded(double(o.p99_ns) / 1e3, 3)},
             {"max_us", rounded(double(o.max_ns) / 1e3, 3)},
             {"errors", o.errors}};
      if (o.bytes > 0) r["bytes"] = o.bytes;
      if (auto it = stacks.find(o.name); it != stacks.end()) r["stack"] = it->second;
      if (auto it = where.find(o.name); it != where.end()) r["where"] = it->second;
      rows.push_back(r);
      if (rows.size() == 25) break;
    }
    out[layer] = rows;
  }
  return out;
}

}  // namespace

json html_report_data(const RecordingReader& rec, const HtmlReportOptions& opt) {
  TimeBase tb = time_base(rec);
  json notes = json::array();
  json data;
  data["summary"] = summary(rec, tb);
  auto ops = operation_stats(rec);
  size_t anomalies_total = 0;
  auto anomalies = read_anomalies(rec, opt.max_anomalies, anomalies_total);
  bool detected = !rec.meta_or("detect_trained_on", "").empty();
  if (!detected)
    notes.push_back(
        fmt::format("anomalies: eacgm detect has not run on this recording (run "
                    "`eacgm detect {}`, then write this page again)",
                    rec.path()));
  else if (anomalies_total > anomalies.size())
    notes.push_back(fmt::format("anomalies: the {} strongest of {} are drawn", anomalies.size(),
                                anomalies_total));
  json causes = json::array();
  // causes that differ only in their measurements as one, with their ranges
  for (const auto& g : group_causes(anomaly_cause_counts(rec))) causes.push_back({g.cause, g.count});
  data["anomaly_causes"] = causes;
  data["detected"] = detected;
  data["layers"] = layer_sections(rec, tb, ops, anomalies, opt);
  if (data["layers"].empty())
    notes.push_back("calls: none recorded (the cuda, comm, torch and python layers saw no calls)");
  data["gpu"] = gpu_section(rec, tb, opt, notes);
  if (data["gpu"].is_null())
    notes.push_back(
        "GPU: no NVML samples in this recording (no GPU, no driver, or the gpu layer was off)" +
        (rec.meta_or("gpu_unavailable_metrics", "").empty()
             ? std::string()
             : ": " + rec.meta_or("gpu_unavailable_metrics", "")));
  data["gpu_time"] = gpu_timeline_section(rec, tb.t0, std::llround(tb.span_s * 1e9),
                                          opt.gpu_time, notes);
  data["profile"] = profile_section(rec, notes, ProfileKind::Cpu);
  data["offcpu_profile"] = profile_section(rec, notes, ProfileKind::OffCpu);
  data["host"] = host_section(rec, tb, opt, notes);
  if (data["host"].is_null())
    notes.push_back("host: no samples in this recording (the host layer was off)");
  data["collectives"] = collectives_section(rec, tb, opt, notes);
  if (data["collectives"].is_null())
    notes.push_back("collectives: none recorded (no NCCL or c10d calls traced)");
  data["top"] = top_tables(rec, ops);
  json table = json::array();
  for (const auto& a : anomalies) {
    std::string chart = a.layer == "window" || a.name == a.layer ? "timeline" : "layer-" + a.layer;
    table.push_back({{"t", rounded(tb.at(a.ts_ns), 6)},
                     {"dur_ms", rounded(double(a.dur_ns) / 1e6, 3)},
                     {"layer", a.layer},
                     {"subject", std::string(anomaly_subject(a.layer, a.name))},
                     {"cause", a.cause},
                     // (an infinite score is null too: `scored` tells a late join no model
                     // judged from it)
                     {"scored", !std::isnan(a.score)},
                     {"score", rounded(a.score, 2)},
                     {"threshold", rounded(a.threshold, 2)},
                     {"features", top_features(a.features, 4)},
                     {"chart", chart}});
  }
  data["anomalies"] = table;
  data["notes"] = notes;
  return data;
}

void write_html_report(const std::string& recording, const std::string& out, bool force,
                       const HtmlReportOptions& options) {
  RecordingReader rec(recording);
  check_output_file(out, force, "--html");
  json data = html_report_data(rec, options);
  // in a <script> element only "</script" and "<!--" could end it early: every '<' of the JSON
  // (which can only stand inside its strings) is written as its escape
  std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace), escaped;
  escaped.reserve(text.size());
  for (char ch : text) ch == '<' ? escaped += "\\u003c" : escaped += ch;
  std::string title = rec.meta_or("command", recording);
  std::string title_html;
  for (char ch : title.substr(0, 120)) {
    switch (ch) {
      case '<':
        title_html += "&lt;";
        break;
      case '>':
        title_html += "&gt;";
        break;
      case '&':
        title_html += "&amp;";
        break;
      default:
        title_html += ch;
    }
  }
  write_then_rename(out, [&](std::ostream& file) {
    file << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<meta name=\"generator\" content=\"eacgm "
         << rec.meta_or("eacgm_version", "") << "\"><title>eacgm: " << title_html
         << "</title>\n<style>" << embedded(eacgm_report_css_begin, eacgm_report_css_end)
         << "</style></head>\n<body>\n<noscript>This page draws its charts with JavaScript "
            "(everything it needs is inside it: nothing is fetched).</noscript>\n"
            "<div id=\"app\"></div>\n<script type=\"application/json\" id=\"eacgm-data\">"
         << escaped << "</script>\n<script>"
         << embedded(eacgm_echarts_js_begin, eacgm_echarts_js_end) << "</script>\n<script>"
         << embedded(eacgm_report_js_begin, eacgm_report_js_end) << "</script>\n</body></html>\n";
  });
}

}  // namespace eacgm
