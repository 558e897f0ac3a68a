// A CPU that stops (a vCPU its hypervisor did not run, detect/call_context.h's CPU stall) slows
// whatever ran on it and whatever waited for that: on this 2-core VM one 98 ms stop under a GPT
// training gave three slow operators (aten::bmm, the aten::matmul around it) and a "slow
// operators" window, each true and each logged, while the one thing to tell is that the machine
// stopped. StallEpisodes folds the anomalies of a job that the host explains by a stall
// (Anomaly::stalled_ns: every such call; a window only where it names no resource of its own
// and no late rank, stall_can_fold) that come within `gap_ns` of each other into one anomaly,
// layer window, cause "CPU stall: the CPU stopped for up to 98.3 ms under python3 (pid 7); 3
// slow calls (aten::bmm 2, ...) and 1 window (slow operators 1) over 0.4 s", once `gap_ns` of
// data passed without another (or every `max_ns`, for a machine that keeps stopping).
//
// An episode goes out only where the job lost a material share of its CPU time to stops
// (`material`, set by the agent: its processes' stops in the minute before the episode's end at
// least 1% of their CPU time; EacgmCpuStalls alerts on 1% of each CPU's wall time): this VM's
// vCPUs stop for ~100 ms once or twice a minute, and one such stop under an operator was an
// anomaly of a healthy job (bench/agent_false_alarms.sh: 1 of 2 anomalies in a 120 s run, tens an hour);
// the node's stall counters (eacgm_cpu_stall_seconds_total) have each stop. The others are
// dropped (dropped()). It is asked as each member joins and at the close.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "agent/agent_anomaly.h"

namespace eacgm {

struct StallEpisodeOptions {
  uint64_t gap_ns = 5'000'000'000;
  uint64_t max_ns = 60'000'000'000;
};

// Whether a stall explains an anomaly whole (above).
bool stall_can_fold(const AgentAnomaly& x);

class StallEpisodes {
 public:
  explicit StallEpisodes(StallEpisodeOptions o = {}) : options_(o) {}
  // Takes from `found` those a stall explains and appends the episodes over by `now_ns` (the
  // data time of the latest calls and windows judged).
  void fold(std::vector<AgentAnomaly>& found, uint64_t now_ns);
  // At the agent's end: the open episode goes out.
  void finish(std::vector<AgentAnomaly>& found);
  // Whether a job's episode (its first process's pid, its end) cost the job enough to go out;
  // without one, every episode does.
  using Material = std::function<bool(const std::string& job, uint32_t pid, uint64_t end_ns)>;
  void set_material(Material m) { material_ = std::move(m); }
  // Episodes dropped as immaterial, and the anomalies they held.
  size_t dropped() const { return dropped_; }
  size_t dropped_anomalies() const { return dropped_anomalies_; }

 private:
  struct Episode {
    uint64_t first_ns = UINT64_MAX, last_end_ns = 0, opened_ns = 0;
    double stalled_ns = 0;                  // its members' longest stall
    std::string process;                    // the first member's, in words
    uint32_t pid = 0;
    std::map<std::string, size_t> calls;    // slow calls by operation
    std::map<std::string, size_t> windows;  // windows by cause kind
    double score = 0, threshold = 0;        // its most unusual member's
    bool scored = false;
    // found material when a member joined (while the job's processes and their host samples
    // are known: a job that ended before the episode closed has none left)
    bool material = false;
  };
  AgentAnomaly close(const std::string& job, const Episode& e);
  // close(), into `out` where the episode is material
  void close_into(const std::string& job, const Episode& e, std::vector<AgentAnomaly>& out);

  StallEpisodeOptions options_;
  Material material_;
  size_t dropped_ = 0, dropped_anomalies_ = 0;
  std::map<std::string, Episode> episodes_;  // by job
};

}  // namespace eacgm
