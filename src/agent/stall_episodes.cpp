// Episodes of CPU stalls (agent/stall_episodes.h).
#include "agent/stall_episodes.h"

#include <fmt/format.h>

#include <algorithm>

#include "agent/job_starts.h"  // folded_anomaly, folded_words

namespace eacgm {

void StallEpisodes::fold(std::vector<AgentAnomaly>& found, uint64_t now_ns) {
  std::vector<AgentAnomaly> out;
  for (AgentAnomaly& x : found) {
    const detect::Anomaly& a = x.anomaly;
    if (a.stalled_ns <= 0) {
      out.push_back(std::move(x));
      continue;
    }
    if (e_.open && a.ts_ns > e_.last_end_ns + options_.gap_ns) out.push_back(close());
    if (!e_.open) {
      e_ = Episode{};
      e_.open = true;
      e_.opened_ns = now_ns;
      e_.process = a.layer == "window" || x.process.empty()
                       ? x.process
                       : fmt::format("{} (pid {})", x.process, a.pid);
      e_.pid = a.pid;
    }
    e_.first_ns = std::min(e_.first_ns, a.ts_ns);
    e_.last_end_ns = std::max(e_.last_end_ns, a.ts_ns + a.dur_ns);
    e_.stalled_ns = std::max(e_.stalled_ns, a.stalled_ns);
    if (a.layer == "window")
      ++e_.windows[detect::cause_kind(a.cause)];
    else
      ++e_.calls[a.name];
    if (e_.calls.size() + e_.windows.size() == 1 || a.score - a.threshold < e_.score - e_.threshold)
      e_.score = a.score, e_.threshold = a.threshold;
  }
  if (e_.open &&
      (e_.last_end_ns + options_.gap_ns < now_ns || e_.opened_ns + options_.max_ns <= now_ns))
    out.push_back(close());
  found = std::move(out);
}

void StallEpisodes::finish(std::vector<AgentAnomaly>& found) {
  if (e_.open) found.push_back(close());
}

AgentAnomaly StallEpisodes::close() {
  AgentAnomaly out =
      folded_anomaly(e_.first_ns, e_.last_end_ns, e_.score, e_.threshold, e_.calls, e_.windows);
  detect::Anomaly& a = out.anomaly;
  a.pid = e_.pid;
  a.stalled_ns = e_.stalled_ns;
  a.cause = fmt::format("CPU stall: the CPU stopped for up to {:.1f} ms under {}; {} over {:.1f} s",
                        e_.stalled_ns / 1e6, e_.process.empty() ? "a traced process" : e_.process,
                        folded_words(e_.calls, e_.windows), double(a.dur_ns) / 1e9);
  out.process = e_.process;
  e_ = Episode{};
  return out;
}

}  // namespace eacgm
