// Episodes of CPU interference (agent/interference_episodes.h).
#include "agent/interference_episodes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "agent/job_starts.h"  // folded_anomaly, folded_words

namespace eacgm {

bool interference_can_fold(const AgentAnomaly& x) {
  const detect::Anomaly& a = x.anomaly;
  // slow calls only (not a size, nor a late rank: "straggling rank" or a named straggler);
  // CallContext::explain's words; a stall, when there was one, is named first and folded by
  // StallEpisodes
  static constexpr std::array<std::string_view, 4> kCalls = {
      "slow operator", "slow cuda call", "slow Python function", "slow collective"};
  std::string kind = detect::cause_kind(a.cause);
  return a.layer != "window" && a.stalled_ns <= 0 && a.late_pid == 0 &&
         std::find(kCalls.begin(), kCalls.end(), kind) != kCalls.end() &&
         !a.name.ends_with(" on the GPU") &&  // (NCCL kernels' time: detect/gpu_time.h)
         a.cause.find("; preempted: waited ") != std::string::npos &&
         a.cause.find("straggl") == std::string::npos;
}

namespace {

constexpr std::string_view kBehind = ", mostly behind ";

// The taker CallContext::explain named in a cause ("cc1plus (pid 4242)"), or "".
std::string taker_named(const std::string& cause) {
  size_t at = cause.rfind(kBehind);
  if (at == std::string::npos) return "";
  at += kBehind.size();
  size_t end = cause.find("; ", at);  // (attribute_nested's "; inside it: ..." may follow)
  return cause.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// Its name: "cc1plus" of "cc1plus (pid 4242)" ("(sd-pam)" of "(sd-pam) (pid 7)").
std::string taker_name_of(const std::string& named) {
  return named.substr(0, std::min(named.rfind(" ("), named.size()));
}

}  // namespace

void InterferenceEpisodes::fold(std::vector<AgentAnomaly>& found, uint64_t now_ns) {
  // in time order: calls are judged operation by operation, and JobStarts lets anomalies it
  // held go out after the newer ones
  std::stable_sort(found.begin(), found.end(), [](const AgentAnomaly& x, const AgentAnomaly& y) {
    return x.anomaly.ts_ns < y.anomaly.ts_ns;
  });
  std::vector<AgentAnomaly> out;
  for (AgentAnomaly& x : found) {
    if (!interference_can_fold(x)) {
      out.push_back(std::move(x));
      continue;
    }
    const detect::Anomaly& a = x.anomaly;
    const std::string job = x.job.empty() ? fmt::format("pid {}", a.pid) : x.job;
    const auto key = std::make_pair(job, a.layer);
    const uint64_t end = a.ts_ns + a.dur_ns;
    auto it = episodes_.find(key);
    if (it != episodes_.end() && end + options_.gap_ns < it->second.lead_ns) {
      out.push_back(std::move(x));  // long before the episode: not part of it
      continue;
    }
    if (it != episodes_.end() && a.ts_ns > it->second.last_end_ns + options_.gap_ns) {
      flush_into(key, it->second, out);
      episodes_.erase(it);
      it = episodes_.end();
    }
    if (it == episodes_.end()) {  // an episode's first: out at once
      Episode n;
      n.lead_ns = a.ts_ns;
      n.last_end_ns = end;
      n.kind = detect::cause_kind(a.cause);
      n.name = x.process;
      episodes_.emplace(key, std::move(n));
      out.push_back(std::move(x));
      continue;
    }
    Episode& e = it->second;
    if (e.calls.empty()) e.opened_ns = now_ns;
    e.last_end_ns = std::max(e.last_end_ns, end);
    e.first_ns = std::min(e.first_ns, a.ts_ns);
    e.end_ns = std::max(e.end_ns, end);
    ++e.calls[a.name];
    e.pids.insert(a.pid);
    if (e.name.empty()) e.name = x.process;
    e.runq_ns = std::max(e.runq_ns, a.runq_ns);
    if (std::string by = taker_named(a.cause); !by.empty()) {
      auto& [count, text] = e.behind[taker_name_of(by)];
      ++count;
      text = std::move(by);
    }
    if (!e.scored || detect::margin(a) < detect::margin(e.score, e.threshold))
      e.score = a.score, e.threshold = a.threshold, e.scored = true;
  }
  for (auto it = episodes_.begin(); it != episodes_.end();) {
    Episode& e = it->second;
    if (e.last_end_ns + options_.gap_ns < now_ns) {
      flush_into(it->first, e, out);
      it = episodes_.erase(it);
      continue;
    }
    if (!e.calls.empty() && e.opened_ns + options_.max_ns <= now_ns) flush_into(it->first, e, out);
    ++it;
  }
  found = std::move(out);
}

void InterferenceEpisodes::finish(std::vector<AgentAnomaly>& found) {
  for (auto& [key, e] : episodes_) flush_into(key, e, found);
  episodes_.clear();
}

void InterferenceEpisodes::flush_into(const std::pair<std::string, std::string>& key, Episode& e,
                                      std::vector<AgentAnomaly>& out) {
  if (e.calls.empty()) return;
  const auto& [job, layer] = key;
  AgentAnomaly x = folded_anomaly(e.first_ns, e.end_ns, e.score, e.threshold, e.calls, {});
  detect::Anomaly& a = x.anomaly;
  // counted as its members were (layer and kind: slow calls, not a window), named by the most
  // frequent of them
  a.layer = layer;
  a.name = std::max_element(e.calls.begin(), e.calls.end(), [](const auto& p, const auto& q) {
             return p.second < q.second;
           })->first;
  a.pid = *e.pids.begin();
  a.runq_ns = e.runq_ns;
  std::string who = e.name.empty() ? "pid" : e.name + " (pid";
  who += fmt::format("{} {}", e.pids.size() > 1 ? "s" : "", fmt::join(e.pids, ", "));
  if (!e.name.empty()) who += ")";
  // the taker named for half of the calls or more, as each call names one
  size_t n = 0;
  for (const auto& [op, count] : e.calls) n += count;
  auto top = std::max_element(e.behind.begin(), e.behind.end(), [](const auto& p, const auto& q) {
    return p.second.first < q.second.first;
  });
  std::string behind = top != e.behind.end() && 2 * top->second.first >= n
                           ? std::string(kBehind) + top->second.second
                           : "";
  a.cause = fmt::format(
      "{}: after the first, {} over {:.1f} s in {}; preempted: their threads waited up to {:.1f} "
      "ms for a CPU (CPU interference){}",
      e.kind, folded_words(e.calls, {}), double(a.dur_ns) / 1e9, who, double(e.runq_ns) / 1e6,
      behind);
  x.process = e.name;
  x.job = job.starts_with("pid ") ? std::string() : job;
  out.push_back(std::move(x));
  e.calls.clear();
  e.pids.clear();
  e.first_ns = UINT64_MAX, e.end_ns = 0;
  e.runq_ns = 0;
  e.behind.clear();
  e.scored = false;
}

}  // namespace eacgm
