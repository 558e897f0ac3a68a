// GPU layer glue: NVML choice and loading policy, the sampler's queue, and its warnings.
#include "pipeline/gpu_layer.h"

#include <cstdio>
#include <cstdlib>

#include "util/error.h"

namespace eacgm {

std::unique_ptr<GpuLayer> GpuLayer::start(const std::string& nvml_library, double interval_ms,
                                          std::function<bool(uint32_t)> keep_pid, bool quiet,
                                          std::string* why_not) {
  NvmlLibraryChoice choice = choose_nvml_library(nvml_library, getenv("EACGM_NVML_LIBRARY"));
  std::unique_ptr<GpuLayer> layer(new GpuLayer());
  if (choice.explicit_path) {
    layer->nvml_ = NvmlLibrary::load_or_throw(choice);
  } else {
    NvmlLoadResult loaded = NvmlLibrary::load(choice);
    if (!loaded) {
      // The GPU layer is one of several: the rest of the recording goes on without it.
      const NvmlLoadFailure& f = loaded.failure;
      if (why_not)
        *why_not = f.init_failed ? fmt::format("NVML in {} did not initialise: {}", f.path, f.reason)
                                 : fmt::format("no NVML: {}", f.reason);
      else
        fprintf(stderr, "eacgm: %s\n", loaded.failure.warning().c_str());
      return nullptr;
    }
    layer->nvml_ = std::move(loaded.library);
  }
  GpuSamplerOptions options;
  options.interval = std::chrono::nanoseconds(int64_t(interval_ms * 1e6));
  options.slow_interval = std::chrono::milliseconds(100);
  options.keep_pid = std::move(keep_pid);
  layer->sampler_ = std::make_unique<GpuSampler>(*layer->nvml_, *layer, options);
  if (!quiet)
    fprintf(stderr, "eacgm: GPU layer: %zu GPU(s) through %s, every %g ms\n",
            layer->sampler_->devices().size(), layer->nvml_->path().c_str(), interval_ms);
  layer->sampler_->start_events_only();
  return layer;
}

GpuLayer::~GpuLayer() { stop(); }

void GpuLayer::stop() {
  if (sampler_) sampler_->stop();
}

void GpuLayer::on_gpu_sample(const GpuSample& sample) {
  std::lock_guard lock(mu_);
  samples_.push_back(sample);
}

void GpuLayer::on_gpu_process_sample(const GpuProcessSample& sample) {
  std::lock_guard lock(mu_);
  processes_.push_back(sample);
}

void GpuLayer::on_gpu_xid(const GpuXidEvent& event) {
  std::lock_guard lock(mu_);
  xids_.push_back(event);
}

void GpuLayer::drain(Sink& out) {
  if (!devices_written_) {
    for (const auto& d : sampler_->devices()) out.add(GpuDevice(d));
    devices_written_ = true;
  }
  std::vector<GpuSample> samples;
  std::vector<GpuProcessSample> processes;
  std::vector<GpuXidEvent> xids;
  {
    std::lock_guard lock(mu_);
    samples.swap(samples_);
    samples_.reserve(samples.size());  // the sampler's next interval needs no regrowing
    processes.swap(processes_);
    xids.swap(xids_);
  }
  for (const auto& s : samples) out.add(s);
  for (const auto& p : processes) out.add(p);
  for (const auto& x : xids) out.add(x);
}

std::vector<std::string> GpuLayer::unavailable() const {
  std::vector<std::string> lines;
  for (const auto& m : sampler_->unavailable_metrics())
    lines.push_back(fmt::format("GPU layer: {} unavailable: {}", m.metric, m.reason));
  return lines;
}

}  // namespace eacgm
