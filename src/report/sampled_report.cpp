// Min/mean/max per metric and subject from the host_samples table.
#include "report/sampled_report.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "store/reader.h"
#include "store/sqlite_util.h"

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
  if (!rec.has_table("host_samples")) return {};
  MetricAccumulator acc;
  rec.query(
      "SELECT interval_ns, scope, id, name, runq_wait_ns, runq_waits, runq_max_ns, "
      "voluntary_switches, involuntary_switches, oncpu_ns, tx_bytes, rx_bytes, io_bytes, "
      "read_bytes, write_bytes, io_ops, io_latency_ns, io_latency_max_ns, " +
          rec.columns_or("host_samples",
                         {"tcp_retransmits", "page_faults", "reclaim_ns", "pagein_bytes"}) +
          " FROM host_samples WHERE interval_ns > 0 ORDER BY scope, id, ts_ns",
      [&](Statement& s) {
        double dt = double(s.int_at(0)), per_s = 1e9 / dt, mb_s = per_s / 1e6;
        std::string scope(s.text_at(1)), name(s.text_at(3));
        auto v = [&](int col) { return double(s.int_at(col)); };
        if (scope == "process") {
          std::string who = fmt::format("{} (pid {})", name, s.int_at(2));
          acc.add(scope, who, "cpu", "%", 100 * v(9) / dt);
          if (v(5) > 0) {
            acc.add(scope, who, "run-queue wait, mean", "us", v(4) / v(5) / 1e3);
            acc.add(scope, who, "run-queue wait, max", "us", v(6) / 1e3);
          }
          acc.add(scope, who, "voluntary switches", "/s", v(7) * per_s);
          acc.add(scope, who, "involuntary switches", "/s", v(8) * per_s);
          acc.add(scope, who, "socket tx", "MB/s", v(10) * mb_s);
          acc.add(scope, who, "socket rx", "MB/s", v(11) * mb_s);
          acc.add(scope, who, "block I/O", "MB/s", v(12) * mb_s);
          acc.add(scope, who, "TCP retransmits", "/s", v(18) * per_s);
          acc.add(scope, who, "page faults", "/s", v(19) * per_s);
          acc.add(scope, who, "memory reclaim", "ms/s", v(20) / 1e6 * per_s);
          acc.add(scope, who, "page-cache fills", "MB/s", v(21) * mb_s);
        } else if (scope == "net") {
          acc.add(scope, name, "tx", "MB/s", v(10) * mb_s);
          acc.add(scope, name, "rx", "MB/s", v(11) * mb_s);
        } else if (scope == "disk") {
          acc.add(scope, name, "read", "MB/s", v(13) * mb_s);
          acc.add(scope, name, "write", "MB/s", v(14) * mb_s);
          if (v(15) > 0) {
            acc.add(scope, name, "latency, mean", "ms", v(16) / v(15) / 1e6);
            acc.add(scope, name, "latency, max", "ms", v(17) / 1e6);
          }
        }
      });
  return acc.take();
}

std::vector<MetricStats> gpu_metric_stats(const RecordingReader& rec) {
  if (!rec.has_table("gpu_samples")) return {};
  MetricAccumulator acc;
  std::map<int64_t, std::string> names;
  rec.query("SELECT gpu, name FROM gpu_devices", [&](Statement& s) {
    names[s.int_at(0)] = fmt::format("GPU {} ({})", s.int_at(0), s.text_at(1));
  });
  auto gpu_name = [&](int64_t gpu) {
    auto it = names.find(gpu);
    return it != names.end() ? it->second : fmt::format("GPU {}", gpu);
  };
  rec.query(
      "SELECT gpu, sm_util_pct, mem_util_pct, mem_used_bytes, temperature_c, power_w, "
      "sm_clock_mhz, mem_clock_mhz, pcie_tx_bytes_per_s, pcie_rx_bytes_per_s, "
      "nvlink_tx_bytes_per_s, nvlink_rx_bytes_per_s FROM gpu_samples ORDER BY gpu, ts_ns",
      [&](Statement& s) {
        std::string who = gpu_name(s.int_at(0));
        auto put = [&](int col, const char* metric, const char* unit, double scale) {
          if (!s.null_at(col)) acc.add("gpu", who, metric, unit, s.double_at(col) * scale);
        };
        put(1, "SM util", "%", 1);
        put(2, "memory util", "%", 1);
        put(3, "memory used", "GiB", 1.0 / (1ull << 30));
        put(4, "temperature", "C", 1);
        put(5, "power", "W", 1);
        put(6, "SM clock", "MHz", 1);
        put(7, "memory clock", "MHz", 1);
        put(8, "PCIe tx", "MB/s", 1e-6);
        put(9, "PCIe rx", "MB/s", 1e-6);
        put(10, "NVLink tx", "MB/s", 1e-6);
        put(11, "NVLink rx", "MB/s", 1e-6);
      });
  rec.query(
      "SELECT gpu, pid, sm_util_pct, mem_util_pct, used_memory_bytes FROM gpu_process_samples "
      "ORDER BY gpu, pid, ts_ns",
      [&](Statement& s) {
        std::string who = fmt::format("pid {} on GPU {}", s.int_at(1), s.int_at(0));
        if (!s.null_at(2)) acc.add("gpu-proc", who, "SM util", "%", s.double_at(2));
        if (!s.null_at(3)) acc.add("gpu-proc", who, "memory util", "%", s.double_at(3));
        if (!s.null_at(4))
          acc.add("gpu-proc", who, "memory used", "MiB", s.double_at(4) / (1 << 20));
      });
  return acc.take();
}

std::vector<GpuXid> gpu_xids(const RecordingReader& rec) {
  std::vector<GpuXid> out;
  if (!rec.has_table("gpu_events")) return out;
  rec.query("SELECT ts_ns, gpu, xid FROM gpu_events ORDER BY ts_ns", [&](Statement& s) {
    out.push_back({s.int_at(0), int(s.int_at(1)), s.int_at(2)});
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
