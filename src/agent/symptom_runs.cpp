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
  if (a.layer != "window" || a.stalled_ns > 0 || a.late_pid != 0 || x.folded_calls > 0 ||
      x.folded_windows > 0)
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
                       const std::map<std::string, uint64_t>& judged_to) {
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
    bool joins = it != runs_.end() && ts <= it->second.end_ns + kSlackNs && ts >= it->second.start_ns;
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
  // a job whose windows were judged past a held run's end: the window after it was normal
  for (auto it = runs_.begin(); it != runs_.end();) {
    auto j = judged_to.find(it->first);
    if (j != judged_to.end() && j->second > it->second.end_ns + kSlackNs) {
      drop(it->second);
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
