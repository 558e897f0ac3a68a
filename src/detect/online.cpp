// Sliding-window refits and per-sample scoring, on the batch detector's training and scoring.
#include "detect/online.h"

namespace eacgm::detect {

std::optional<Anomaly> OnlineDetector::observe(const std::string& layer, const std::string& name,
                                               const std::vector<std::string>& feature_names,
                                               uint64_t ts_ns, uint64_t dur_ns,
                                               const Eigen::VectorXd& x) {
  Group& g = groups_[layer + "/" + name];
  // Score against the model of the moment, before the sample can shape it.
  std::optional<Anomaly> verdict;
  if (g.model) {
    FeatureTable one;
    one.group = g.model->group;
    one.layer = layer;
    one.name = name;
    one.feature_names = feature_names;
    one.ts_ns = {ts_ns};
    one.dur_ns = {dur_ns};
    one.values = x.transpose();
    std::vector<Anomaly> found;  // scored against the group's model in place, not a copy
    find_anomalies(*g.model, one, 0, options_.min_slowdown, found);
    if (!found.empty()) verdict = std::move(found.front());
  }
  g.window.push_back({ts_ns, dur_ns, x, verdict.has_value()});
  uint64_t oldest = ts_ns > options_.window_ns ? ts_ns - options_.window_ns : 0;
  while (!g.window.empty() &&
         (g.window.front().ts_ns < oldest || g.window.size() > options_.max_samples))
    g.window.pop_front();
  bool due = g.model ? ts_ns - g.fitted_at >= options_.refit_every_ns
                     : g.window.size() >= options_.min_samples;
  if (due && g.window.size() >= options_.min_samples) refit(layer, name, feature_names, g, ts_ns);
  return verdict;
}

void OnlineDetector::refit(const std::string& layer, const std::string& name,
                           const std::vector<std::string>& feature_names, Group& g,
                           uint64_t now) {
  size_t flagged = 0;
  for (const auto& s : g.window) flagged += s.flagged;
  bool shifted = double(flagged) > options_.new_normal_share * double(g.window.size());
  FeatureTable t;
  t.layer = layer;
  t.name = name;
  t.group = layer + "/" + name;
  t.feature_names = feature_names;
  t.values.resize(Eigen::Index(g.window.size() - (shifted ? 0 : flagged)),
                  Eigen::Index(feature_names.size()));
  Eigen::Index r = 0;
  for (const auto& s : g.window) {
    if (s.flagged && !shifted) continue;
    t.ts_ns.push_back(s.ts_ns);
    t.dur_ns.push_back(s.dur_ns);
    t.values.row(r++) = s.x.transpose();
  }
  DetectOptions opts = options_.detect;
  opts.min_samples = options_.min_samples;
  DetectorModel m = train_detector({t}, UINT64_MAX, opts, nullptr);
  if (m.groups.empty()) return;
  g.model = std::move(m.groups.front());
  g.fitted_at = now;
  ++refits_;
}

const GroupModel* OnlineDetector::model(const std::string& layer, const std::string& name) const {
  auto it = groups_.find(layer + "/" + name);
  return it != groups_.end() && it->second.model ? &*it->second.model : nullptr;
}

}  // namespace eacgm::detect
