// The online form of the detector, for a long-running agent: each group's model is refitted on
// a sliding window of its recent samples (default the past hour), and each sample is scored as
// it arrives against the model of the moment, before it joins the window. Samples flagged as
// anomalies stay out of later fits unless they become a large share of the window (a lasting
// change of regime, which then becomes the new normal).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "detect/detector.h"

namespace eacgm::detect {

struct OnlineOptions {
  uint64_t window_ns = 3600ull * 1'000'000'000;  // fit on the samples of the past hour
  uint64_t refit_every_ns = 60ull * 1'000'000'000;
  size_t min_samples = 200;         // no verdicts until a group has this many
  // Anomalies are kept out of the next fit (a model that learns them stops seeing them) unless
  // they are more than this share of the window: then they are the new normal.
  double new_normal_share = 0.2;
  size_t max_samples = 100'000;     // per group: the oldest go first beyond this
  DetectOptions detect;             // components, quantile, threshold
  double min_slowdown = 3;
};

class OnlineDetector {
 public:
  explicit OnlineDetector(OnlineOptions options = {}) : options_(std::move(options)) {}

  // One sample of a group (its features in a fixed order). Returns the anomaly it is, if its
  // group has a model and it falls below the threshold; samples must come in time order per
  // group.
  std::optional<Anomaly> observe(const std::string& layer, const std::string& name,
                                 const std::vector<std::string>& feature_names, uint64_t ts_ns,
                                 uint64_t dur_ns, const Eigen::VectorXd& x);

  size_t refits() const { return refits_; }
  // The current model of a group, if it has one (for saving, or to show what is normal).
  const GroupModel* model(const std::string& layer, const std::string& name) const;

 private:
  struct Sample {
    uint64_t ts_ns, dur_ns;
    Eigen::VectorXd x;
    bool flagged;  // was an anomaly when it came
  };
  struct Group {
    std::deque<Sample> window;
    std::optional<GroupModel> model;
    uint64_t fitted_at = 0;
  };
  void refit(const std::string& layer, const std::string& name,
             const std::vector<std::string>& feature_names, Group& g, uint64_t now);

  OnlineOptions options_;
  std::map<std::string, Group> groups_;
  size_t refits_ = 0;
};

}  // namespace eacgm::detect
