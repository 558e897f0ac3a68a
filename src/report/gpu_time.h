// `eacgm report`'s GPU time (the gputime layer): how busy each GPU was, how long launches
// queued before the GPU started them, and the kernels that took the most GPU time.
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace eacgm {

class RecordingReader;

struct GpuKernelTime {
  std::string kernel;
  uint64_t executions = 0;
  uint64_t total_ns = 0, p50_ns = 0, max_ns = 0;  // time on the GPU
  uint64_t queue_p50_ns = 0;                      // launch call start to GPU start
  uint64_t queued = 0;                            // executions linked to their launch
  // the Python stack most of its launches were made from (the cuda layer's launch calls of
  // this kernel), innermost frame first, as "func (file:line)"; empty: none recorded
  std::vector<std::string> python_stack;
};

struct GpuDeviceTime {
  uint32_t device = 0;
  uint64_t busy_ns = 0;  // the time any kernel, copy or memset ran (overlaps counted once)
  uint64_t span_ns = 0;  // first start to last end; duty-cycled: the time collected in it
  uint64_t kernels = 0, copies = 0, memsets = 0;
  int64_t copy_bytes = 0;
};

// NCCL operations of one kind and rank, as NCCL's profiler plugin saw them on the GPU.
struct GpuCollectiveTime {
  std::string name;  // ncclAllReduce, ...
  int64_t rank = -1, nranks = -1;
  uint64_t operations = 0, timed = 0;  // timed: with the GPU's time
  uint64_t total_ns = 0, p50_ns = 0, max_ns = 0;  // time on the GPU
  uint64_t start_p50_ns = 0;  // enqueue to GPU start
  int64_t bytes = 0;
  double busbw_p50_gbps = -1;  // nccl-tests' bus bandwidth over the GPU's time
};

struct GpuTimeSummary {
  std::vector<GpuDeviceTime> devices;  // by device id
  std::vector<GpuCollectiveTime> collectives;  // by name, then rank
  std::vector<GpuKernelTime> kernels;  // the most GPU time first
  // queue delay of the kernels linked to their launch (same pid and correlation id)
  uint64_t linked = 0, unlinked = 0;
  uint64_t queue_p50_ns = 0, queue_p95_ns = 0, queue_p99_ns = 0, queue_max_ns = 0;
  // duty-cycled GPU time (gpu_time_slices): the spans collected, their union, and from the
  // first one's start to the last one's end; busy times count what ran inside them only
  uint64_t slices = 0, collected_ns = 0, sliced_span_ns = 0;
  bool empty() const { return devices.empty() && collectives.empty(); }
};

// From gpu_activity and gpu_collectives; empty where the recording has neither. `top`: how many kernels to keep.
GpuTimeSummary gpu_time_summary(const RecordingReader& rec, size_t top);
void print_gpu_time(const GpuTimeSummary& s, FILE* out);
nlohmann::json gpu_time_json(const GpuTimeSummary& s);

}  // namespace eacgm
