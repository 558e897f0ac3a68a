// The sampled layers' clock: one thread that wakes once per interval and reads every sampled
// layer (host BPF maps, NVML), so that sampling costs one wakeup per interval in all.
#pragma once
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "probe/host_tracer.h"
#include "pipeline/gpu_layer.h"
#include "util/stop_flag.h"

namespace eacgm {

class SamplingThread {
 public:
  // Either layer may be null. Both must outlive the thread.
  SamplingThread(HostTracer* host, GpuLayer* gpu, double interval_ms);
  ~SamplingThread();  // stop()
  SamplingThread(const SamplingThread&) = delete;
  SamplingThread& operator=(const SamplingThread&) = delete;

  // Joins the thread; then takes one last host sample (the partial interval).
  void stop();
  // Host rows sampled so far (the record loop writes them; the writer is not thread-safe).
  std::vector<HostSampleRow> take_host_rows();

 private:
  void run();
  void sample_host();

  HostTracer* host_;
  GpuLayer* gpu_;
  uint64_t interval_ns_;
  StopFlag stop_;
  std::mutex mu_;  // rows_
  std::vector<HostSampleRow> rows_;
  std::thread thread_;
};

}  // namespace eacgm
