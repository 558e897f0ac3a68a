// Reads a recording's tables back as the rows the writer took (store/rows.h,
// store/python_rows.h): the one place besides the writer that knows their columns and how an
// unknown value is stored (NULL for -1, 0 or empty, as store/recording.cpp and
// store/sample_tables.cpp bind them). One callback per row, in time order; a row's text fields
// point into the current result row and are valid during the callback only. A table that a
// recording lacks reads as empty, and a column added since it was made reads as unknown.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpu/gpu_samples.h"
#include "store/python_rows.h"
#include "store/rows.h"

namespace eacgm {

class RecordingReader;

void each_cuda_call(const RecordingReader& rec, const std::function<void(const CudaCallRow&)>& row);
void each_comm_call(const RecordingReader& rec, const std::function<void(const CommCallRow&)>& row);
// In time order, an operator before the operators nested in it (the longer first at one time).
void each_torch_call(const RecordingReader& rec,
                     const std::function<void(const TorchCallRow&)>& row);
void each_python_call(const RecordingReader& rec,
                      const std::function<void(const PythonCallRow&)>& row);
// The frames of python_stacks, by stack id, innermost (depth 0) first.
void each_python_frame(const RecordingReader& rec,
                       const std::function<void(const PythonStackFrameRow&)>& row);
// The frames of native_stacks above `max_depth` (innermost first), by stack id.
void each_native_frame(const RecordingReader& rec, uint32_t max_depth,
                       const std::function<void(const NativeFrameRow&)>& row);
// The CPU profile's samples (stack_samples) and the off-CPU profile's (offcpu_samples), in time
// order.
void each_stack_sample(const RecordingReader& rec,
                       const std::function<void(const StackSampleRow&)>& row);
void each_offcpu_sample(const RecordingReader& rec,
                        const std::function<void(const OffCpuSampleRow&)>& row);
// The off-CPU profile's waits recorded whole (weight_ns = dur_ns: a sampling period or more).
void each_whole_offcpu_wait(const RecordingReader& rec,
                            const std::function<void(const OffCpuSampleRow&)>& row);
// The order of sampled tables: by time, or each subject's samples together (host: by scope
// name, then id; GPU: by GPU, then pid), in time order within it.
enum class SampleOrder { by_time, by_subject };
// Samples of the host layer: what happened in each interval (interval_ns 0: at one instant).
// A process's rows carry the name it ended with (the processes table's latest: after an exec).
void each_host_sample(const RecordingReader& rec,
                      const std::function<void(const HostSampleRow&)>& row,
                      SampleOrder order = SampleOrder::by_time);
void each_anomaly(const RecordingReader& rec, const std::function<void(const AnomalyRow&)>& row);
void each_gpu_device(const RecordingReader& rec, const std::function<void(const GpuDevice&)>& row);
void each_gpu_sample(const RecordingReader& rec, const std::function<void(const GpuSample&)>& row,
                     SampleOrder order = SampleOrder::by_time);
void each_gpu_process_sample(const RecordingReader& rec,
                             const std::function<void(const GpuProcessSample&)>& row,
                             SampleOrder order = SampleOrder::by_time);
void each_gpu_xid(const RecordingReader& rec, const std::function<void(const GpuXidEvent&)>& row);
// GPU-side time (the gputime layer): executions and launches, in time order.
void each_gpu_activity(const RecordingReader& rec,
                       const std::function<void(const GpuActivityRow&)>& row);
// NCCL operations as NCCL's profiler plugin saw them (the gputime layer), by enqueue time.
void each_gpu_collective(const RecordingReader& rec,
                         const std::function<void(const GpuCollectiveRow&)>& row);
// The spans in which a duty-cycled process's GPU time was collected (gpu_time_slices), by start.
void each_gpu_slice(const RecordingReader& rec, const std::function<void(const GpuSliceRow&)>& row);

// The anomalies of `eacgm detect`, the strongest (lowest score against its threshold) first.
std::vector<AnomalyRow> strongest_anomalies(const RecordingReader& rec, size_t limit);
// How many anomalies have each cause (in cause order).
std::vector<std::pair<std::string, size_t>> anomaly_cause_counts(const RecordingReader& rec);

// Every traced call of every layer (the trace view), in time order or (cheaper) in none.
struct TracedCall {
  std::string_view layer, name;
  uint64_t ts_ns = 0, dur_ns = 0;
  uint32_t pid = 0, tid = 0;
  int64_t bytes = -1;    // -1: no size
  int64_t ret = 0;
  int64_t runq_ns = -1;  // waited for a CPU during the call; -1: unknown
};
void each_traced_call(const RecordingReader& rec, const std::function<void(const TracedCall&)>& row,
                      bool in_time_order = false);

// Kernel launches per kernel and API level (runtime cudaLaunchKernel*, driver cuLaunchKernel*).
struct KernelLaunches {
  std::string kernel;
  bool runtime = false;
  uint64_t launches = 0, total_ns = 0;
};
std::vector<KernelLaunches> kernel_launches(const RecordingReader& rec);

// The calls of one call layer ("cuda", "comm", "torch", "python": its table), in no order;
// their layer, time, thread, name and duration only.
void each_call_in_layer(const RecordingReader& rec, const std::string& layer,
                        const std::function<void(const TracedCall&)>& row);
// The first and last times of the recording's calls and GPU executions (their ends) and samples;
// {INT64_MAX, 0} where it has none.
std::pair<int64_t, int64_t> recorded_extent(const RecordingReader& rec);
size_t anomaly_count(const RecordingReader& rec);

// For each operation of a call layer (its name; launches_by_kernel: the cuda layer's kernel
// launches, by kernel), the python_stacks id most of its calls with a stack were made from.
std::map<std::string, int64_t> usual_python_stacks(const RecordingReader& rec,
                                                   const std::string& layer,
                                                   bool launches_by_kernel = false);
struct PythonFrame {
  std::string name, file;
  int64_t line = -1;  // -1: unknown
};
// One Python stack's frames, innermost first, at most `limit`.
std::vector<PythonFrame> python_stack(const RecordingReader& rec, int64_t id, size_t limit);
// Where each traced Python function (python_calls) is defined: name -> (file, first line).
std::map<std::string, std::pair<std::string, int64_t>> python_definitions(const RecordingReader& rec);
// Whether the host_samples of this recording have `column` (recordings older than a column
// lack it: a chart of it would show zeros it never measured).
bool host_samples_have(const RecordingReader& rec, const std::string& column);

// A process as the recording knows it at its end: what record wrote at its start, its exit,
// and where it ran (merged recordings: the host, and its pid there).
struct RecordedProcess : ProcessRow {
  uint64_t end_ns = 0;  // 0: still running when the recording ended
  int64_t exit_code = -1;  // -1: unknown
  std::string host;        // empty: this host
  int64_t host_pid = -1;
};
// Each process's latest row (a pid that exec'd has one per program), in pid order.
void each_process(const RecordingReader& rec, const std::function<void(const RecordedProcess&)>& row);
// Each thread by its latest name (after an exec, the program it became).
void each_thread(const RecordingReader& rec, const std::function<void(const ThreadRow&)>& row);

}  // namespace eacgm
