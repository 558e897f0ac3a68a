// An anomaly as the agent reports it (agent/detection.h finds them, agent/anomaly_reporter.h
// logs, counts and stores them).
#pragma once
#include <cstddef>
#include <string>

#include "detect/detector.h"

namespace eacgm {

struct AgentAnomaly {
  detect::Anomaly anomaly;
  std::string process;  // name of the calling process; for windows the job in words
  std::string job;      // the key of its job (DetectionSink::job_key); "" where not known
  // an episode of a job's start (agent/job_starts.h): the slow calls and windows it stands for
  size_t folded_calls = 0, folded_windows = 0;
  // a window that went out on its own (a neighbour took much of the job's CPU:
  // window_stands_alone), whatever its cause reads
  bool stands_alone = false;
};

}  // namespace eacgm
