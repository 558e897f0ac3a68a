// --match: the agent's sinks see only the processes whose command line matches one of the
// patterns (ECMAScript regular expressions, searched anywhere in the command line, e.g.
// "torchrun|train\.py"). The probes stay where they are: other processes' calls still cost
// their probe, but are neither counted, modelled nor held by the flight recorder.
#pragma once
#include <cstdint>
#include <functional>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/sink.h"

namespace eacgm {

class MatchFilter final : public Sink {
 public:
  // Throws UsageError for an empty list or a pattern that is not a regular expression.
  // `command_line` reads a live process's command line (the agent: /proc/PID/cmdline), for
  // processes first seen by a call rather than by their exec.
  MatchFilter(const std::vector<std::string>& patterns, Sink& next,
              std::function<std::string(uint32_t)> command_line);

  bool matches(uint32_t pid);

  void add(const CudaCallRow& r) override { pass(r.pid, r); }
  void add(const CommCallRow& r) override { pass(r.pid, r); }
  void add(const TorchCallRow& r) override { pass(r.pid, r); }
  void add(const PythonCallRow& r) override { pass(r.pid, r); }
  void add(const PythonStackFrameRow& r) override { next_.add(r); }
  void add(const ProcessRow& r) override;
  void add(const ProcessExitRow& r) override;
  void add(const ThreadRow& r) override { pass(r.pid, r); }
  void add(const HostSampleRow& r) override;
  void add(const GpuDevice& r) override { next_.add(r); }
  void add(const GpuSample& r) override { next_.add(r); }
  void add(const GpuProcessSample& r) override { pass(r.pid, r); }
  void add(const GpuXidEvent& r) override { next_.add(r); }
  void add(const GpuActivityRow& r) override { pass(r.pid, r); }
  void add(const GpuCollectiveRow& r) override { pass(r.pid, r); }
  void add(const GpuSliceRow& r) override { pass(r.pid, r); }
  void set_meta(std::string key, std::string value) override { next_.set_meta(key, value); }
  void flush() override { next_.flush(); }
  std::string error() const override { return next_.error(); }

 private:
  template <typename Row>
  void pass(uint32_t pid, const Row& r) {
    if (matches(pid)) next_.add(r);
  }
  bool match_text(const std::string& command) const;

  std::vector<std::regex> patterns_;
  Sink& next_;
  std::function<std::string(uint32_t)> command_line_;
  std::unordered_map<uint32_t, bool> verdicts_;  // live processes only
};

// /proc/PID/cmdline with its NULs as spaces; "" when gone or unreadable.
std::string read_command_line(uint32_t pid);

}  // namespace eacgm
