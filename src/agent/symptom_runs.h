// A window that names only a symptom of the host's threads (its job's operators, collectives,
// CUDA calls or Python code slower or fewer than usual, or an unusual window: no resource on
// the node to blame, no late rank, no stopped CPU; the GPU's idle share is measured on the GPU
// and goes out as before) says "the job ran slower", and a job that runs slower
// for a few seconds with nothing to blame is a hiccup of the machine, not something to wake a
// person for. On this VM the host slows the vCPUs now and then: session 65's torch_latency run
// had three "slow operators" windows 20 s after its fault, the whole job 1.6x slower while a
// fixed piece of C-level work it timed every 8th step (the eval's canary) was 1.6x slower too;
// session 66's monitor saw the same canary 1.2-1.4x slower for 16 s with nothing else busy on
// the node, and this VM's /proc/stat reports no steal time. Sessions 57-61 had 3-14 such
// windows after python_latency's, memory_pressure's and net_loss's faults.
//
// SymptomRuns holds such windows per job and reports them only as a run of consecutive
// anomalous windows lasting `min_ns` (then the run's held windows go out, and its later ones as
// they come), or as the onset of a window that names a cause (a symptom window right before a
// CPU-interference or memory-pressure window is that episode's start: both go out). A run that
// ends shorter (a window of the job judged normal after it) is dropped and counted
// (dropped_runs, dropped_windows). Windows not judged (those of the agent's own flight
// recording, a lull held back) do not end a run, for up to `max_gap_ns`. The slow calls of a fault
// (a slow operator, a late rank) are judged apart, by their own models, and report the fault
// whatever its windows do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/agent_anomaly.h"

namespace eacgm {

struct SymptomRunOptions {
  uint64_t min_ns = 15'000'000'000;  // a run of symptom-only windows this long goes out
  uint64_t max_gap_ns = 5'000'000'000;  // unjudged windows a run spans
};

// Whether an anomaly is a window that names only a symptom (above).
bool names_only_a_symptom(const AgentAnomaly& x);

class SymptomRuns {
 public:
  explicit SymptomRuns(SymptomRunOptions o = {}) : options_(o) {}
  // Takes from `found` the symptom-only windows it holds and puts back those whose run went
  // out. `judged`: per job, the starts of its windows judged since the last fold, in order (one
  // that is not among `found`'s windows was normal: it ends the run before it).
  void fold(std::vector<AgentAnomaly>& found,
            const std::map<std::string, std::vector<uint64_t>>& judged);
  // The job's windows end (it ended): what it holds is dropped.
  void ended(const std::string& job);
  // At the agent's end: what is held is dropped (a run cut short).
  void finish();
  size_t dropped_runs() const { return dropped_runs_; }
  size_t dropped_windows() const { return dropped_windows_; }
  size_t held() const;

 private:
  struct Run {
    uint64_t start_ns = 0, end_ns = 0;
    bool out = false;  // it went out: its later windows go at once
    uint64_t normal_after_ns = UINT64_MAX;  // the first window judged normal after it
    std::vector<AgentAnomaly> held;
  };
  void drop(Run& r);

  SymptomRunOptions options_;
  std::map<std::string, Run> runs_;  // by job
  size_t dropped_runs_ = 0, dropped_windows_ = 0;
};

}  // namespace eacgm
