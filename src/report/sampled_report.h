// Report sections for the sampled layers (host, gpu): min/mean/max of each metric over the
// samples of its subject (host: intervals with activity; gpu: every NVML reading).
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace eacgm {

class RecordingReader;

struct MetricStats {
  std::string scope;    // "process", "net", "disk"
  std::string subject;  // "python3 (pid 42)", "eth0", "vda"
  std::string metric;   // "cpu", "run-queue wait", ...
  std::string unit;     // "%", "us", "MB/s", ...
  size_t intervals = 0;
  double min = 0, mean = 0, max = 0;
};

std::vector<MetricStats> host_metric_stats(const RecordingReader& rec);
// Per GPU (scope "gpu") and per traced process on a GPU (scope "gpu-process"), per sample.
std::vector<MetricStats> gpu_metric_stats(const RecordingReader& rec);

struct GpuXid {
  int64_t ts_ns;
  int gpu;
  int64_t xid;
};
std::vector<GpuXid> gpu_xids(const RecordingReader& rec);

void print_metric_table(const std::vector<MetricStats>& stats, const char* title, FILE* out);
nlohmann::json metric_stats_json(const std::vector<MetricStats>& stats);

}  // namespace eacgm
