// The GPU layer during a recording: NVML loaded at run time, sampled on its own threads, and
// its results handed to the record loop through a queue (the sampler never waits for tracing).
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/gpu_sampler.h"
#include "gpu/nvml.h"
#include "store/sink.h"

namespace eacgm {

class GpuLayer final : public GpuSink {
 public:
  // Loads NVML (the user's --nvml-library, else $EACGM_NVML_LIBRARY, else the driver's) and
  // starts listening for XID events; sample_once() takes the samples. Returns null, after one warning line, when NVML cannot be used and the
  // user did not name a library; a library the user named that does not load is an Error.
  // With `why_not`, the reason goes there instead of to stderr (--layers auto says it in its
  // layers line).
  static std::unique_ptr<GpuLayer> start(const std::string& nvml_library, double interval_ms,
                                         std::function<bool(uint32_t)> keep_pid, bool quiet,
                                         std::string* why_not = nullptr);
  ~GpuLayer() override;

  // One pass over every GPU (from the recording's sampling thread; XID events come on their own).
  void sample_once() { sampler_->sample_once(); }
  // Moves what the sampler produced so far into the recording (record loop's thread).
  void drain(Sink& out);
  // Stops sampling; what is left can still be drained.
  void stop();
  // Lines to print once: which metrics were unavailable and why.
  std::vector<std::string> unavailable() const;
  const std::string& library_path() const { return nvml_->path(); }
  size_t device_count() const { return sampler_->devices().size(); }

  void on_gpu_sample(const GpuSample& sample) override;
  void on_gpu_process_sample(const GpuProcessSample& sample) override;
  void on_gpu_xid(const GpuXidEvent& event) override;

 private:
  GpuLayer() = default;
  std::unique_ptr<NvmlLibrary> nvml_;
  std::unique_ptr<GpuSampler> sampler_;
  std::mutex mu_;
  std::vector<GpuSample> samples_;
  std::vector<GpuProcessSample> processes_;
  std::vector<GpuXidEvent> xids_;
  bool devices_written_ = false;
};

}  // namespace eacgm
