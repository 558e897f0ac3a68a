// A rank late in a job's first seconds (detect/young_stragglers.h).
#include "detect/young_stragglers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "detect/materiality.h"
#include "report/collectives.h"

namespace eacgm::detect {

std::vector<detect::Anomaly> YoungStragglers::observe(const std::string& job,
                                                      const std::string& op,
                                                      const MatchedCall& c) {
  std::vector<detect::Anomaly> out;
  // (the last rank's own call waited for no one)
  if (!c.late_pid || c.late_pid == c.pid) return out;
  auto [it, fresh] = states_.try_emplace({job, op});
  State& s = it->second;
  if (fresh) s.first_ns = c.ts_ns;
  s.last_ns = std::max(s.last_ns, c.ts_ns);
  const double late = double(c.straggling_ns);
  // (the median of the waits before this one, looked up only for a call that may be late)
  bool may_be = c.ts_ns >= s.first_ns + options_.start_ns &&
                s.waits.size() >= options_.min_usual && c.straggling_ns >= options_.min_late_ns &&
                late >= 0.25 * double(c.dur_ns);
  double usual = NAN;
  if (may_be) {
    std::vector<uint64_t> w(s.waits.begin(), s.waits.end());
    auto mid = w.begin() + std::ptrdiff_t(w.size() / 2);
    std::nth_element(w.begin(), mid, w.end());
    usual = double(*mid);
  }
  s.waits.push_back(c.straggling_ns);
  if (s.waits.size() > options_.usual_waits) s.waits.pop_front();
  if (!may_be || late < options_.usual_factor * usual) return out;
  while (!s.recent.empty() && s.recent.front().call.ts_ns + options_.window_ns <= c.ts_ns)
    s.recent.pop_front();
  s.recent.push_back({c, usual, false});

  // Per late rank: its late joins of the window as events (one per instance: the waiting ranks'
  // calls closer than merge_ns are one, its longest wait), their sum, the first one's time.
  struct Rank {
    std::vector<std::pair<uint64_t, uint64_t>> joins;  // (ts, straggling)
    size_t events = 0;
    double sum_ns = 0;
    uint64_t first_ns = 0, last_ns = 0;
  };
  std::map<uint32_t, Rank> ranks;
  for (const Candidate& k : s.recent)
    ranks[k.call.late_pid].joins.emplace_back(k.call.joined_ns, k.call.straggling_ns);
  for (auto& [pid, r] : ranks) {
    std::sort(r.joins.begin(), r.joins.end());
    uint64_t event_ts = 0, event_max = 0;
    for (const auto& [ts, wait] : r.joins) {
      if (r.events == 0 || ts >= event_ts + options_.merge_ns) {
        r.sum_ns += double(event_max);
        ++r.events, event_ts = ts, event_max = 0;
      }
      event_max = std::max(event_max, wait);
    }
    r.sum_ns += double(event_max);
    r.first_ns = r.joins.front().first;
    r.last_ns = r.joins.back().first;
  }
  const Rank& r = ranks[c.late_pid];
  double others = 0;
  for (const auto& [pid, o] : ranks)
    if (pid != c.late_pid) others = std::max(others, o.sum_ns);
  // (n joins a period T apart span nT: from the first to the last and one mean interval more)
  double between = double(r.last_ns - r.first_ns);
  double span = std::max(double(detect::kMinMaterialSpanNs),
                         r.events > 1 ? between * double(r.events) / double(r.events - 1) : 0.0);
  double share = r.sum_ns / span;
  if (r.events < options_.min_events || share < options_.min_share ||
      r.sum_ns < options_.stand_out * others)
    return out;
  // Those of its late joins that go out: not the few much shorter than its typical one (a busy
  // machine's 5 ms late join among a straggler's 30 ms ones is the job's own, not the fault)
  std::vector<uint64_t> waits;
  for (const auto& j : r.joins) waits.push_back(j.second);
  auto mid = waits.begin() + std::ptrdiff_t(waits.size() / 2);
  std::nth_element(waits.begin(), mid, waits.end());
  const double typical = double(*mid);
  for (Candidate& k : s.recent) {
    if (k.reported || k.call.late_pid != c.late_pid ||
        double(k.call.straggling_ns) < options_.typical_share * typical)
      continue;
    k.reported = true;
    detect::Anomaly a;
    a.layer = "comm";
    a.name = op;
    a.ts_ns = k.call.ts_ns;
    a.dur_ns = k.call.dur_ns;
    a.pid = k.call.pid;
    a.tid = k.call.tid;
    a.row = k.call.row;
    a.runq_ns = k.call.runq_ns;
    a.cause = fmt::format("straggling rank: {} waited for a peer", op);
    // (no model scored it: no log-density, no threshold, no contribution; stored as NULL)
    a.score = a.threshold = NAN;
    a.top_features = {{"log_straggler_wait_10us", NAN}};
    a.measured = {{"log_straggler_wait_10us", double(k.call.straggling_ns) / 1e3, k.usual_ns / 1e3}};
    a.burst = r.events;
    a.burst_window_ns = uint64_t(span);
    a.late_share = share;
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<Anomaly> young_stragglers(std::vector<FeatureTable>& tables,
                                      const Collectives& collectives, YoungStragglers& rule,
                                      const std::function<bool(const FeatureTable&, size_t)>& unjudged) {
  std::vector<Anomaly> out;
  for (FeatureTable& t : tables) {
    if (t.layer != "comm" || t.late_pid.empty()) continue;
    std::vector<size_t> rows;
    for (size_t i = 0; i < t.ts_ns.size(); ++i)
      if (t.late_pid[i] && unjudged(t, i)) rows.push_back(i);
    std::stable_sort(rows.begin(), rows.end(),
                     [&](size_t a, size_t b) { return t.ts_ns[a] < t.ts_ns[b]; });
    for (size_t i : rows) {
      const PeerWait* w = collectives.find(t.pid[i], t.ts_ns[i]);
      // (NCCL's waits measured on the GPU are the models' alone, as in the agent)
      if (!w || w->on_gpu || w->last_pid == t.pid[i]) continue;
      MatchedCall c{t.ts_ns[i], t.dur_ns[i], t.pid[i], t.tid[i], t.runq_ns[i],
                    w->straggling_ns(), t.ts_ns[i] + w->wait_ns, w->last_pid, i};
      // (one state per table, its group for the job: a recording, merged or not, is one job)
      for (Anomaly& a : rule.observe(t.group, t.name, c)) {
        if (a.row >= t.ts_ns.size() || t.ts_ns[a.row] != a.ts_ns) continue;  // (not this table's)
        if (t.left_out.empty()) t.left_out.assign(t.ts_ns.size(), 0);
        t.left_out[a.row] = 1;
        out.push_back(std::move(a));
      }
    }
  }
  return out;
}

void YoungStragglers::forget_before(uint64_t ts_ns) {
  std::erase_if(states_, [&](const auto& s) { return s.second.last_ns < ts_ns; });
}

}  // namespace eacgm::detect
