// `eacgm record`: loads the probes, runs or attaches to the target, and writes the recording.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "python/code_filter.h"

namespace eacgm {

struct RecordOptions {
  std::string output = "run.eacgm.db";
  bool force = false;
  std::vector<std::string> layers{"cuda"};
  std::string perfetto;  // also write a Perfetto trace here when set
  double duration_s = 0;  // 0: until the target exits or Ctrl-C
  std::vector<uint32_t> pids;
  bool all = false;
  std::vector<std::string> command;
  uint64_t ring_mb = 32;
  double interval_ms = 100;  // sampling interval of the gpu and host layers
  std::vector<std::string> torch_ops{"default"};  // --torch-ops patterns (TorchOpFilter)
  std::string nvml_library;  // --nvml-library; empty: $EACGM_NVML_LIBRARY, else the driver's
  bool quiet = false;
  std::string python_filter = kDefaultPythonFilter;  // --python-filter
  uint32_t python_stack_depth = 8;               // --python-stack-depth
  bool python_no_hook = false;                   // --python-no-hook
};

// Records and returns the exit status for eacgm: the command's own status for `-- CMD`.
int run_record(const RecordOptions& options);

}  // namespace eacgm
