// Report sections for the sampled layers (host; gpu to come): min/mean/max of each metric
// over the sampling intervals in which its subject was active.
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

void print_metric_table(const std::vector<MetricStats>& stats, const char* title, FILE* out);
nlohmann::json metric_stats_json(const std::vector<MetricStats>& stats);

}  // namespace eacgm
