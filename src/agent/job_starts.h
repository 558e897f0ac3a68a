// A job that starts on a node beside running ones takes CPUs, memory bandwidth and caches from
// them while it starts (its interpreter's imports, first allocations, first steps): on a small
// node their operators run several times slower for seconds. Each such slow call or window is
// true, but the episode is one thing an SRE wants to hear of once: which job started, and what
// it did to the others. Session 52's hour beside a healthy 2-rank job: a second job's start
// gave one 20 s episode of 422 anomalies (417 slow aten::mm/addmm/linear, 5 "slow operators"
// windows), and no other anomaly in the hour.
//
// JobStarts folds such episodes: an anomaly of a kind a neighbour's CPU use can cause (a slow
// call, a CPU-interference, slow-code or storage window; never a late rank, the network or the
// GPU) that came within `before_ns` before to `after_ns` after a job started beside others
// (one of them seen at least `min_age_ns` before it: at the agent's own start every job is new)
// joins that start's episode, as does one within `gap_ns` of the episode's last; an episode goes
// out as one anomaly once `gap_ns` passed without another and its start's `after_ns` is over (or
// every `max_ns`, for a neighbour that keeps slowing the others), layer window, cause "CPU
// interference: <job> started beside it; N slow calls (aten::mm 300, ...) and M windows ...", and
// the anomalies it stands for counted in it. A new job is seen by its first traced call, seconds
// after its process began (Python imports torch first), while the others may already be slowed: an
// anomaly that could be folded but has no start to join, while a process that is in no job yet
// started (a candidate: it may become one), waits up to `hold_ns` for it to become a job, and goes
// out on its own once it exited or the time is up.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent_anomaly.h"

namespace eacgm {

struct JobStartOptions {
  uint64_t before_ns = 10'000'000'000;  // a burst takes along its window's earlier calls
  uint64_t after_ns = 30'000'000'000;   // imports, warm-up and first steps of the new job
  uint64_t gap_ns = 10'000'000'000;     // one burst window: longer quiet ends the episode
  uint64_t max_ns = 60'000'000'000;     // a lasting neighbour: one anomaly a minute
  uint64_t min_age_ns = 30'000'000'000;
  // a new job's first call came 8-10 s after its launcher's exec beside a busy job at nice 19
  // on this 2-core VM (session 54's hour: a window held 5 s went out on its own, and the
  // episode took the next ones)
  uint64_t hold_ns = 15'000'000'000;
  // a process in no job this long after it started is starting none: every fork and exec on
  // the node is a candidate (a shell's commands, a CPU hog), and holding the others' anomalies
  // for it would only delay them (Python imports torch in 2-5 s here, slower when starved)
  uint64_t candidate_ns = 20'000'000'000;
};

// Whether an anomaly is of a kind a job starting beside its job can cause (above).
bool neighbour_can_cause(const AgentAnomaly& a);
// Whether a process just forked or exec'd may be a job starting, by its name and command line:
// a Python interpreter (most training and inference jobs) or a launcher (torchrun, deepspeed,
// accelerate, mpirun, srun). Not a shell's loop or a C program: a CPU hog that is no job must
// be reported at once (bench/detection_latency.sh: 0.65 s), not held for it.
bool may_start_job(std::string_view name, std::string_view command);

// The anomalies an episode stands for: how many (`folded_total`), and in words ("300 slow calls
// (aten::mm 200, aten::addmm 100) and 2 windows (slow operators 2)"; the three most of each).
size_t folded_total(const std::map<std::string, size_t>& counts);
std::string folded_words(const std::map<std::string, size_t>& calls,
                         const std::map<std::string, size_t>& windows);
// The one anomaly of such an episode, but its cause and process: layer window, over
// [first_ns, end_ns], its most unusual member's score, the counts (and the store's features
// `folded_calls`, `folded_windows`).
AgentAnomaly folded_anomaly(uint64_t first_ns, uint64_t end_ns, double score, double threshold,
                            const std::map<std::string, size_t>& calls,
                            const std::map<std::string, size_t>& windows);

class JobStarts {
 public:
  explicit JobStarts(JobStartOptions o = {}) : options_(o) {}

  // A job first seen, started at `start_ns` (its first process's start where known).
  void seen(const std::string& job, uint64_t start_ns);
  void ended(const std::string& job);
  // A process started at `start_ns` that is in no job yet and may start one (may_start_job);
  // gone: it joined one, or exited.
  void candidate(uint32_t pid, uint64_t start_ns) { candidates_[pid] = start_ns; }
  void gone(uint32_t pid) { candidates_.erase(pid); }

  // Takes from `found` the anomalies of an episode (those with their `job` set) and those held
  // for a candidate, and appends the episodes that ended by `now_ns` (the time of the latest
  // calls and windows judged), each one anomaly, and the held ones whose time is up by
  // `clock_ns` (CLOCK_MONOTONIC: a job that calls nothing more must not keep them); `who`
  // names a job in words ("the processes launched by pid 50 (pids 100, 101)").
  void fold(std::vector<AgentAnomaly>& found, uint64_t now_ns, uint64_t clock_ns,
            const std::function<std::string(const std::string&)>& who);

  // At the agent's end: the held anomalies and the open episodes go out.
  void finish(std::vector<AgentAnomaly>& found,
              const std::function<std::string(const std::string&)>& who);

  size_t open_episodes() const { return episodes_.size(); }
  size_t held() const { return held_.size(); }
  size_t candidates() const { return candidates_.size(); }

 private:
  struct Episode {
    std::string started;  // the job that started
    uint64_t started_ns = 0;
    uint64_t first_ns = UINT64_MAX, last_end_ns = 0;  // of its anomalies
    uint64_t row_first_ns = UINT64_MAX, row_last_end_ns = 0;  // of those not reported yet
    uint64_t opened_ns = 0, last_seen_ns = 0;          // data time it opened, last grew
    std::vector<std::string> jobs;                     // whose anomalies it holds
    std::map<std::string, std::string> who;            // its jobs in words, while they ran
    std::map<std::string, size_t> calls;               // slow calls by operation
    std::map<std::string, size_t> windows;             // windows by cause kind
    double score = 0, threshold = 0;                   // its most unusual member's
    bool scored = false;
  };
  AgentAnomaly close(const Episode& e);
  void name_jobs(Episode& e, const std::function<std::string(const std::string&)>& who);

  JobStartOptions options_;
  std::map<std::string, uint64_t> running_;  // job -> when it started
  // recent starts beside others: (job, start), kept after_ns
  std::vector<std::pair<std::string, uint64_t>> starts_;
  std::vector<Episode> episodes_;
  struct Held {
    AgentAnomaly a;
    uint64_t until_ns;  // (CLOCK_MONOTONIC) it goes out unless a start claims it
  };
  std::vector<Held> held_;
  std::map<uint32_t, uint64_t> candidates_;  // pid -> start
  bool join(AgentAnomaly& a, uint64_t now_ns);
  bool claimable(const AgentAnomaly& a) const;  // by a candidate, were it to become a job
};

}  // namespace eacgm
