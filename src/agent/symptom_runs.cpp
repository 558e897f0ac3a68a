// Runs of windows that name only a symptom (agent/symptom_runs.h).
#include "agent/symptom_runs.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace eacgm {

namespace {
// Windows of one job are whole windows end to end: the next one of a run starts where the last
// ended (a millisecond of slack for rounding).
constexpr uint64_t kSlackNs = 1'000'000;
}  // namespace

bool names_only_a_symptom(const AgentAnomaly& x) {
  const detect::Anomaly& a = x.anomaly;
  if (a.layer != "window" || x.stands_alone || a.stalled_ns > 0 || a.late_pid != 0 ||
      x.folded_calls > 0 || x.folded_windows > 0)
    return false;
  // (the GPU's own symptoms, idle or busier, are measured on the GPU, not inferred from how
  // fast the host's threads ran: they go out as before)
  static constexpr std::array<std::string_view, 4> kSymptoms = {
      "slow operators", "slow collectives", "slow CUDA calls", "slow Python code"};
  // (what follows a symptom's name is what it found to blame: a late rank, a stopped CPU;
  // an unusual window's says only what moved)
  if (a.cause.starts_with("unusual window")) return true;
  return std::find(kSymptoms.begin(), kSymptoms.end(), std::string_view(a.cause)) !=
         kSymptoms.end();
}

void SymptomRuns::drop(Run& r) {
  if (r.out || r.held.empty()) return;
  ++dropped_runs_;
  dropped_windows_ += r.held.size();
  r.held.clear();
}

void SymptomRuns::fold(std::vector<AgentAnomaly>& found,
                       const std::map<std::string, std::vector<uint64_t>>& judged) {
  // the windows judged normal since the last fold, per job: those judged that are no anomaly
  std::map<std::string, std::vector<uint64_t>> normal;
  {
    std::map<std::string, std::vector<uint64_t>> anomalous;
    for (const AgentAnomaly& x : found)
      if (x.anomaly.layer == "window") anomalous[x.job].push_back(x.anomaly.ts_ns);
    for (const auto& [job, starts] : judged) {
      auto& a = anomalous[job];
      std::sort(a.begin(), a.end());
      for (uint64_t ts : starts)
        if (!std::binary_search(a.begin(), a.end(), ts)) normal[job].push_back(ts);
    }
  }
  // the first window judged normal at or after `from` (UINT64_MAX: none)
  auto normal_from = [&](const std::string& job, uint64_t from) {
    auto it = normal.find(job);
    if (it == normal.end()) return UINT64_MAX;
    auto n = std::lower_bound(it->second.begin(), it->second.end(), from);
    return n == it->second.end() ? UINT64_MAX : *n;
  };
  std::vector<AgentAnomaly> out;
  out.reserve(found.size());
  auto release = [&](Run& r) {
    for (auto& h : r.held) out.push_back(std::move(h));
    r.held.clear();
  };
  for (AgentAnomaly& x : found) {
    if (x.anomaly.layer != "window") {
      out.push_back(std::move(x));
      continue;
    }
    const uint64_t ts = x.anomaly.ts_ns, end = ts + x.anomaly.dur_ns;
    auto it = runs_.find(x.job);
    // it continues the job's run where no window was judged normal between them (windows not
    // judged at all, for up to max_gap_ns, do not part them)
    bool joins = false;
    if (it != runs_.end()) {
      Run& r = it->second;
      r.normal_after_ns = std::min(r.normal_after_ns, normal_from(x.job, r.end_ns));
      joins = ts >= r.start_ns && ts <= r.end_ns + options_.max_gap_ns + kSlackNs &&
              r.normal_after_ns >= ts;
    }
    if (!names_only_a_symptom(x)) {
      // a cause named: the symptom windows right before it were its onset; the symptom
      // windows after it count as a run of their own
      if (joins) release(it->second);
      else if (it != runs_.end()) drop(it->second);
      if (it != runs_.end()) runs_.erase(it);
      out.push_back(std::move(x));
      continue;
    }
    if (!joins) {
      if (it != runs_.end()) drop(it->second);
      Run fresh;
      fresh.start_ns = ts;
      fresh.end_ns = end;
      it = runs_.insert_or_assign(x.job, std::move(fresh)).first;
    }
    Run& r = it->second;
    r.end_ns = std::max(r.end_ns, end);
    if (r.out) {
      out.push_back(std::move(x));
      continue;
    }
    r.held.push_back(std::move(x));
    if (r.end_ns - r.start_ns >= options_.min_ns) {
      release(r);
      r.out = true;
    }
  }
  // a run with a window judged normal after it, or none judged anomalous for max_gap_ns since
  // its end while the job's windows were judged past that: over
  for (auto it = runs_.begin(); it != runs_.end();) {
    Run& r = it->second;
    r.normal_after_ns = std::min(r.normal_after_ns, normal_from(it->first, r.end_ns));
    auto j = judged.find(it->first);
    bool stale = j != judged.end() && !j->second.empty() &&
                 j->second.back() > r.end_ns + options_.max_gap_ns + kSlackNs;
    if (r.normal_after_ns != UINT64_MAX || stale) {
      drop(r);
      it = runs_.erase(it);
    } else {
      ++it;
    }
  }
  found = std::move(out);
}

void SymptomRuns::ended(const std::string& job) {
  auto it = runs_.find(job);
  if (it == runs_.end()) return;
  drop(it->second);
  runs_.erase(it);
}

void SymptomRuns::finish() {
  for (auto& [job, r] : runs_) drop(r);
  runs_.clear();
}

size_t SymptomRuns::held() const {
  size_t n = 0;
  for (const auto& [job, r] : runs_) n += r.held.size();
  return n;
}

}  // namespace eacgm
