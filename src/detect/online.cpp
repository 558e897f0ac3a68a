// Sliding-window refits and per-sample scoring, on the batch detector's training and scoring.
#include "detect/online.h"

namespace eacgm::detect {

std::optional<GroupModel> fit_group(const RefitJob& job) {
  DetectorModel m = train_detector({job.training}, UINT64_MAX, job.options, nullptr);
  if (m.groups.empty()) return std::nullopt;
  return std::move(m.groups.front());
}

std::vector<Anomaly> OnlineDetector::observe(const FeatureTable& rows) {
  std::vector<Anomaly> found;
  if (rows.ts_ns.empty()) return found;
  Group& g = groups_[rows.group];
  if (g.key.empty()) g.key = rows.group, g.layer = rows.layer, g.name = rows.name;
  if (g.features.empty()) g.features = rows.feature_names;
  // Score against the model of the moment, before the samples can shape it.
  if (g.model)
    find_anomalies(*g.model, rows, 0, options_.min_slowdown, found, options_.min_excess_us);
  if (rows.feature_names != g.features) {
    // a group's features changed (e.g. a first call with bytes): start its window again
    g.features = rows.feature_names;
    g.window.clear();
    g.model.reset();
  }
  size_t next = 0;
  for (size_t i = 0; i < rows.ts_ns.size(); ++i) {
    bool flagged = next < found.size() && found[next].row == i;
    next += flagged;
    g.window.push_back(
        {rows.ts_ns[i], rows.dur_ns[i], rows.values.row(Eigen::Index(i)).transpose(), flagged});
  }
  g.last_ts = rows.ts_ns.back();
  uint64_t oldest = g.last_ts > options_.window_ns ? g.last_ts - options_.window_ns : 0;
  while (!g.window.empty() &&
         (g.window.front().ts_ns < oldest || g.window.size() > options_.max_samples))
    g.window.pop_front();
  if (options_.refit_inline && due(g)) {
    g.pending = true;
    install(rows.group, fit_group(job_for(g)), g.last_ts);
  }
  return found;
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
bool OnlineDetector::due(const Group& g) const {
  if (g.pending || g.window.size() < min_samples(g)) return false;
  return (!g.model && g.fitted_at == 0) || g.last_ts - g.fitted_at >= options_.refit_every_ns;
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
  t.values.resize(Eigen::Index(g.window.size() - (shifted ? 0 : flagged)),
                  Eigen::Index(g.features.size()));
  Eigen::Index r = 0;
  for (const auto& s : g.window) {
    if (s.flagged && !shifted) continue;
    t.ts_ns.push_back(s.ts_ns);
    t.dur_ns.push_back(s.dur_ns);
    t.values.row(r++) = s.x.transpose();
  }
  job.options = options_.detect;
  job.options.min_samples = min_samples(g);
  job.at_ns = g.last_ts;
  return job;
}

std::vector<RefitJob> OnlineDetector::take_due_refits() {
  std::vector<RefitJob> jobs;
  for (auto& [key, g] : groups_)
    if (due(g)) {
      g.pending = true;
      jobs.push_back(job_for(g));
    }
  return jobs;
}

void OnlineDetector::install(const std::string& group, std::optional<GroupModel> model,
                             uint64_t fitted_at) {
  auto it = groups_.find(group);
  if (it == groups_.end()) return;
  Group& g = it->second;
  g.pending = false;
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
