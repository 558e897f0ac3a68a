// `eacgm record`: drives the tracing pipeline over one target until it ends, into a recording.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/pipeline.h"

namespace eacgm {

struct RecordOptions : TraceOptions {
  std::string output = "run.eacgm.db";
  bool force = false;
  std::string perfetto;   // also write a Perfetto trace here when set
  double duration_s = 0;  // 0: until the target exits or Ctrl-C
  std::vector<uint32_t> pids;
  std::vector<std::string> command;
  // the gputime layer's duty cycle in the command record launches (EACGM_GPUTIME_DUTY:
  // gputime/duty.h): everything by default, as a one-off recording is for
  std::string gputime_duty = "full";
  RecordOptions() { sample_hz = 99; }  // record profiles by default; the agent does not
};

// Records and returns the exit status for eacgm: the command's own status for `-- CMD`.
int run_record(const RecordOptions& options);

}  // namespace eacgm
