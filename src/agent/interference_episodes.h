// Something on the node that takes the CPUs from a job for tens of seconds (another program, a
// system service, the host behind a VM's vCPUs) slows the operators the job's threads were
// preempted in: each such slow call is true (CallContext::explain names it: "preempted: waited
// 4.1 ms for a CPU (CPU interference)"), but an SRE wants the episode, not each call. Session
// 67's half hour of bench/agent_false_alarms.sh beside a healthy 2-rank job: one 28 s episode
// with the node's runnable threads up from 5-6 to 7-9 gave 200 slow-operator anomalies
// (aten::mm 110, aten::linear 46, aten::addmm 44), most of them preempted.
//
// InterferenceEpisodes folds them, per job and layer: the first preempted slow call of an
// episode goes out as soon as it is judged, and those that follow within `gap_ns` of the
// episode's last are counted, not reported; once `gap_ns` passed without another (or every
// `max_ns`, for a neighbour that keeps taking the CPUs) the episode's followers go out as one
// anomaly of their layer and kind, named by the most frequent operation: "slow operator: after
// the first, 199 slow calls (aten::mm 110, ...) over 27.9 s in python3 (pids 7, 8); preempted:
// their threads waited up to 8.1 ms for a CPU (CPU interference)", with the calls it stands for
// counted in it. Windows are not folded (at most one a second per job, and a "CPU interference"
// window names the episode by itself), nor calls that a stall or a job's start explained
// (StallEpisodes and JobStarts take those first).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent_anomaly.h"

namespace eacgm {

struct InterferenceEpisodeOptions {
  uint64_t gap_ns = 10'000'000'000;  // one burst window: a longer quiet ends the episode
  uint64_t max_ns = 60'000'000'000;  // a lasting neighbour: its followers once a minute
};

// Whether an anomaly is a slow call its thread's wait for a CPU explains (above).
bool interference_can_fold(const AgentAnomaly& x);

class InterferenceEpisodes {
 public:
  explicit InterferenceEpisodes(InterferenceEpisodeOptions o = {}) : options_(o) {}
  // Takes from `found` the followers of each job's open episodes (the first of an episode
  // stays), sorts the rest by time, and appends the followers of the episodes over by `now_ns`
  // (the data time of the latest calls and windows judged) as one anomaly each.
  void fold(std::vector<AgentAnomaly>& found, uint64_t now_ns);
  // At the agent's end: the open episodes' followers go out.
  void finish(std::vector<AgentAnomaly>& found);
  size_t open_episodes() const { return episodes_.size(); }

 private:
  struct Episode {
    uint64_t lead_ns = 0;                    // its first member's start (reported alone)
    uint64_t last_end_ns = 0;                // of its members, the first included
    uint64_t first_ns = UINT64_MAX, end_ns = 0;  // of its followers not reported yet
    uint64_t opened_ns = 0;                  // data time its followers began to be counted
    std::string kind;                        // its first member's cause kind ("slow operator")
    std::string name;                        // its members' process name
    std::set<uint32_t> pids;                 // of its followers
    std::map<std::string, size_t> calls;     // followers by operation
    int64_t runq_ns = 0;                     // their longest wait for a CPU
    // followers by the taker's name ("cc1plus"), and how the last of them named it ("cc1plus
    // (3 processes, pid 7 the most)": the pids and counts differ from call to call)
    std::map<std::string, std::pair<size_t, std::string>> behind;
    double score = 0, threshold = 0;         // the most unusual follower's
    bool scored = false;
  };
  // The followers as one anomaly, and the episode ready to count the next ones.
  void flush_into(const std::pair<std::string, std::string>& key, Episode& e,
                  std::vector<AgentAnomaly>& out);

  InterferenceEpisodeOptions options_;
  std::map<std::pair<std::string, std::string>, Episode> episodes_;  // by job and layer
};

}  // namespace eacgm
