#include "detect/materiality.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace eacgm::detect {

bool material_loss(double lost, uint64_t span_ns, double share, uint64_t max_span_ns) {
  if (share <= 0) return true;
  double span = std::clamp(double(span_ns), double(kMinMaterialSpanNs),
                           double(std::max(max_span_ns, kMinMaterialSpanNs)));
  return lost * 1e3 >= share * span;
}

double lost_us(const Anomaly& a) { return std::max(0.0, double(a.dur_ns) / 1e3 - a.usual_us); }

bool judged_by_loss(const Anomaly& a) {
  return a.layer != "window" && !a.top_features.empty() &&
         a.top_features.front().first == "log_duration_us";
}

namespace {

// Range maximum with "the last index in [lo, hi] whose value is at least c" (a segment tree:
// hand-written, as nothing in the project's libraries does this search).
class LastAtLeast {
 public:
  explicit LastAtLeast(const std::vector<double>& v) : n_(1) {
    while (n_ < v.size()) n_ *= 2;
    max_.assign(2 * n_, -1e300);
    std::copy(v.begin(), v.end(), max_.begin() + std::ptrdiff_t(n_));
    for (size_t i = n_ - 1; i >= 1; --i) max_[i] = std::max(max_[2 * i], max_[2 * i + 1]);
  }
  // -1 where none
  long find(size_t lo, size_t hi, double c) const { return find(1, 0, n_ - 1, lo, hi, c); }

 private:
  long find(size_t node, size_t from, size_t to, size_t lo, size_t hi, double c) const {
    if (to < lo || from > hi || max_[node] < c) return -1;
    if (from == to) return long(from);
    size_t mid = (from + to) / 2;
    long right = find(2 * node + 1, mid + 1, to, lo, hi, c);
    return right >= 0 ? right : find(2 * node, from, mid, lo, hi, c);
  }
  size_t n_;
  std::vector<double> max_;
};

// Marks the calls of one operation (times and losses, in time order) that lie in a material run.
void mark_material(const std::vector<uint64_t>& ts, const std::vector<double>& loss, double share,
                   uint64_t max_span_ns, std::vector<bool>& material) {
  const size_t n = ts.size();
  std::vector<double> sum(n + 1, 0);  // prefix sums of the losses, us
  for (size_t k = 0; k < n; ++k) sum[k + 1] = sum[k] + loss[k];
  // A run [j, k] longer than kMinMaterialSpanNs is material where
  //   sum[k + 1] - sum[j] >= share * (ts[k] - ts[j]) / 1e3,
  // that is f(k) >= f0(j) with f(k) = sum[k + 1] - share * ts[k] / 1e3: the last such k within
  // max_span_ns of ts[j] ends the longest material run from j.
  std::vector<double> f(n);
  for (size_t k = 0; k < n; ++k) f[k] = sum[k + 1] - share * double(ts[k] - ts[0]) / 1e3;
  LastAtLeast last_at_least(f);
  std::vector<int> marks(n + 1, 0);  // a difference array of the runs' coverage
  size_t in_min = 0, in_max = 0;     // the last calls within the shortest and longest spans of j
  for (size_t j = 0; j < n; ++j) {
    in_min = std::max(in_min, j), in_max = std::max(in_max, j);
    while (in_min + 1 < n && ts[in_min + 1] - ts[j] <= kMinMaterialSpanNs) ++in_min;
    while (in_max + 1 < n && ts[in_max + 1] - ts[j] <= max_span_ns) ++in_max;
    long end = -1;
    if (in_max > in_min)
      end = last_at_least.find(in_min + 1, in_max, sum[j] - share * double(ts[j] - ts[0]) / 1e3);
    // within the shortest span the loss is judged against it: the longest such run is the best
    if (end < 0 && material_loss(sum[in_min + 1] - sum[j], 0, share, max_span_ns))
      end = long(in_min);
    if (end >= 0) ++marks[j], --marks[size_t(end) + 1];
  }
  int covered = 0;
  for (size_t k = 0; k < n; ++k) material[k] = (covered += marks[k]) > 0;
}

}  // namespace

size_t drop_immaterial(std::vector<Anomaly>& anomalies, double share, uint64_t max_span_ns) {
  if (share <= 0) return 0;
  max_span_ns = std::max(max_span_ns, kMinMaterialSpanNs);
  // each operation's slow calls, in time order
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> by_op;
  for (size_t i = 0; i < anomalies.size(); ++i)
    if (judged_by_loss(anomalies[i])) by_op[{anomalies[i].layer, anomalies[i].name}].push_back(i);
  std::vector<bool> keep(anomalies.size(), true);
  for (auto& [op, idx] : by_op) {
    std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
      return anomalies[x].ts_ns < anomalies[y].ts_ns;
    });
    std::vector<uint64_t> ts;
    std::vector<double> loss;
    for (size_t i : idx) ts.push_back(anomalies[i].ts_ns), loss.push_back(lost_us(anomalies[i]));
    std::vector<bool> material(idx.size());
    mark_material(ts, loss, share, max_span_ns, material);
    for (size_t k = 0; k < idx.size(); ++k) keep[idx[k]] = material[k];
  }
  size_t dropped = 0, out = 0;
  for (size_t i = 0; i < anomalies.size(); ++i) {
    if (!keep[i]) {
      ++dropped;
      continue;
    }
    if (out != i) anomalies[out] = std::move(anomalies[i]);
    ++out;
  }
  anomalies.resize(out);
  return dropped;
}

}  // namespace eacgm::detect
