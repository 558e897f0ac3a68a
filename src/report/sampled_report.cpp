// Min/mean/max per metric and subject from the host_samples table.
#include "report/sampled_report.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "store/reader.h"
#include "store/table_readers.h"

namespace eacgm {
namespace {

class MetricAccumulator {
 public:
  void add(const std::string& scope, const std::string& subject, const std::string& metric,
           const std::string& unit, double value) {
    auto [it, fresh] = index_.try_emplace({scope, subject, metric}, stats_.size());
    if (fresh) stats_.push_back({scope, subject, metric, unit, 0, value, 0, value});
    MetricStats& s = stats_[it->second];
    ++s.intervals;
    s.min = std::min(s.min, value);
    s.max = std::max(s.max, value);
    s.mean += (value - s.mean) / double(s.intervals);  // running mean
  }
  std::vector<MetricStats> take() { return std::move(stats_); }

 private:
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index_;
  std::vector<MetricStats> stats_;
};

}  // namespace

std::vector<MetricStats> host_metric_stats(const RecordingReader& rec) {
  MetricAccumulator acc;
  each_host_sample(
      rec,
      [&](const HostSampleRow& r) {
        if (r.interval_ns == 0) return;
        double dt = double(r.interval_ns), per_s = 1e9 / dt, mb_s = per_s / 1e6;
        auto v = [](uint64_t x) { return double(x); };
        switch (r.scope) {
          case HostScope::Process: {
            const std::string scope = "process", who = fmt::format("{} (pid {})", r.name, r.id);
            acc.add(scope, who, "cpu", "%", 100 * v(r.oncpu_ns) / dt);
            if (r.runq_waits > 0) {
              acc.add(scope, who, "run-queue wait, mean", "us",
                      v(r.runq_wait_ns) / v(r.runq_waits) / 1e3);
              acc.add(scope, who, "run-queue wait, max", "us", v(r.runq_max_ns) / 1e3);
            }
            acc.add(scope, who, "voluntary switches", "/s", v(r.voluntary_switches) * per_s);
            acc.add(scope, who, "involuntary switches", "/s", v(r.involuntary_switches) * per_s);
            acc.add(scope, who, "socket tx", "MB/s", v(r.tx_bytes) * mb_s);
            acc.add(scope, who, "socket rx", "MB/s", v(r.rx_bytes) * mb_s);
            acc.add(scope, who, "block I/O", "MB/s", v(r.io_bytes) * mb_s);
            acc.add(scope, who, "TCP retransmits", "/s", v(r.tcp_retransmits) * per_s);
            acc.add(scope, who, "page faults", "/s", v(r.page_faults) * per_s);
            acc.add(scope, who, "memory reclaim", "ms/s", v(r.reclaim_ns) / 1e6 * per_s);
            acc.add(scope, who, "page-cache fills", "MB/s", v(r.pagein_bytes) * mb_s);
            break;
          }
          case HostScope::NetDevice:
            acc.add("net", r.name, "tx", "MB/s", v(r.tx_bytes) * mb_s);
            acc.add("net", r.name, "rx", "MB/s", v(r.rx_bytes) * mb_s);
            break;
          case HostScope::Disk:
            acc.add("disk", r.name, "read", "MB/s", v(r.read_bytes) * mb_s);
            acc.add("disk", r.name, "write", "MB/s", v(r.write_bytes) * mb_s);
            if (r.io_ops > 0) {
              acc.add("disk", r.name, "latency, mean", "ms", v(r.io_latency_ns) / v(r.io_ops) / 1e6);
              acc.add("disk", r.name, "latency, max", "ms", v(r.io_latency_max_ns) / 1e6);
            }
            break;
          case HostScope::Cpu:  // (rows only where it stopped)
            acc.add("cpu", r.name, "stopped", "ms", v(r.stall_ns) / 1e6);
            break;
        }
      },
      SampleOrder::by_subject);
  return acc.take();
}

std::vector<MetricStats> gpu_metric_stats(const RecordingReader& rec) {
  MetricAccumulator acc;
  std::map<uint32_t, std::string> names;
  each_gpu_device(rec, [&](const GpuDevice& d) {
    names[d.index] = fmt::format("GPU {} ({})", d.index, d.name);
  });
  auto gpu_name = [&](uint32_t gpu) {
    auto it = names.find(gpu);
    return it != names.end() ? it->second : fmt::format("GPU {}", gpu);
  };
  each_gpu_sample(
      rec,
      [&](const GpuSample& g) {
        std::string who = gpu_name(g.gpu);
        auto put = [&](const auto& value, const char* metric, const char* unit, double scale) {
          if (value) acc.add("gpu", who, metric, unit, double(*value) * scale);
        };
        put(g.sm_util_pct, "SM util", "%", 1);
        put(g.mem_util_pct, "memory util", "%", 1);
        put(g.mem_used_bytes, "memory used", "GiB", 1.0 / (1ull << 30));
        put(g.temperature_c, "temperature", "C", 1);
        put(g.power_w, "power", "W", 1);
        put(g.sm_clock_mhz, "SM clock", "MHz", 1);
        put(g.mem_clock_mhz, "memory clock", "MHz", 1);
        put(g.pcie_tx_bytes_per_s, "PCIe tx", "MB/s", 1e-6);
        put(g.pcie_rx_bytes_per_s, "PCIe rx", "MB/s", 1e-6);
        put(g.nvlink_tx_bytes_per_s, "NVLink tx", "MB/s", 1e-6);
        put(g.nvlink_rx_bytes_per_s, "NVLink rx", "MB/s", 1e-6);
      },
      SampleOrder::by_subject);
  each_gpu_process_sample(
      rec,
      [&](const GpuProcessSample& p) {
        std::string who = fmt::format("pid {} on GPU {}", p.pid, p.gpu);
        if (p.sm_util_pct) acc.add("gpu-proc", who, "SM util", "%", double(*p.sm_util_pct));
        if (p.mem_util_pct) acc.add("gpu-proc", who, "memory util", "%", double(*p.mem_util_pct));
        if (p.used_memory_bytes)
          acc.add("gpu-proc", who, "memory used", "MiB", double(*p.used_memory_bytes) / (1 << 20));
      },
      SampleOrder::by_subject);
  return acc.take();
}

std::vector<GpuXid> gpu_xids(const RecordingReader& rec) {
  std::vector<GpuXid> out;
  each_gpu_xid(rec, [&](const GpuXidEvent& x) {
    out.push_back({int64_t(x.ts_ns), int(x.gpu), int64_t(x.xid)});
  });
  return out;
}

void print_metric_table(const std::vector<MetricStats>& stats, const char* title, FILE* out) {
  if (stats.empty()) return;
  fmt::print(out, "\n{}:\n", title);
  fmt::print(out, "{:<8} {:<28} {:<27} {:>9} {:>11} {:>11} {:>11}\n", "scope", "subject",
             "metric", "samples", "min", "mean", "max");
  for (const auto& m : stats) {
    std::string metric = fmt::format("{} ({})", m.metric, m.unit);
    fmt::print(out, "{:<8} {:<28} {:<27} {:>9} {:>11.3f} {:>11.3f} {:>11.3f}\n", m.scope,
               m.subject, metric, m.intervals, m.min, m.mean, m.max);
  }
}

nlohmann::json metric_stats_json(const std::vector<MetricStats>& stats) {
  auto j = nlohmann::json::array();
  for (const auto& m : stats)
    j.push_back({{"scope", m.scope}, {"subject", m.subject}, {"metric", m.metric},
                 {"unit", m.unit}, {"samples", m.intervals}, {"min", m.min},
                 {"mean", m.mean}, {"max", m.max}});
  return j;
}

}  // namespace eacgm
