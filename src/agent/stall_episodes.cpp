// Episodes of CPU stalls (agent/stall_episodes.h).
#include "agent/stall_episodes.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "agent/job_starts.h"  // folded_anomaly, folded_words

namespace eacgm {

bool stall_can_fold(const AgentAnomaly& x) {
  const detect::Anomaly& a = x.anomaly;
  if (a.stalled_ns <= 0) return false;
  if (a.layer != "window") return true;  // (a call's first explanation is the stop)
  // a window that names a resource of its own (CPU interference, memory, the network, the GPU)
  // or a late rank keeps it: the stop is then part of what it says, not all of it
  static constexpr std::array<std::string_view, 5> kSymptoms = {
      "slow operators", "slow collectives", "slow CUDA calls", "slow Python code",
      "unusual window"};
  std::string kind = detect::cause_kind(a.cause);
  return a.late_pid == 0 && a.cause.find("straggler") == std::string::npos &&
         std::find(kSymptoms.begin(), kSymptoms.end(), kind) != kSymptoms.end();
}

void StallEpisodes::fold(std::vector<AgentAnomaly>& found, uint64_t now_ns) {
  std::vector<AgentAnomaly> out;
  for (AgentAnomaly& x : found) {
    if (!stall_can_fold(x)) {
      out.push_back(std::move(x));
      continue;
    }
    const detect::Anomaly& a = x.anomaly;
    auto it = episodes_.find(x.job);
    if (it != episodes_.end() && a.ts_ns > it->second.last_end_ns + options_.gap_ns) {
      close_into(it->first, it->second, out);
      episodes_.erase(it);
      it = episodes_.end();
    }
    if (it == episodes_.end()) {
      it = episodes_.emplace(x.job, Episode{}).first;
      Episode& n = it->second;
      n.opened_ns = now_ns;
      n.process = a.layer == "window" || x.process.empty()
                      ? x.process
                      : fmt::format("{} (pid {})", x.process, a.pid);
      n.pid = a.pid;
    }
    Episode& e = it->second;
    e.first_ns = std::min(e.first_ns, a.ts_ns);
    e.last_end_ns = std::max(e.last_end_ns, a.ts_ns + a.dur_ns);
    e.stalled_ns = std::max(e.stalled_ns, a.stalled_ns);
    if (a.layer == "window")
      ++e.windows[detect::cause_kind(a.cause)];
    else
      ++e.calls[a.name];
    if (!e.scored || detect::margin(a) < detect::margin(e.score, e.threshold))
      e.score = a.score, e.threshold = a.threshold, e.scored = true;
    if (material_ && !e.material) e.material = material_(x.job, e.pid, e.last_end_ns);
  }
  for (auto it = episodes_.begin(); it != episodes_.end();) {
    Episode& e = it->second;
    if (e.last_end_ns + options_.gap_ns < now_ns || e.opened_ns + options_.max_ns <= now_ns) {
      close_into(it->first, e, out);
      it = episodes_.erase(it);
    } else {
      ++it;
    }
  }
  found = std::move(out);
}

void StallEpisodes::finish(std::vector<AgentAnomaly>& found) {
  for (auto& [job, e] : episodes_) close_into(job, e, found);
  episodes_.clear();
}

void StallEpisodes::close_into(const std::string& job, const Episode& e,
                               std::vector<AgentAnomaly>& out) {
  if (material_ && !e.material && !material_(job, e.pid, e.last_end_ns)) {
    ++dropped_;
    for (const auto& [name, n] : e.calls) dropped_anomalies_ += n;
    for (const auto& [kind, n] : e.windows) dropped_anomalies_ += n;
    return;
  }
  out.push_back(close(job, e));
}

AgentAnomaly StallEpisodes::close(const std::string& job, const Episode& e) {
  AgentAnomaly out =
      folded_anomaly(e.first_ns, e.last_end_ns, e.score, e.threshold, e.calls, e.windows);
  detect::Anomaly& a = out.anomaly;
  a.pid = e.pid;
  a.stalled_ns = e.stalled_ns;
  a.cause = fmt::format("CPU stall: the CPU stopped for up to {:.1f} ms under {}; {} over {:.1f} s",
                        e.stalled_ns / 1e6, e.process.empty() ? "a traced process" : e.process,
                        folded_words(e.calls, e.windows), double(a.dur_ns) / 1e9);
  out.process = e.process;
  out.job = job;
  return out;
}

}  // namespace eacgm
