// Each process's GPU idle share per window (detect/gpu_time.h).
#include "detect/gpu_time.h"

#include <algorithm>
#include <tuple>

namespace eacgm::detect {

GpuIdle::GpuIdle(int64_t start_ns, uint64_t window_ns)
    : start_ns_(start_ns), window_ns_(std::max<int64_t>(int64_t(window_ns), 1)) {}

int64_t GpuIdle::window_of(int64_t ts) const {  // (floor, also before the start)
  int64_t d = ts - start_ns_;
  return d >= 0 ? d / window_ns_ : -((-d + window_ns_ - 1) / window_ns_);
}

int64_t GpuIdle::merge(std::vector<std::pair<int64_t, int64_t>>& spans) {
  std::sort(spans.begin(), spans.end());
  size_t out = 0;
  int64_t busy = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (out > 0 && spans[i].first <= spans[out - 1].second)
      spans[out - 1].second = std::max(spans[out - 1].second, spans[i].second);
    else
      spans[out++] = spans[i];
  }
  spans.resize(out);
  for (const auto& [a, b] : spans) busy += b - a;
  return busy;
}

void GpuIdle::add(uint32_t pid, uint64_t ts_ns, uint64_t dur_ns) {
  // a damaged row (a time no clock reaches: past 2^61 ns, 73 years) is no GPU time; its window
  // times would overflow below (the recording fuzzer's find)
  constexpr uint64_t kLatest = uint64_t(1) << 61;
  if (ts_ns > kLatest || dur_ns > kLatest) return;
  Process& p = processes_[pid];
  int64_t from = int64_t(ts_ns), to = int64_t(ts_ns + dur_ns);
  p.first_ns = std::min(p.first_ns, from);
  p.last_end_ns = std::max(p.last_end_ns, to);
  int64_t first = window_of(from), last = window_of(std::max(to - 1, from));
  if (last - first > 1000) first = last - 1000;  // a damaged row: its last 1000 windows
  for (int64_t w = first; w <= last; ++w) {
    int64_t a = std::max(from, start_ns_ + w * window_ns_);
    int64_t b = std::min(to, start_ns_ + (w + 1) * window_ns_);
    if (b <= a) continue;
    auto& spans = p.spans[w];
    spans.emplace_back(a, b);
    // (kernels back to back on a stream merge into one stretch: the list stays as long as the
    // window has gaps, not executions)
    if (spans.size() >= 64 && (spans.size() & (spans.size() - 1)) == 0) merge(spans);
  }
}

void GpuIdle::collected(uint32_t pid, uint64_t ts_ns, uint64_t dur_ns, uint64_t next_ns) {
  Process& p = processes_[pid];
  int64_t from = int64_t(ts_ns), to = int64_t(ts_ns + dur_ns);
  // (its GPU span still starts at its first execution: its first slice starts when CUDA loaded
  // the library, before a model's loading; slices come in time order, each after the last one ended)
  if (!p.slices.empty() && from < p.slices.back().second)
    p.slices.back().second = std::max(p.slices.back().second, to);
  else
    p.slices.emplace_back(from, to);
  p.known_ns = std::max({p.known_ns, to, next_ns ? int64_t(next_ns) : to});
}

std::pair<int64_t, int64_t> GpuIdle::collected_in(
    const Process& p, int64_t from, int64_t to,
    const std::vector<std::pair<int64_t, int64_t>>* spans) {
  int64_t collected = 0, busy = 0;
  auto s = std::lower_bound(p.slices.begin(), p.slices.end(), std::pair<int64_t, int64_t>{from, INT64_MIN});
  if (s != p.slices.begin()) --s;  // one that started before `from` may reach into it
  for (; s != p.slices.end() && s->first < to; ++s) {
    int64_t a = std::max(from, s->first), b = std::min(to, s->second);
    if (b <= a) continue;
    collected += b - a;
    if (spans)
      for (const auto& [x, y] : *spans) busy += std::max<int64_t>(0, std::min(b, y) - std::max(a, x));
  }
  return {collected, busy};
}

void GpuIdle::ended(uint32_t pid) {
  if (auto it = processes_.find(pid); it != processes_.end()) it->second.ended = true;
}

std::optional<double> GpuIdle::idle_share(uint32_t pid, int64_t w) {
  auto it = processes_.find(pid);
  if (it == processes_.end()) return std::nullopt;
  Process& p = it->second;
  int64_t from = std::max(p.first_ns, start_ns_ + w * window_ns_);
  int64_t to = start_ns_ + (w + 1) * window_ns_;
  if (p.known_to() < to) {
    if (!p.ended) return std::nullopt;  // its rows for this window may still come
    to = p.known_to();                  // its GPU span ended in this window
  }
  if (to <= from) return std::nullopt;
  auto spans = p.spans.find(w);
  int64_t busy = spans == p.spans.end() ? 0 : merge(spans->second);
  int64_t length = to - from;
  if (!p.slices.empty()) {  // duty-cycled: over what was collected only
    std::tie(length, busy) =
        collected_in(p, from, to, spans == p.spans.end() ? nullptr : &spans->second);
    if (length <= 0) return std::nullopt;
  }
  return std::clamp(1.0 - double(busy) / double(length), 0.0, 1.0);
}

std::optional<double> GpuIdle::mean_idle_share(int64_t w) {
  double sum = 0;
  size_t n = 0;
  for (auto& [pid, p] : processes_)
    if (auto share = idle_share(pid, w)) sum += *share, ++n;
  return n ? std::optional<double>(sum / double(n)) : std::nullopt;
}

std::optional<int64_t> GpuIdle::known_until(uint32_t pid) const {
  auto it = processes_.find(pid);
  if (it == processes_.end() || it->second.ended) return std::nullopt;
  // the windows that end at or before its latest execution's end (a duty-cycled one's slice's)
  return window_of(it->second.known_to()) - 1;
}

std::vector<uint32_t> GpuIdle::pids() const {
  std::vector<uint32_t> v;
  for (const auto& [pid, p] : processes_) v.push_back(pid);
  return v;
}

std::optional<std::pair<int64_t, int64_t>> GpuIdle::window_range() const {
  std::optional<std::pair<int64_t, int64_t>> range;
  for (const auto& [pid, p] : processes_) {
    if (p.first_ns == INT64_MAX) continue;
    int64_t a = window_of(p.first_ns),
            b = window_of(std::max(p.last_end_ns, p.slices.empty() ? INT64_MIN : p.slices.back().second) - 1);
    range =
        range ? std::pair(std::min(range->first, a), std::max(range->second, b)) : std::pair(a, b);
  }
  return range;
}

void GpuIdle::forget_before(int64_t w) {
  std::erase_if(processes_, [&](const auto& entry) {
    return entry.second.ended && window_of(entry.second.known_to() - 1) < w;
  });
  int64_t at = start_ns_ + w * window_ns_;
  for (auto& [pid, p] : processes_) {
    p.spans.erase(p.spans.begin(), p.spans.lower_bound(w));
    size_t done = 0;  // slices that ended before window w (the last one stays: it says duty)
    while (done + 1 < p.slices.size() && p.slices[done].second <= at) ++done;
    p.slices.erase(p.slices.begin(), p.slices.begin() + std::ptrdiff_t(done));
  }
}

}  // namespace eacgm::detect
