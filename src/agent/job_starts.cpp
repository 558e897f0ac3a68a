// Episodes of a job starting beside others (agent/job_starts.h).
#include "agent/job_starts.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

namespace eacgm {
namespace {

// "aten::mm 300, aten::addmm 80, aten::linear 37" (the most first; at most three, then how
// many more names)
std::string top_counts(const std::map<std::string, size_t>& counts) {
  std::vector<std::pair<size_t, std::string>> v;
  for (const auto& [name, n] : counts) v.emplace_back(n, name);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::string out;
  for (size_t i = 0; i < v.size() && i < 3; ++i)
    out += fmt::format("{}{} {}", i ? ", " : "", v[i].second, v[i].first);
  if (v.size() > 3) out += fmt::format(" and {} more", v.size() - 3);
  return out;
}

}  // namespace

size_t folded_total(const std::map<std::string, size_t>& counts) {
  size_t n = 0;
  for (const auto& [name, c] : counts) n += c;
  return n;
}

std::string folded_words(const std::map<std::string, size_t>& calls,
                         const std::map<std::string, size_t>& windows) {
  size_t ncalls = folded_total(calls), nwindows = folded_total(windows);
  std::string what;
  if (ncalls)
    what = fmt::format("{} slow call{} ({})", ncalls, ncalls > 1 ? "s" : "", top_counts(calls));
  if (nwindows)
    what += fmt::format("{}{} window{} ({})", what.empty() ? "" : " and ", nwindows,
                        nwindows > 1 ? "s" : "", top_counts(windows));
  return what;
}

bool neighbour_can_cause(const AgentAnomaly& x) {
  const detect::Anomaly& a = x.anomaly;
  if (x.job.empty() || a.late_pid != 0 || a.cause.find("straggler") != std::string::npos ||
      a.cause.find("(network") != std::string::npos)
    return false;
  std::string kind = detect::cause_kind(a.cause);
  // what CPUs, memory bandwidth, caches and the disk taken by another job slow: not the GPU's
  // own work (a node's jobs have GPUs of their own), nor a size or the network. A job starting
  // reads its interpreter's and libraries' files: session 54's hour had one "storage I/O"
  // window of the first job (its block I/O 16x usual, its CPU 1.3 cores of 1.9) 0.7 s after
  // the second job's launcher began, and nothing else of storage in the hour.
  static constexpr std::array<std::string_view, 8> kWindows = {
      "CPU interference", "slow operators",  "slow Python code", "slow CUDA calls",
      "slow collectives", "unusual window", "memory pressure",  "storage I/O"};
  static constexpr std::array<std::string_view, 4> kCalls = {
      "slow operator", "slow cuda call", "slow Python function", "slow collective"};
  if (a.layer == "window")
    return std::find(kWindows.begin(), kWindows.end(), kind) != kWindows.end();
  if (a.name.ends_with(" on the GPU")) return false;  // NCCL's kernels' time (detect/gpu_time.h)
  return std::find(kCalls.begin(), kCalls.end(), kind) != kCalls.end();
}

bool may_start_job(std::string_view name, std::string_view command) {
  if (name.starts_with("python") || name == "pt_main_thread") return true;
  for (std::string_view word : {"python", "torchrun", "deepspeed", "accelerate", "mpirun", "srun"})
    if (command.find(word) != std::string_view::npos) return true;
  return false;
}

void JobStarts::seen(const std::string& job, uint64_t start_ns) {
  bool beside = std::any_of(running_.begin(), running_.end(), [&](const auto& r) {
    return r.first != job && r.second + options_.min_age_ns <= start_ns;
  });
  if (running_.emplace(job, start_ns).second && beside) starts_.emplace_back(job, start_ns);
}

void JobStarts::ended(const std::string& job) { running_.erase(job); }

bool JobStarts::join(AgentAnomaly& x, uint64_t now_ns) {
  const detect::Anomaly& a = x.anomaly;
  auto in = [&](Episode& e) {
    return a.ts_ns + options_.before_ns >= e.first_ns && a.ts_ns <= e.last_end_ns + options_.gap_ns;
  };
  auto e = std::find_if(episodes_.begin(), episodes_.end(), in);
  if (e == episodes_.end()) {
    auto s = std::find_if(starts_.begin(), starts_.end(), [&](const auto& start) {
      return a.ts_ns + options_.before_ns >= start.second &&
             a.ts_ns <= start.second + options_.after_ns;
    });
    if (s == starts_.end()) return false;
    e = std::find_if(episodes_.begin(), episodes_.end(),
                     [&](const Episode& o) { return o.started == s->first; });
    if (e == episodes_.end()) {
      Episode n;
      n.started = s->first, n.started_ns = s->second, n.opened_ns = now_ns;
      episodes_.push_back(std::move(n));
      e = episodes_.end() - 1;
    }
  }
  e->first_ns = std::min(e->first_ns, a.ts_ns);
  e->last_end_ns = std::max(e->last_end_ns, a.ts_ns + a.dur_ns);
  e->row_first_ns = std::min(e->row_first_ns, a.ts_ns);
  e->row_last_end_ns = std::max(e->row_last_end_ns, a.ts_ns + a.dur_ns);
  e->last_seen_ns = now_ns;
  if (std::find(e->jobs.begin(), e->jobs.end(), x.job) == e->jobs.end()) e->jobs.push_back(x.job);
  if (a.layer == "window")
    ++e->windows[detect::cause_kind(a.cause)];
  else
    ++e->calls[a.name];
  if (!e->scored || detect::margin(a) < detect::margin(e->score, e->threshold))
    e->score = a.score, e->threshold = a.threshold, e->scored = true;
  return true;
}

AgentAnomaly folded_anomaly(uint64_t first_ns, uint64_t end_ns, double score, double threshold,
                            const std::map<std::string, size_t>& calls,
                            const std::map<std::string, size_t>& windows) {
  AgentAnomaly out;
  detect::Anomaly& a = out.anomaly;
  a.layer = a.name = "window";
  a.ts_ns = first_ns;
  a.dur_ns = end_ns > first_ns ? end_ns - first_ns : 0;
  a.score = score, a.threshold = threshold;
  out.folded_calls = folded_total(calls), out.folded_windows = folded_total(windows);
  a.top_features = {{"folded_calls", double(out.folded_calls)},
                    {"folded_windows", double(out.folded_windows)}};
  return out;
}

AgentAnomaly JobStarts::close(const Episode& e) {
  auto who = [&](const std::string& job) {
    auto w = e.who.find(job);
    return w != e.who.end() ? w->second : job;
  };
  AgentAnomaly out = folded_anomaly(e.row_first_ns, e.row_last_end_ns, e.score, e.threshold,
                                    e.calls, e.windows);
  detect::Anomaly& a = out.anomaly;
  a.cause = fmt::format("CPU interference: a job started beside it ({}); {} over {:.1f} s",
                        who(e.started), folded_words(e.calls, e.windows), double(a.dur_ns) / 1e9);
  for (const std::string& j : e.jobs)
    out.process += (out.process.empty() ? "" : " and ") + who(j);
  out.job = e.jobs.size() == 1 ? e.jobs.front() : std::string();
  return out;
}

// (an ended job's processes are no longer known: its words from while it ran; a job's processes
// exit one by one at its end, and "python3 (pid 7954)" says less than "the processes launched by
// pid 7952 (pids 7953, 7954)" of session 55's ten minutes: the longer words it had are kept)
void JobStarts::name_jobs(Episode& e, const std::function<std::string(const std::string&)>& who) {
  auto name = [&](const std::string& job) {
    if (!running_.count(job)) return;
    std::string now = who(job);
    std::string& kept = e.who[job];
    if (now.size() >= kept.size()) kept = std::move(now);
  };
  for (const std::string& job : e.jobs) name(job);
  name(e.started);
}

bool JobStarts::claimable(const AgentAnomaly& x) const {
  const uint64_t ts = x.anomaly.ts_ns;
  return std::any_of(candidates_.begin(), candidates_.end(), [&](const auto& c) {
    return ts + options_.before_ns >= c.second && ts <= c.second + options_.after_ns;
  });
}

void JobStarts::fold(std::vector<AgentAnomaly>& found, uint64_t now_ns, uint64_t clock_ns,
                     const std::function<std::string(const std::string&)>& who) {
  const uint64_t keep = options_.after_ns + options_.gap_ns + options_.hold_ns;
  std::erase_if(starts_, [&](const auto& s) { return s.second + keep < now_ns; });
  std::erase_if(candidates_,
                [&](const auto& c) { return c.second + options_.candidate_ns < now_ns; });
  std::vector<AgentAnomaly> out;
  for (AgentAnomaly& x : found) {
    if (!neighbour_can_cause(x)) {
      out.push_back(std::move(x));
    } else if (join(x, now_ns)) {
      // one of an episode
    } else if (claimable(x)) {
      held_.push_back({std::move(x), clock_ns + options_.hold_ns});
    } else {
      out.push_back(std::move(x));
    }
  }
  // (in the order they came: a held one is tried again, and goes out once no candidate could
  // claim it or its time is up)
  for (auto it = held_.begin(); it != held_.end();) {
    if (join(it->a, now_ns)) {
      it = held_.erase(it);
    } else if (it->until_ns <= clock_ns || !claimable(it->a)) {
      out.push_back(std::move(it->a));
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto e = episodes_.begin(); e != episodes_.end();) {
    name_jobs(*e, who);
    // (not before the start's after_ns is over: session 55's ten minutes had one start as two
    // episodes 16 s apart, its first steps' slow collectives after a quiet 10 s)
    bool ended =
        e->last_seen_ns + options_.gap_ns < now_ns && e->started_ns + options_.after_ns < now_ns;
    bool members = !e->calls.empty() || !e->windows.empty();
    if (members && (ended || e->opened_ns + options_.max_ns <= now_ns)) {
      out.push_back(close(*e));
      // a neighbour still slowing them: the next minute's anomalies, one more anomaly
      e->calls.clear(), e->windows.clear(), e->jobs.clear(), e->scored = false;
      e->row_first_ns = UINT64_MAX, e->row_last_end_ns = 0, e->opened_ns = now_ns;
    }
    if (ended)
      e = episodes_.erase(e);
    else
      ++e;
  }
  found = std::move(out);
}

void JobStarts::finish(std::vector<AgentAnomaly>& found,
                       const std::function<std::string(const std::string&)>& who) {
  for (Held& h : held_) found.push_back(std::move(h.a));
  held_.clear();
  for (Episode& e : episodes_) {
    name_jobs(e, who);
    if (!e.calls.empty() || !e.windows.empty()) found.push_back(close(e));
  }
  episodes_.clear();
}

}  // namespace eacgm
