// What a sink of the tracing pipeline implements: the one interface between the decoder and
// sampler (which produce rows) and every output (recording, Perfetto, metrics, detector, ...).
// Which sinks each command uses: record/record_sinks.h and agent/agent_sinks.h.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_samples.h"
#include "store/python_rows.h"
#include "store/rows.h"

namespace eacgm {

// A consumer of decoded events and samples. Every method is called on the pipeline's thread (the
// record or agent loop), as calls return: a call nested in another reaches the sinks before it,
// and a c10d collective when its work completes, so rows are not sorted by ts_ns (their entry
// time); a sink that needs another thread hands rows over itself. A sink keeps only what it
// needs: the defaults ignore. String views in rows point to storage that lives as long as the
// pipeline.
class Sink {
 public:
  virtual ~Sink() = default;

  // Calls, one per completed traced call.
  virtual void add(const CudaCallRow&) {}
  virtual void add(const CommCallRow&) {}
  virtual void add(const TorchCallRow&) {}
  virtual void add(const PythonCallRow&) {}
  // A Python stack, written once per distinct stack before the calls that refer to it.
  virtual void add(const PythonStackFrameRow&) {}
  // The CPU profile: samples, and each distinct native stack once before the samples with it.
  virtual void add(const StackSampleRow&) {}
  virtual void add(const OffCpuSampleRow&) {}
  virtual void add(const NativeFrameRow&) {}
  // The process tree.
  virtual void add(const ProcessRow&) {}
  virtual void add(const ProcessExitRow&) {}
  virtual void add(const ThreadRow&) {}
  // Sampled layers.
  virtual void add(const HostSampleRow&) {}
  virtual void add(const GpuDevice&) {}
  virtual void add(const GpuSample&) {}
  virtual void add(const GpuProcessSample&) {}
  virtual void add(const GpuXidEvent&) {}
  // GPU-side time (the gputime layer), as the injection library hands it over.
  virtual void add(const GpuActivityRow&) {}
  virtual void add(const GpuCollectiveRow&) {}
  virtual void add(const GpuSliceRow&) {}
  // Facts about the session (hostname, clocks, layers, counters): `eacgm_version` first, the
  // end-of-run counters last. A later value of a key replaces the earlier one.
  virtual void set_meta(std::string key, std::string value) { (void)key, (void)value; }

  // About every 90 ms and at the end: hand over what is buffered (e.g. to a writer thread).
  virtual void flush() {}
  // The first error that stopped this sink for good (e.g. disk full), or "": the driver ends the
  // session on one, keeping what was written.
  virtual std::string error() const { return {}; }
};

// Hands every row to each of its sinks, in order.
class SinkFanout final : public Sink {
 public:
  void attach(Sink& sink) { sinks_.push_back(&sink); }
  bool empty() const { return sinks_.empty(); }

  void add(const CudaCallRow& r) override { each(r); }
  void add(const CommCallRow& r) override { each(r); }
  void add(const TorchCallRow& r) override { each(r); }
  void add(const PythonCallRow& r) override { each(r); }
  void add(const PythonStackFrameRow& r) override { each(r); }
  void add(const StackSampleRow& r) override { each(r); }
  void add(const OffCpuSampleRow& r) override { each(r); }
  void add(const NativeFrameRow& r) override { each(r); }
  void add(const ProcessRow& r) override { each(r); }
  void add(const ProcessExitRow& r) override { each(r); }
  void add(const ThreadRow& r) override { each(r); }
  void add(const HostSampleRow& r) override { each(r); }
  void add(const GpuDevice& r) override { each(r); }
  void add(const GpuSample& r) override { each(r); }
  void add(const GpuProcessSample& r) override { each(r); }
  void add(const GpuXidEvent& r) override { each(r); }
  void add(const GpuActivityRow& r) override { each(r); }
  void add(const GpuCollectiveRow& r) override { each(r); }
  void add(const GpuSliceRow& r) override { each(r); }
  void set_meta(std::string key, std::string value) override {
    for (Sink* s : sinks_) s->set_meta(key, value);
  }
  void flush() override {
    for (Sink* s : sinks_) s->flush();
  }
  std::string error() const override {
    for (const Sink* s : sinks_)
      if (std::string e = s->error(); !e.empty()) return e;
    return {};
  }

 private:
  template <typename Row>
  void each(const Row& row) {
    for (Sink* s : sinks_) s->add(row);
  }
  std::vector<Sink*> sinks_;
};

}  // namespace eacgm
