// The late steps a straggling workload wrote down (eval/workloads/gloo_straggler.py's truth:
// each delay's start and end, CLOCK_MONOTONIC ns), which of them the anomalies lay on, and how
// long after its late call each anomaly on one was reported (the agent's found_ns).
#pragma once
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

namespace e2e {

struct LateSteps {
  explicit LateSteps(const nlohmann::json& truth) {
    for (const auto& i : truth["intervals"])
      late.emplace_back(i[0].get<int64_t>(), i[1].get<int64_t>());
  }
  // whether an anomaly over [ts, end] lies on a late step
  bool on_late(int64_t ts, int64_t end, int64_t found_ns = 0) {
    bool hit = false;
    for (size_t i = 0; i < late.size(); ++i)
      if (ts <= late[i].second && end >= late[i].first) hit = true, found.insert(i);
    double lag = double(found_ns - ts) / 1e9;
    if (hit && found_ns) lag_s.insert(std::upper_bound(lag_s.begin(), lag_s.end(), lag), lag);
    return hit;
  }
  double median_lag() const { return lag_s.empty() ? 0.0 : lag_s[lag_s.size() / 2]; }
  double max_lag() const { return lag_s.empty() ? 0.0 : lag_s.back(); }
  double recall() const { return double(found.size()) / double(late.size()); }
  std::vector<std::pair<int64_t, int64_t>> late;
  std::set<size_t> found;
  std::vector<double> lag_s;  // sorted
};

}  // namespace e2e
