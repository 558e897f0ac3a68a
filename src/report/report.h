// `eacgm report`: what a recording holds, per layer and operation, and the top kernels.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace eacgm {

class RecordingReader;

struct OperationStats {
  std::string layer, name;
  uint64_t count = 0;
  uint64_t total_ns = 0, p50_ns = 0, p99_ns = 0, max_ns = 0;
  double mean_ns = 0;
  int64_t bytes = 0;
  uint64_t errors = 0;  // calls with a non-zero return code
};

struct KernelStats {
  std::string kernel;
  uint64_t launches = 0;
  uint64_t total_ns = 0;  // host-side launch time
};

std::vector<OperationStats> operation_stats(const RecordingReader& rec);
std::vector<KernelStats> top_kernels(const RecordingReader& rec, size_t limit);

// The full report, as text or as one JSON document.
void print_report(const std::string& path, bool json, FILE* out);
// A few lines after `record`: counts per operation and the top kernels.
void print_summary(const std::string& path, FILE* out);

// Percentile (nearest rank) of sorted values; 0 for an empty input.
uint64_t percentile(const std::vector<uint64_t>& sorted, double p);

}  // namespace eacgm
