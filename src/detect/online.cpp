// Sliding-window refits and per-sample scoring, on the batch detector's training and scoring.
#include "detect/online.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "detect/materiality.h"

namespace eacgm::detect {

double poisson_tail(size_t k, double lambda) {
  if (k == 0) return 1;
  if (!(lambda > 0)) return 0;
  if (double(k) <= lambda) return 1;  // at least ~0.4 there: nothing unusual
  // The terms from k up: each is lambda / (i + 1) times the one before, which for i >= k >
  // lambda shrinks them geometrically; summed relative to the k-th, then scaled by it.
  double log_first = -lambda + double(k) * std::log(lambda) - std::lgamma(double(k) + 1);
  double term = 1, sum = 0;
  for (size_t i = k; i < k + 10'000 && term > 1e-17 * sum; ++i) {
    sum += term;
    term *= lambda / double(i + 1);
  }
  return std::min(1.0, std::exp(log_first) * sum);
}

double negbin_tail(size_t k, double mean, double dispersion) {
  if (!(dispersion > 1 + 1e-9) || !std::isfinite(dispersion)) return poisson_tail(k, mean);
  if (k == 0) return 1;
  if (!(mean > 0)) return 0;
  if (double(k) <= mean) return 1;
  // r successes of chance p: mean r (1 - p) / p, variance mean / p; so p = 1 / dispersion
  const double p = 1 / dispersion, r = mean / (dispersion - 1);
  const double kk = double(k);
  double log_first = std::lgamma(kk + r) - std::lgamma(r) - std::lgamma(kk + 1) + r * std::log(p) +
                     kk * std::log1p(-p);
  // each term (j + r) / (j + 1) (1 - p) times the one before: below 1 for j above the mean,
  // and tending to 1 - p; where that is near 1 (a wide spread), what the loop leaves is
  // bounded by a geometric series of the larger of the two ratios (an overestimate: a count
  // is never called rarer than it is)
  double term = 1, sum = 0;
  size_t j = k;
  for (; j < k + 10'000 && term > 1e-17 * sum; ++j) {
    sum += term;
    term *= (double(j) + r) / double(j + 1) * (1 - p);
  }
  double ratio = std::max((double(j) + r) / double(j + 1) * (1 - p), 1 - p);
  if (term > 1e-17 * sum) sum += term / (1 - ratio);
  return std::min(1.0, std::exp(log_first) * sum);
}

std::optional<GroupModel> fit_group(const RefitJob& job) {
  DetectorModel m = train_detector({job.training}, UINT64_MAX, job.options, nullptr);
  if (m.groups.empty()) return std::nullopt;
  GroupModel g = std::move(m.groups.front());
  if (job.training.layer != "window") {
    // how many of its own training calls the model would flag: some of every healthy history
    std::vector<Anomaly> flagged;
    find_anomalies(g, job.training, 0, job.min_slowdown, flagged, job.min_excess_us);
    double rows = double(std::max<Eigen::Index>(job.training.values.rows(), 1));
    g.background_rate = std::min(1.0, std::max(double(flagged.size()) / rows, job.live_rate));
    g.slowest_ns = job.slowest_ns;
    g.usual_burst = job.usual_burst;
    g.dispersion = job.dispersion;
    g.usual_sizes = job.usual_sizes;
    g.tails = job.tails;
    g.history_calls = job.history_calls;
  }
  return g;
}

std::vector<Anomaly> OnlineDetector::observe(const FeatureTable& rows) { return observe(rows, {}); }

std::vector<Anomaly> OnlineDetector::observe(const FeatureTable& rows,
                                             const std::vector<bool>& judged) {
  std::vector<Anomaly> found;
  if (rows.ts_ns.empty()) return found;
  Group& g = groups_[rows.group];
  if (g.key.empty()) g.key = rows.group, g.layer = rows.layer, g.name = rows.name;
  if (g.features.empty()) g.features = rows.feature_names;
  // Score against the model of the moment, before the samples can shape it.
  if (g.model)
    find_anomalies(*g.model, rows, 0, options_.min_slowdown, found, options_.min_excess_us,
                   nullptr, &g.turns);
  if (rows.feature_names != g.features) {
    // a group's features changed (e.g. a first call with bytes): start its window again
    g.features = rows.feature_names;
    g.window.clear();
    g.archive.clear();
    g.limbo.clear();
    g.bins.clear(), g.last_event_ns = 0;
    g.model.reset();
    g.fitted_at = 0, g.fitted_size = 0;  // (a first fit again, as soon as the window is enough)
    for (auto& [kind, b] : g.bursts) unreported_ += b.pending.size();
    g.bursts.clear();
  }
  size_t next = 0;
  for (size_t i = 0; i < rows.ts_ns.size(); ++i) {
    // unjudged anomalies stay out of the fits too: a warm-up's slow calls are not the normal
    bool flagged = next < found.size() && found[next].row == i;
    next += flagged;
    g.window.push_back({rows.ts_ns[i], rows.dur_ns[i],
                        rows.values.row(Eigen::Index(i)).transpose(), flagged, false,
                        i < rows.runq_ns.size() ? rows.runq_ns[i] : -1});
  }
  g.first_ts = std::min(g.first_ts, rows.ts_ns.front());
  g.last_ts = rows.ts_ns.back();
  uint64_t oldest = g.last_ts > options_.window_ns ? g.last_ts - options_.window_ns : 0;
  while (!g.window.empty() &&
         (g.window.front().ts_ns < oldest || g.window.size() > options_.max_samples)) {
    Sample& s = g.window.front();
    if (s.ts_ns >= oldest) {
      if (s.flagged && !s.reported && s.ts_ns + options_.burst_window_ns > g.last_ts)
        g.limbo.push_back(std::move(s));
      else
        archive(g, s);
    }
    g.window.pop_front();
  }
  while (!g.limbo.empty() && g.limbo.front().ts_ns + options_.burst_window_ns <= g.last_ts) {
    if (g.limbo.front().ts_ns >= oldest) archive(g, g.limbo.front());
    g.limbo.pop_front();
  }
  const uint64_t span = std::max<uint64_t>(options_.window_ns / kArchiveSpans, 1);
  while (!g.archive.empty() && g.archive.front().from_ns + span <= oldest) g.archive.pop_front();
  while (!g.bins.empty() && g.bins.front().from_ns + options_.burst_window_ns <= oldest)
    g.bins.pop_front();
  if (!judged.empty())
    std::erase_if(found, [&](const Anomaly& a) { return a.row < judged.size() && !judged[a.row]; });
  if (g.layer == "window" && options_.window_run > 1) report_window_runs(g, rows, found);
  if (options_.burst_window_ns > 0 && g.layer != "window" && !found.empty() && g.model) {
    std::vector<Anomaly> out;
    report_bursts(g, found, out);  // against the model that judged them
    found = std::move(out);
  }
  if (options_.refit_inline && due(g)) install(rows.group, fit_group(take_job(g)), g.last_ts);
  return found;
}

// Each row a window (its start and length, in time order): an anomalous one extends the run
// that ended where it starts, or starts one; a run of window_run goes out, and each later
// window of it at once, as does one that stands alone (window_stands_alone); a run cut short (a window judged normal, or unjudged, or a gap) is
// dropped, unreported.
void OnlineDetector::report_window_runs(Group& g, const FeatureTable& rows,
                                        std::vector<Anomaly>& found) {
  std::vector<Anomaly> out;
  auto next = found.begin();
  for (size_t i = 0; i < rows.ts_ns.size(); ++i) {
    const bool anomalous = next != found.end() && next->row == i;
    if (!anomalous || rows.ts_ns[i] != g.run_end_ns) {
      unreported_windows_ += g.run_held.size();
      g.run_held.clear();
      g.run_length = 0;
    }
    if (!anomalous) continue;
    ++g.run_length;
    g.run_end_ns = rows.ts_ns[i] + rows.dur_ns[i];
    g.run_held.push_back(std::move(*next++));
    if (g.run_length >= options_.window_run ||
        (options_.window_stands_alone && g.model && options_.window_stands_alone(rows, i, *g.model))) {
      for (Anomaly& a : g.run_held) out.push_back(std::move(a));
      g.run_held.clear();
    }
  }
  found = std::move(out);
}

namespace {
// Samples come in the order their calls ended: a call that began up to this long before
// another may come after it (the waiting ranks of one collective end together).
constexpr uint64_t kOrderSlackNs = 1'000'000'000;
// Marks the history's sample of a reported anomaly (searched from the newest: it is recent;
// in the limbo where it left the window).
template <class Samples>
bool mark_reported_in(Samples& samples, const Anomaly& a) {
  for (auto it = samples.rbegin(); it != samples.rend() && it->ts_ns + kOrderSlackNs >= a.ts_ns;
       ++it)
    if (it->ts_ns == a.ts_ns && it->dur_ns == a.dur_ns && it->flagged) {
      it->reported = true;
      return true;
    }
  return false;
}
template <class Group>
void mark_reported(Group& g, const Anomaly& a) {
  if (!mark_reported_in(g.window, a)) mark_reported_in(g.limbo, a);
}
}  // namespace

void OnlineDetector::note_reported(const std::string& group, uint64_t ts_ns, uint64_t dur_ns) {
  auto g = groups_.find(group);
  if (g == groups_.end()) return;
  auto mark = [&](auto& samples) {
    for (auto it = samples.rbegin(); it != samples.rend() && it->ts_ns + kOrderSlackNs >= ts_ns;
         ++it)
      if (it->ts_ns == ts_ns && it->dur_ns == dur_ns) {
        it->flagged = it->reported = true;
        return true;
      }
    return false;
  };
  if (!mark(g->second.window)) mark(g->second.limbo);
}

// Each candidate joins its group's recent ones of its kind (report_burst).
void OnlineDetector::report_bursts(Group& g, std::vector<Anomaly>& candidates,
                                   std::vector<Anomaly>& out) {
  const GroupModel& m = *g.model;
  for (Anomaly& a : candidates) {
    // flagged for its size, a size the history had again and again: no anomaly
    if (!a.top_features.empty() && a.top_features.front().first == "log2_bytes" &&
        !m.usual_sizes.empty()) {
      auto measured = std::find_if(a.measured.begin(), a.measured.end(),
                                   [](const Measured& x) { return x.feature == "log2_bytes"; });
      if (measured != a.measured.end()) {
        double size = std::log2(1 + measured->value);
        if (std::any_of(m.usual_sizes.begin(), m.usual_sizes.end(),
                        [&](double u) { return std::abs(u - size) < 1e-6; })) {
          ++unreported_;
          continue;
        }
      }
    }
    std::string kind = a.top_features.empty() ? "" : a.top_features.front().first;
    size_t first = out.size();
    report_burst(g, kind, g.bursts[kind], a, out);
    if (options_.take_along_share > 0) note_burst(g, out, first);
  }
}

namespace {
// The kinds whose candidates are also judged by how far out they were (GroupModel::tails).
constexpr const char* kTailKindNames[kTailKinds] = {"log_duration_us", "log_straggler_wait_10us"};
bool has_tail(const std::string& kind) {
  return std::any_of(std::begin(kTailKindNames), std::end(kTailKindNames),
                     [&](const char* k) { return kind == k; });
}
// The column of a tail kind among a group's features (-1: none).
Eigen::Index tail_column(const std::vector<std::string>& features, size_t kind) {
  auto f = std::find(features.begin(), features.end(), kTailKindNames[kind]);
  return f == features.end() ? -1 : Eigen::Index(f - features.begin());
}
// A feature's value in us (durations are logs of us; waits log(1 + units of 10 us)).
double in_us(const std::string& kind, double x) {
  return kind == "log_duration_us" ? std::exp(x) : std::expm1(x) * kStragglerWaitUnitUs;
}
// An anomaly's value of the kind's feature, in us (NaN: not among its measured features).
double value_of(const Anomaly& a, const std::string& kind) {
  for (const auto& m : a.measured)
    if (m.feature == kind) return m.value;
  return std::nan("");
}
}  // namespace

void OnlineDetector::note_burst(const Group& g, std::vector<Anomaly>& out, size_t first) {
  if (first == out.size()) return;
  const uint64_t span = options_.burst_window_ns, margin = kMinMaterialSpanNs;
  // (those past taking anything along: no process's bursts kept for ever)
  std::erase_if(recent_bursts_,
                [&](const auto& r) { return r.second.last_ns + span + margin < g.last_ts; });
  // per process, the calls this report sent out (not those it took along): how many, the
  // least any lost, and the latest, which set it off (pending ones that went with it may be
  // seconds older: the span starts at it)
  struct Sent {
    size_t calls = 0;
    double least_lost_us = INFINITY;
    const Anomaly* latest = nullptr;
  };
  std::map<uint32_t, Sent> sent;
  for (size_t i = first; i < out.size(); ++i) {
    const Anomaly& a = out[i];
    if (!a.pid || a.burst == 0 || !a.burst_of.empty() || !judged_by_loss(a)) continue;
    Sent& s = sent[a.pid];
    ++s.calls;
    s.least_lost_us = std::min(s.least_lost_us, lost_us(a));
    if (!s.latest || a.ts_ns >= s.latest->ts_ns) s.latest = &a;
  }
  std::vector<uint32_t> pids;
  for (const auto& [pid, s] : sent) {
    const Anomaly& a = *s.latest;
    RecentBurst& r = recent_bursts_[{pid, g.layer}];
    if (r.group != g.key || a.ts_ns > r.last_ns + margin)  // (a second of quiet ends it)
      r = {g.key, g.name, a.ts_ns, a.ts_ns, s.least_lost_us};
    r.last_ns = std::max(r.last_ns, a.ts_ns);
    r.least_lost_us = std::min(r.least_lost_us, s.least_lost_us);
    r.calls += s.calls;
    r.burst = a.burst, r.expected = a.burst_expected, r.window_ns = a.burst_window_ns;
    if (r.calls >= 2) pids.push_back(pid);
  }
  // the other operations' pending candidates of those processes, as slow, in the burst's span
  for (uint32_t pid : pids) {
    for (auto& [key, other] : groups_) {
      if (key == g.key || other.layer != g.layer) continue;
      auto b = other.bursts.find(kTailKindNames[0]);
      if (b == other.bursts.end()) continue;
      for (auto p = b->second.pending.begin(); p != b->second.pending.end();) {
        if (p->pid == pid && taken_along(other, *p)) {
          mark_reported(other, *p);
          out.push_back(std::move(*p));
          p = b->second.pending.erase(p);
        } else {
          ++p;
        }
      }
    }
  }
}

bool OnlineDetector::taken_along(const Group& g, Anomaly& a) const {
  if (options_.take_along_share <= 0 || !a.pid || !judged_by_loss(a)) return false;
  auto r = recent_bursts_.find({a.pid, g.layer});
  if (r == recent_bursts_.end() || r->second.group == g.key) return false;
  const RecentBurst& b = r->second;
  const uint64_t margin = kMinMaterialSpanNs;
  if (b.calls < 2 || a.ts_ns + margin < b.first_ns || a.ts_ns > b.last_ns + margin ||
      lost_us(a) < options_.take_along_share * b.least_lost_us)
    return false;
  a.burst = b.burst, a.burst_expected = b.expected, a.burst_window_ns = b.window_ns;
  a.burst_of = b.name;
  return true;
}

// A candidate goes out for its severity (report_severe), or with as many of its kind in the
// burst window (but those that went out for their severity) as the background rate makes
// unlikely (Poisson tail; the window's calls times the rate expected), with every pending one,
// or alone when it was far slower than any call of the history or another operation's burst in
// its process took it along (taken_along).
void OnlineDetector::report_burst(Group& g, const std::string& kind, Group::Burst& b, Anomaly& a,
                                  std::vector<Anomaly>& out) {
  const uint64_t span = options_.burst_window_ns;
  const GroupModel& m = *g.model;
  double rate = std::max(m.background_rate, 1.0 / double(m.train_samples + 1));
  uint64_t from = a.ts_ns > span ? a.ts_ns - span : 0;
  while (!b.pending.empty() && b.pending.front().ts_ns <= from) {
    b.pending.pop_front();
    ++unreported_;
  }
  while (!b.seen.empty() && b.seen.front().ts_ns <= from) b.seen.pop_front();
  b.seen.push_back({a.ts_ns, has_tail(kind) ? value_of(a, kind) : std::nan(""), std::nan("")});
  // the window's calls in (from, a.ts] (in time order, but for a few from other processes)
  auto after = [&](uint64_t t) {
    return std::partition_point(g.window.begin(), g.window.end(),
                                [t](const Sample& s) { return s.ts_ns <= t; });
  };
  size_t calls = size_t(after(a.ts_ns) - after(from));
  // a window shorter than the burst window (max_samples of a busy call): at its rate
  if (uint64_t first = g.window.empty() ? 0 : g.window.front().ts_ns; first > from && a.ts_ns > first)
    calls = size_t(double(calls) * double(a.ts_ns - from) / double(a.ts_ns - first));
  // A candidate that came well after a burst that went out (three of its gaps, and a second at
  // least) is judged on the candidates since, not as more of that burst: its calls stay in the
  // window for 10 s, and until then one slow call of the job's usual few was "a burst" with them
  // (eval net_delay online, session 66: a 16 ms all_reduce 9 s after the delay, "12 such calls
  // in 10 s"). A fault that goes on at its pace goes on going out. The calls the count is
  // expected of stay the window's: a burst since is judged as strictly as the first one.
  // (a candidate older than the last that went out, another rank's call of the same instance
  // that ended later, is part of it)
  uint64_t since = from;
  if (b.out_ns > from && a.ts_ns > b.out_ns &&
      double(a.ts_ns - b.out_ns) > std::max(3 * b.out_pace_ns, double(kMinMaterialSpanNs)))
    since = b.out_ns;
  if (report_severe(g, kind, b, a, calls, since, out)) return;
  // the events of the window (within burst_merge_ns of the last one counted are one)
  size_t events = 0;
  uint64_t last = 0, first = 0;
  for (const auto& c : b.seen)
    if (c.ts_ns > since && std::isnan(c.level) &&
        (events == 0 || c.ts_ns >= last + options_.burst_merge_ns)) {
      if (events == 0) first = c.ts_ns;
      ++events, last = c.ts_ns;
    }
  double expected = double(std::max(calls, events)) * rate;
  if (events > m.usual_burst &&
      negbin_tail(events, expected, m.dispersion) <= options_.burst_alpha &&
      material(kind, b.pending, a, std::nan(""), since)) {
    // (those before `since` are not of this burst: they stay pending, and age out)
    for (auto p = b.pending.begin(); p != b.pending.end();) {
      if (p->ts_ns <= since) {
        ++p;
        continue;
      }
      p->burst = events, p->burst_expected = expected, p->burst_window_ns = span;
      mark_reported(g, *p);
      out.push_back(std::move(*p));
      p = b.pending.erase(p);
    }
    a.burst = events, a.burst_expected = expected, a.burst_window_ns = span;
    b.went_out(a.ts_ns, first, events);
    mark_reported(g, a);
    out.push_back(std::move(a));
  } else if ((m.slowest_ns > 0 && a.dur_ns >= options_.extreme_min_ns &&
              double(a.dur_ns) >= options_.extreme_slowdown * double(m.slowest_ns)) ||
             (kind == kTailKindNames[0] && taken_along(g, a))) {
    mark_reported(g, a);
    out.push_back(std::move(a));
  } else {
    b.pending.push_back(std::move(a));
  }
}

// The shortest span report_severe judges a level's calls over (material_loss's too).
constexpr double kMinScanNs = double(kMinMaterialSpanNs);

// Whether the candidates that would go out (the pending ones and A; at least `level` of the
// kind's value where one is given) lost min_burst_share of the span they came in (from the
// first to A, at least kMinScanNs) beyond their usual time: ten kernels 5 ms slow in 4 s lost
// 1.2% of it, fifteen softmaxes 2 ms slow spread over 10 s 0.3%. Only slow calls (the duration
// kind): late joins are judged by the straggler rule alone (a GPU collective's row is not its
// wait: with the share applied to them too, a rank 30 ms late in every 20th step on the GPU
// went unnamed, e2e GpuTimeAgent.NamesAStragglerOnlyTheGpuSeesAsDetectDoes), and kinds without
// a tail (a size, a count) are not judged by time.
bool OnlineDetector::material(const std::string& kind, const std::deque<Anomaly>& pending,
                              const Anomaly& a, double level, uint64_t since) const {
  if (options_.min_burst_share <= 0 || kind != kTailKindNames[0]) return true;
  auto counts = [&](const Anomaly& c) {
    return c.ts_ns > since && (std::isnan(level) || value_of(c, kind) >= level);
  };
  double lost = counts(a) ? lost_us(a) : 0;
  uint64_t first = a.ts_ns;
  for (const Anomaly& p : pending)
    if (counts(p)) lost += lost_us(p), first = std::min(first, p.ts_ns);
  return material_loss(lost, a.ts_ns - first, options_.min_burst_share, options_.burst_window_ns);
}

// The burst window's candidates of a kind with a tail (a slow call, a late rank), judged by how
// far out they were: for each of their values v (highest first), the window's candidates at
// least v (events; but those that went out at a higher level: they are explained) against the
// history's share of calls at least v (GroupModel::tails, one more than it had: none is not
// never) and more than its most in one burst window. At or below the lowest value the tail kept
// the history's share is unknown, and the background rate judges (report_burst). Where the
// tail of a level (negative binomial with the model's dispersion, Poisson beyond twice the
// history's highest) is below burst_alpha over the levels tried, the pending candidates at
// least v go out, and A if it is one of them. False: A did not go out.
bool OnlineDetector::report_severe(Group& g, const std::string& kind, Group::Burst& b, Anomaly& a,
                                   size_t calls, uint64_t since, std::vector<Anomaly>& out) {
  const GroupModel& m = *g.model;
  auto it = m.tails.find(kind);
  if (it == m.tails.end() || it->second.empty() || m.history_calls == 0 ||
      !std::isfinite(b.seen.back().value))
    return false;
  const std::vector<GroupModel::TailEntry>& tail = it->second;
  std::vector<double> levels;
  for (const auto& c : b.seen)
    if (c.ts_ns > since && std::isfinite(c.value)) levels.push_back(c.value);
  std::sort(levels.begin(), levels.end(), std::greater<>());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  const bool full = tail.size() >= kSlowTail;
  // the history's calls at least v (of its kept tail) and the most of them in one burst window
  auto higher = [&](double v, size_t* usual) {
    size_t n = 0;
    for (const auto& e : tail)
      if (e.value >= v) ++n, *usual = std::max(*usual, e.burst);
    return n;
  };
  const double per_call = 1.0 / double(m.history_calls + 1);
  for (double v : levels) {
    if (full && v <= tail.back().value) break;
    size_t usual = 0, ignored = 0;
    size_t n = higher(v, &usual);
    // A candidate that went out at a higher level L counts at v too where v is one of that
    // burst's own values (L at most twice v) and the history had fewer than one call in [v, L)
    // to expect in the window (its healthy calls there too rare to tell apart from the burst's):
    // a 9.5 ms delay after 9.8 ms ones is one of them; a 1.7 ms late join beside 30 ms
    // stragglers is the job's own, judged at its level without them.
    size_t events = 0;
    uint64_t last = 0, first = 0;
    for (const auto& c : b.seen) {
      if (c.ts_ns <= since || !(c.value >= v)) continue;
      if (c.level > v && (c.level > 2 * v ||
                          double(calls) * double(n - higher(c.level, &ignored)) * per_call >= 1))
        continue;
      if (events == 0) first = c.ts_ns;
      if (events == 0 || c.ts_ns >= last + options_.burst_merge_ns) ++events, last = c.ts_ns;
    }
    // At least twice the history's highest value (slower than anything it had, by far): over
    // the span they came in (from the first, at least kMinScanNs), not the whole burst window;
    // 7 launches 10 ms slow in 1.3 s are as rare in 1.3 s of calls as they are, and the window
    // holds burst_window / span such spans (a scan statistic's count of places to look). Not
    // nearer the history's own: a healthy job's moderately slow calls come in clusters (a busy
    // second of the machine: five 2 ms late joins), which a Poisson count over a second takes
    // for a burst.
    const double window = double(options_.burst_window_ns);
    double span = window;
    const bool far = v >= 2 * tail.front().value;
    if (far)
      span = std::min(window, std::max(kMinScanNs, double(a.ts_ns - std::min(first, a.ts_ns))));
    double expected = double(calls) * span / window * double(n + 1) * per_call;
    // within the history's range, its calls at least v clustered as its slow calls did (the
    // burst test's dispersion): a count of them judged as a Poisson one ratchets, since the
    // clusters it reports leave the tail and make the next cluster look rarer still
    const double spread = far ? 1 : m.dispersion;
    if (events < 2 || events <= usual ||
        negbin_tail(events, expected, spread) * window / span * double(levels.size()) >
            options_.burst_alpha ||
        !material(kind, b.pending, a, v, since))
      continue;
    for (auto p = b.pending.begin(); p != b.pending.end();) {
      if (p->ts_ns <= since || !(value_of(*p, kind) >= v)) {
        ++p;
        continue;
      }
      for (auto& c : b.seen)
        if (c.ts_ns == p->ts_ns && std::isnan(c.level)) c.level = v;
      p->burst = events, p->burst_expected = expected;
      p->burst_window_ns = uint64_t(span);
      b.went_out(p->ts_ns, first, events);
      mark_reported(g, *p);
      out.push_back(std::move(*p));
      p = b.pending.erase(p);
    }
    if (!(b.seen.back().value >= v)) continue;  // A's own level may yet be a burst
    b.seen.back().level = v;
    a.burst = events, a.burst_expected = expected, a.burst_window_ns = uint64_t(span);
    b.went_out(a.ts_ns, first, events);
    mark_reported(g, a);
    out.push_back(std::move(a));
    return true;
  }
  return false;
}

// A call that left the window for max_samples, decided (no anomaly, or one whose burst window
// is over): it stays in the history's count, slowest and (not reported) tails.
void OnlineDetector::archive(Group& g, const Sample& s) const {
  const uint64_t span = std::max<uint64_t>(options_.window_ns / kArchiveSpans, 1);
  uint64_t from = s.ts_ns / span * span;
  if (g.archive.empty() || g.archive.back().from_ns < from) g.archive.push_back({from});
  Group::Archived& a = g.archive.back();  // (a call a little out of order: the span after)
  ++a.calls;
  a.slowest_ns = std::max(a.slowest_ns, s.dur_ns);
  if (const uint64_t width = options_.burst_window_ns; width > 0) {
    // its own window (an anomaly from the limbo comes after later calls)
    uint64_t bin_from = s.ts_ns / width * width;
    auto at = g.bins.end();
    while (at != g.bins.begin() && std::prev(at)->from_ns > bin_from) --at;
    if (at == g.bins.begin() || std::prev(at)->from_ns != bin_from)
      at = std::next(g.bins.insert(at, {bin_from}));
    Group::Bin& b = *std::prev(at);
    ++b.calls;
    uint64_t apart = std::max(s.ts_ns, g.last_event_ns) - std::min(s.ts_ns, g.last_event_ns);
    if (s.flagged && (g.last_event_ns == 0 || apart >= options_.burst_merge_ns)) {
      ++b.events;
      g.last_event_ns = s.ts_ns;
    }
  }
  if (s.reported) return;  // no usual value of the history
  auto lower = [](const auto& x, const auto& y) { return x.first > y.first; };  // a min-heap
  for (size_t k = 0; k < kTailKinds; ++k) {
    Eigen::Index col = tail_column(g.features, k);
    if (col < 0) continue;
    double v = in_us(kTailKindNames[k], s.x(col));
    auto& high = a.high[k];
    if (high.size() == kSlowTail) {
      if (!(v > high.front().first)) continue;
      std::pop_heap(high.begin(), high.end(), lower);
      high.pop_back();
    }
    high.emplace_back(v, s.ts_ns);
    std::push_heap(high.begin(), high.end(), lower);
  }
}

std::optional<Anomaly> OnlineDetector::observe(const std::string& layer, const std::string& name,
                                               const std::vector<std::string>& feature_names,
                                               uint64_t ts_ns, uint64_t dur_ns,
                                               const Eigen::VectorXd& x) {
  FeatureTable one;
  one.group = layer + "/" + name;
  one.layer = layer;
  one.name = name;
  one.feature_names = feature_names;
  one.ts_ns = {ts_ns};
  one.dur_ns = {dur_ns};
  one.values = x.transpose();
  auto found = observe(one);
  if (found.empty()) return std::nullopt;
  return std::move(found.front());
}

size_t OnlineDetector::min_samples(const Group& g) const {
  auto it = options_.min_samples_by_layer.find(g.layer);
  return it != options_.min_samples_by_layer.end() ? it->second : options_.min_samples;
}

// A group without a model is fitted as soon as it has enough samples; one with a model (or
// whose last fit failed) again once a refit period has passed.
// A first call model also waits until the group's samples span min_span_ns (a job's first seconds are not
// its normal), and a young model is refitted early each time its history has doubled.
bool OnlineDetector::due(const Group& g) const {
  if (g.refitting || g.window.size() < min_samples(g)) return false;
  if (!g.model && g.fitted_at == 0)  // (windows: their count is their time)
    return g.layer == "window" || g.last_ts - std::min(g.first_ts, g.last_ts) >= options_.min_span_ns;
  if (g.model && g.window.size() >= 2 * g.fitted_size && g.last_ts > g.fitted_at)
    return true;
  // A fit that gave no model (too few samples left once the starved windows were left out, a
  // degenerate sample) tries again once a quarter more have come, not a whole refit period later:
  // a node whose first minute had a noisy neighbour must not go unjudged for another one. (The
  // growth is geometric, so a group that never fits costs a few dozen tries, not one a flush.)
  size_t more = std::max<size_t>(1, std::max(min_samples(g), g.fitted_size) / 4);
  if (!g.model && g.window.size() >= g.fitted_size + more) return true;
  return g.last_ts - g.fitted_at >= options_.refit_every_ns;
}

RefitJob OnlineDetector::take_job(Group& g) {
  g.refitting = true;
  g.fitted_size = g.window.size();
  return job_for(g);
}

RefitJob OnlineDetector::job_for(const Group& g) const {
  size_t flagged = 0;
  for (const auto& s : g.window) flagged += s.flagged;
  bool shifted = double(flagged) > options_.new_normal_share * double(g.window.size());
  RefitJob job;
  FeatureTable& t = job.training;
  t.layer = g.layer;
  t.name = g.name;
  t.group = g.key;
  t.feature_names = g.features;
  // (a new normal, most of the window flagged, is learnt whole)
  add_training_rows(g, shifted ? 0 : flagged, !shifted, t);
  job.options = options_.detect;
  job.options.min_samples = min_samples(g);
  job.at_ns = g.last_ts;
  job.min_slowdown = options_.min_slowdown;
  job.min_excess_us = options_.min_excess_us;
  job.live_rate = double(flagged) / double(g.window.size());
  for (const auto& s : g.window) job.slowest_ns = std::max(job.slowest_ns, s.dur_ns);
  job.history_calls = g.window.size();
  for (const auto& a : g.archive) {
    job.history_calls += a.calls;
    job.slowest_ns = std::max(job.slowest_ns, a.slowest_ns);
  }
  job.history_calls += g.limbo.size();  // (anomalies undecided or reported: in no tail)
  for (const auto& s : g.limbo) job.slowest_ns = std::max(job.slowest_ns, s.dur_ns);
  // An anomaly of the last burst window may yet be reported (its burst still growing): none
  // of the history's usual slow calls or bursts, or a fault would become its own usual.
  const uint64_t decided_before =
      g.last_ts > options_.burst_window_ns ? g.last_ts - options_.burst_window_ns : 0;
  add_tails(g, decided_before, job);
  add_usual_sizes(g, job);
  job.usual_burst = largest_burst(g, decided_before);
  // (under kMinDispersionBins of history, as just after a restart: the model's, e.g. a resumed
  // one's, not a Poisson count's)
  job.dispersion = dispersion(g, decided_before);
  if (job.dispersion == 0) job.dispersion = g.model ? g.model->dispersion : 1;
  return job;
}

// Every step-th sample of the window (at most max_fit_samples), its flagged ones left out
// when `skip_flagged` (`left_out` of them).
void OnlineDetector::add_training_rows(const Group& g, size_t left_out, bool skip_flagged,
                                       FeatureTable& t) const {
  size_t kept = g.window.size() - left_out;
  size_t step = std::max<size_t>(1, (kept + options_.max_fit_samples - 1) / options_.max_fit_samples);
  t.values.resize(Eigen::Index((kept + step - 1) / step), Eigen::Index(g.features.size()));
  Eigen::Index r = 0;
  size_t seen = 0;
  for (const auto& s : g.window) {
    if (s.flagged && skip_flagged) continue;
    if (seen++ % step != 0) continue;
    t.ts_ns.push_back(s.ts_ns);
    t.dur_ns.push_back(s.dur_ns);
    t.runq_ns.push_back(s.runq_ns);  // (the model's runq_tail_us, as detect's: CallContext)
    t.values.row(r++) = s.x.transpose();
  }
}

// By kind, the highest values that were no reported anomaly, each with the most calls at
// least that high in one burst window (events: within burst_merge_ns of the last one counted).
void OnlineDetector::add_tails(const Group& g, uint64_t decided_before, RefitJob& job) const {
  auto undecided = [&](const Sample& s) {
    return s.flagged && !s.reported && s.ts_ns > decided_before;
  };
  for (size_t k = 0; k < kTailKinds; ++k) {
    const char* kind = kTailKindNames[k];
    Eigen::Index col = tail_column(g.features, k);
    if (col < 0) continue;
    std::vector<std::pair<double, uint64_t>> high;  // (value, time)
    for (const auto& s : g.window)
      if (!s.reported && !undecided(s)) high.emplace_back(in_us(kind, s.x(col)), s.ts_ns);
    for (const auto& a : g.archive) high.insert(high.end(), a.high[k].begin(), a.high[k].end());
    size_t keep = std::min(high.size(), kSlowTail);
    std::partial_sort(high.begin(), high.begin() + std::ptrdiff_t(keep), high.end(),
                      std::greater<>());
    high.resize(keep);
    auto& tail = job.tails[kind];
    for (size_t i = 0; i < high.size(); ++i) {
      std::vector<uint64_t> at;
      for (size_t j = 0; j < high.size(); ++j)
        if (high[j].first >= high[i].first) at.push_back(high[j].second);
      std::sort(at.begin(), at.end());
      std::deque<uint64_t> in_span;
      size_t most = 0;
      for (uint64_t at_ns : at) {
        while (!in_span.empty() && in_span.front() + options_.burst_window_ns <= at_ns)
          in_span.pop_front();
        if (in_span.empty() || at_ns >= in_span.back() + options_.burst_merge_ns)
          in_span.push_back(at_ns);
        most = std::max(most, in_span.size());
      }
      tail.push_back({high[i].first, most});
    }
  }
}

// The sizes seen at least 3 times (at most 1000 of them).
void OnlineDetector::add_usual_sizes(const Group& g, RefitJob& job) const {
  auto bytes = std::find(g.features.begin(), g.features.end(), "log2_bytes");
  if (bytes != g.features.end()) {
    auto col = Eigen::Index(bytes - g.features.begin());
    std::map<double, size_t> sizes;
    for (const auto& s : g.window)
      if (sizes.size() < 10'000) ++sizes[s.x(col)];
    for (const auto& [size, n] : sizes)
      if (n >= 3 && job.usual_sizes.size() < 1000) job.usual_sizes.push_back(size);
  }
}

// The largest burst of unreported anomalies in any burst window of the history.
size_t OnlineDetector::largest_burst(const Group& g, uint64_t decided_before) const {
  auto undecided = [&](const Sample& s) {
    return s.flagged && !s.reported && s.ts_ns > decided_before;
  };
  size_t largest = 0;
  if (options_.burst_window_ns > 0) {
    std::deque<uint64_t> in_span;
    for (const auto& s : g.window) {
      if (!s.flagged || s.reported || undecided(s)) continue;
      while (!in_span.empty() && in_span.front() + options_.burst_window_ns <= s.ts_ns)
        in_span.pop_front();
      if (in_span.empty() || s.ts_ns >= in_span.back() + options_.burst_merge_ns)
        in_span.push_back(s.ts_ns);
      largest = std::max(largest, in_span.size());
    }
  }
  return largest;
}

// The fewest burst windows of history a dispersion is measured on (fewer: unknown, 0).
constexpr size_t kMinDispersionBins = 6;

// Pearson's dispersion of the history's events per burst window (archived bins and the
// window's decided calls): the sum over windows of (events - expected)^2 / expected, expected
// being the window's calls times the history's events per call, over one less than the
// windows; at least 1 (0: unknown, under kMinDispersionBins windows of history or no bursts).
double OnlineDetector::dispersion(const Group& g, uint64_t decided_before) const {
  const uint64_t width = options_.burst_window_ns;
  if (width == 0) return 0;  // (no bursts: none to count, and no use for it)
  std::map<uint64_t, Group::Bin> bins;
  for (const auto& b : g.bins) {
    Group::Bin& to = bins[b.from_ns];
    to.calls += b.calls, to.events += b.events;
  }
  uint64_t last = 0;
  for (const auto& s : g.window) {
    if (s.ts_ns > decided_before) continue;
    Group::Bin& to = bins[s.ts_ns / width * width];
    ++to.calls;
    if (s.flagged && (last == 0 || s.ts_ns >= last + options_.burst_merge_ns))
      ++to.events, last = s.ts_ns;
  }
  size_t calls = 0, events = 0;
  for (const auto& [from, b] : bins) calls += b.calls, events += b.events;
  if (bins.size() < kMinDispersionBins) return 0;
  if (events == 0) return 1;
  const double per_call = double(events) / double(calls);
  std::vector<double> terms;
  for (const auto& [from, b] : bins) {  // (every bin has a call: it was made for one)
    double expected = double(b.calls) * per_call;
    terms.push_back((double(b.events) - expected) * (double(b.events) - expected) / expected);
  }
  // the highest twentieth of the windows (at least one) left out: a fault's few windows
  size_t keep = terms.size() - std::max<size_t>(1, terms.size() / 20);
  std::nth_element(terms.begin(), terms.begin() + std::ptrdiff_t(keep), terms.end());
  double chi2 = 0;
  for (size_t i = 0; i < keep; ++i) chi2 += terms[i];
  return std::max(1.0, chi2 / double(keep - 1));
}

std::vector<RefitJob> OnlineDetector::take_due_refits() {
  std::vector<RefitJob> jobs;
  for (auto& [key, g] : groups_)
    if (due(g)) jobs.push_back(take_job(g));
  return jobs;
}

void OnlineDetector::install(const std::string& group, std::optional<GroupModel> model,
                             uint64_t fitted_at) {
  auto it = groups_.find(group);
  if (it == groups_.end()) return;
  Group& g = it->second;
  g.refitting = false;
  g.fitted_at = fitted_at;  // a failed fit waits a refit period too, instead of retrying at once
  if (!model || model->features != g.features) return;
  g.model = std::move(model);
  ++refits_;
}

void OnlineDetector::load(const DetectorModel& saved) {
  for (const auto& m : saved.groups) {
    Group& g = groups_[m.group];
    g.key = m.group;
    g.layer = m.layer;
    g.name = m.name;
    g.features = m.features;
    g.model = m;
    g.fitted_at = 0;
  }
}

DetectorModel OnlineDetector::models() const {
  DetectorModel out;
  for (const auto& [key, g] : groups_)
    if (g.model) out.groups.push_back(*g.model);
  return out;
}

std::vector<uint64_t> OnlineDetector::held_windows(const std::string& group) const {
  std::vector<uint64_t> out;
  auto it = groups_.find(group);
  if (it != groups_.end())
    for (const Anomaly& a : it->second.run_held) out.push_back(a.ts_ns);
  return out;
}

size_t OnlineDetector::fitted() const {
  size_t n = 0;
  for (const auto& [key, g] : groups_) n += g.model.has_value();
  return n;
}

const GroupModel* OnlineDetector::model(const std::string& layer, const std::string& name) const {
  auto it = groups_.find(layer == name ? layer : layer + "/" + name);  // "window": one of a kind
  return it != groups_.end() && it->second.model ? &*it->second.model : nullptr;
}

}  // namespace eacgm::detect
