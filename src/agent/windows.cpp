// Window features accumulated as rows arrive; see detect/features.cpp for the batch form they
// follow (names, units, noise floors).
#include "agent/windows.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace eacgm {
namespace {

enum Feature : size_t {
  kRunqMs,
  kRunqWaits,
  kInvoluntary,
  kCpuCores,
  kSocketMb,
  kBlockMb,
  kRetransmits,
  kPageFaults,
  kReclaimMs,
  kPageinMb,
  kNicMb,
  kGpuUtil,
  kGpuMem,
  kGpuPower,
  kGpuTemp,
  kGpuSmClock,
  kGpuPcie,
  kGpuThrottled,
  kGpuIdle,     // not a reading: from the gputime layer's executions (detect::GpuIdle)
  kLayerCalls,  // then per layer: calls per second, mean log duration
};
constexpr size_t kGpuFirst = kGpuUtil, kGpuEnd = kGpuIdle;  // NVML's levels
const char* const kLayers[] = {"cuda", "comm", "torch", "python"};
constexpr bool kDutyLayer[] = {true, false, true, false};  // (ProbeSet::duty_cycled)
constexpr double kCovered = 0.5;  // a window's share with the probes on that stands for it all
constexpr uint64_t kDutyMemoryNs = 300'000'000'000;  // spans kept (windows are taken sooner)

size_t layer_index(const char* layer) {
  for (size_t i = 0; i < 4; ++i)
    if (std::string_view(layer) == kLayers[i]) return i;
  return 4;
}

}  // namespace

void CallDutyTimeline::set(bool on, uint64_t ts_ns) {
  if (on == on_) return;
  on_ = on;
  if (on) {
    on_since_ = ts_ns;
    return;
  }
  cycled_ = true;
  spans_.emplace_back(on_since_, std::max(ts_ns, on_since_));
  size_t old = 0;
  while (old < spans_.size() && spans_[old].second + kDutyMemoryNs < ts_ns) ++old;
  spans_.erase(spans_.begin(), spans_.begin() + std::ptrdiff_t(old));
}

double CallDutyTimeline::on_share(uint64_t from_ns, uint64_t to_ns) const {
  if (to_ns <= from_ns) return on_ && from_ns >= on_since_ ? 1.0 : 0.0;
  uint64_t covered = 0;
  auto add = [&](uint64_t a, uint64_t b) {
    a = std::max(a, from_ns), b = std::min(b, to_ns);
    if (b > a) covered += b - a;
  };
  for (auto [a, b] : spans_) add(a, b);
  if (on_) add(on_since_, to_ns);
  return double(covered) / double(to_ns - from_ns);
}

OnlineWindows::OnlineWindows(uint64_t window_ns, uint64_t lag_ns)
    : window_ns_(std::max<uint64_t>(window_ns, 1)), lag_ns_(lag_ns), gpu_idle_(0, window_ns_) {}

const std::vector<std::string>& OnlineWindows::feature_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v = {"runq_wait_ms_per_s",
                                  "runq_waits_per_s",
                                  "involuntary_switches_per_s",
                                  "cpu_cores",
                                  "socket_mb_per_s",
                                  "block_mb_per_s",
                                  "tcp_retransmits_per_s",
                                  "page_faults_per_s",
                                  "reclaim_ms_per_s",
                                  "pagein_mb_per_s",
                                  "nic_mb_per_s",
                                  "gpu_util_pct",
                                  "gpu_mem_gib",
                                  "gpu_power_w",
                                  "gpu_temp_c",
                                  "gpu_sm_clock_mhz",
                                  "gpu_pcie_mb_per_s",
                                  "gpu_throttled",
                                  "gpu_idle_pct"};
    for (const char* layer : kLayers) {
      v.push_back(std::string(layer) + "_calls_per_s");
      v.push_back(std::string(layer) + "_call_log_duration_us");
    }
    return v;
  }();
  return names;
}

OnlineWindows::Window& OnlineWindows::at(uint64_t ts_ns) {
  // a row for a window already handed out (late) counts in the first open one
  uint64_t w = std::max(ts_ns / window_ns_, next_);
  return windows_[w];
}

void OnlineWindows::add_call(const char* layer, uint32_t pid, uint64_t ts_ns, uint64_t dur_ns,
                             int64_t runq_ns) {
  size_t l = layer_index(layer);
  if (l >= 4) return;
  if (!established(pid, ts_ns)) return;
  Window& w = at(ts_ns);
  double per_s = 1e9 / double(window_ns_);
  add_value(w, kLayerCalls + 2 * l, per_s);
  int64_t net = int64_t(dur_ns) - std::max<int64_t>(runq_ns, 0);
  add_value(w, kLayerCalls + 2 * l + 1, std::log(double(std::max<int64_t>(net, 1)) / 1e3));
}

// A sample counts over its interval: each window gets the share it overlaps (as detect's).
void OnlineWindows::add(const HostSampleRow& r) {
  double per_s = 1e9 / double(window_ns_);
  auto shares = detect::window_shares(int64_t(r.ts_ns - std::min(r.interval_ns, r.ts_ns)),
                                      int64_t(r.ts_ns), 0, int64_t(window_ns_));
  if (r.scope == HostScope::NetDevice) {
    // Loopback is local IPC (and the agent's own /metrics scrapes), not the network: a scrape
    // once a second more or less is no network contention.
    if (r.name == "lo") return;
    for (auto [index, share] : shares)
      add_value(at(uint64_t(index) * window_ns_), kNicMb,
                double(r.tx_bytes + r.rx_bytes) / 1e6 * per_s * share);
    return;
  }
  uint64_t mid = r.ts_ns - r.interval_ns / 2;  // (a process counts by the middle of it)
  if (r.scope != HostScope::Process || !traced_.count(uint32_t(r.id)) ||
      !established(uint32_t(r.id), mid))
    return;
  for (auto [index, share] : shares) {
    Window& w = at(uint64_t(index) * window_ns_);
    add_value(w, kRunqMs, double(r.runq_wait_ns) / 1e6 * per_s * share);
    add_value(w, kRunqWaits, double(r.runq_waits) * per_s * share);
    add_value(w, kInvoluntary, double(r.involuntary_switches) * per_s * share);
    add_value(w, kCpuCores, double(r.oncpu_ns) / double(window_ns_) * share);
    add_value(w, kSocketMb, double(r.tx_bytes + r.rx_bytes) / 1e6 * per_s * share);
    add_value(w, kBlockMb, double(r.io_bytes) / 1e6 * per_s * share);
    add_value(w, kRetransmits, double(r.tcp_retransmits) * per_s * share);
    add_value(w, kPageFaults, double(r.page_faults) * per_s * share);
    add_value(w, kReclaimMs, double(r.reclaim_ns) / 1e6 * per_s * share);
    add_value(w, kPageinMb, double(r.pagein_bytes) / 1e6 * per_s * share);
  }
}

void OnlineWindows::add(const GpuSample& r) {
  Window& w = at(r.ts_ns);
  auto level = [&](size_t f, std::optional<double> v) {
    if (v) add_value(w, f, *v);
  };
  auto opt = [](const auto& o) { return o ? std::optional<double>(double(*o)) : std::nullopt; };
  level(kGpuUtil, opt(r.sm_util_pct));
  if (r.mem_used_bytes) add_value(w, kGpuMem, double(*r.mem_used_bytes) / double(1ull << 30));
  level(kGpuPower, r.power_w);
  level(kGpuTemp, opt(r.temperature_c));
  level(kGpuSmClock, opt(r.sm_clock_mhz));
  if (r.pcie_tx_bytes_per_s && r.pcie_rx_bytes_per_s)
    add_value(w, kGpuPcie, double(*r.pcie_tx_bytes_per_s + *r.pcie_rx_bytes_per_s) / 1e6);
  if (r.throttle_reasons)  // any reason but gpu_idle
    add_value(w, kGpuThrottled, (*r.throttle_reasons & ~uint64_t(1)) != 0 ? 1.0 : 0.0);
}

void OnlineWindows::add(const GpuActivityRow& r) {
  if (!detect::gpu_execution(r)) return;
  // Its process is traced (the job lives while it does), but its rows make no window and count
  // it in none: they come later than its calls and samples, which do, and only tell how busy
  // its GPU was meanwhile.
  traced_.try_emplace(r.pid, Traced{std::max(r.ts_ns / window_ns_, next_), false});
  gpu_idle_.add(r.pid, r.ts_ns, r.dur_ns);
}

void OnlineWindows::add(const GpuSliceRow& r) {
  traced_.try_emplace(r.pid, Traced{std::max(r.ts_ns / window_ns_, next_), false});
  gpu_idle_.collected(r.pid, r.ts_ns, r.dur_ns, r.next_ns);
}

// A process counts from its kEstablish-th window on: a job, not a tool that runs for a moment
// (nvidia-smi, a health check) and would otherwise make every window a change of regime on a
// node where such things start every second. Its first counted window is a change.
bool OnlineWindows::established(uint32_t pid, uint64_t ts_ns) {
  uint64_t w = std::max(ts_ns / window_ns_, next_);
  auto [it, added] = traced_.try_emplace(pid, Traced{w, false});
  if (w < it->second.first_window + kEstablish) return false;
  if (!it->second.counted) {
    it->second.counted = true;
    windows_[w].changed = true;
  }
  return true;
}

std::vector<uint32_t> OnlineWindows::pids() const {
  std::vector<uint32_t> v;
  for (const auto& [pid, t] : traced_) v.push_back(pid);
  return v;
}

void OnlineWindows::exited(uint32_t pid, uint64_t ts_ns) {
  gpu_idle_.ended(pid);  // its GPU's rows came before its exit
  auto it = traced_.find(pid);
  if (it == traced_.end()) return;
  if (it->second.counted) at(ts_ns).changed = true;  // a job ended
  traced_.erase(it);
}

void OnlineWindows::quiet(uint64_t from_ns, uint64_t to_ns) {
  if (to_ns < from_ns) return;
  uint64_t first = std::max(from_ns / window_ns_, next_), last = to_ns / window_ns_;
  // (bounded: a clock gone wrong must not make a million windows)
  for (uint64_t w = first; w <= last && w < first + 3600; ++w) windows_[w].changed = true;
}

detect::FeatureTable OnlineWindows::take_complete(uint64_t now_ns) {
  detect::FeatureTable t;
  t.group = t.layer = t.name = "window";
  t.feature_names = feature_names();
  t.log_rates = true;
  // Rare-event counts are 0 in most windows: only what exceeds a noise floor counts (as detect).
  const std::pair<size_t, double> floors[] = {
      {kRetransmits, 50}, {kPageinMb, 4}, {kReclaimMs, 1}, {kPageFaults, 1000}};
  std::vector<Held> rows;  // the windows to judge, in time order
  uint64_t hold = std::max<uint64_t>(kHoldNs / window_ns_, 1);
  auto release_old = [&](uint64_t index) {  // lulls held kHoldNs by `index`: judged now
    size_t n = 0;
    while (n < held_.size() && held_[n].index + hold <= index) rows.push_back(held_[n++]);
    held_.erase(held_.begin(), held_.begin() + std::ptrdiff_t(n));
  };
  uint64_t complete = now_ns > lag_ns_ ? (now_ns - lag_ns_) / window_ns_ : 0;  // first incomplete
  // (the GPU's rows: up to kHoldNs later)
  uint64_t gpu_hold = now_ns > lag_ns_ + kHoldNs ? (now_ns - lag_ns_ - kHoldNs) / window_ns_ : 0;
  for (uint32_t pid : gpu_idle_.pids())
    if (auto known = gpu_idle_.known_until(pid))
      complete = std::min(complete, std::max(gpu_hold, uint64_t(std::max<int64_t>(*known + 1, 0))));
  while (!windows_.empty() && windows_.begin()->first < complete) {
    auto [index, w] = *windows_.begin();
    windows_.erase(windows_.begin());
    next_ = index + 1;
    release_old(index);
    if (w.changed) changes_.insert(index);
    while (!changes_.empty() && *changes_.begin() + 2 < index) changes_.erase(changes_.begin());
    std::array<double, kFeatures> x{};
    for (size_t f = 0; f < kFeatures; ++f) {
      bool mean = (f >= kGpuFirst && f < kGpuEnd) || (f >= kLayerCalls && (f - kLayerCalls) % 2);
      x[f] = mean ? (w.n[f] ? w.sum[f] / w.n[f] : 0.0) : w.sum[f];
      if (f >= kGpuFirst && f < kGpuEnd) {
        if (w.n[f]) gpu_last_[f] = x[f];
        x[f] = gpu_last_[f];
      }
    }
    if (auto share = gpu_idle_.mean_idle_share(int64_t(index))) gpu_idle_last_ = 100 * *share;
    x[kGpuIdle] = gpu_idle_last_;
    double calls = 0;
    for (size_t l = 0; l < 4; ++l) calls += w.n[kLayerCalls + 2 * l];
    bool active = w.n[kCpuCores] > 0 || calls > 0;
    bool unknown = false;  // duty-cycled calls not seen yet: nothing stands for them
    if (duty_ && duty_->cycled()) {
      double share = duty_->on_share(index * window_ns_, (index + 1) * window_ns_);
      bool covered = share >= kCovered;
      std::array<DutyLast, 4> now{};
      for (size_t l = 0; l < 4; ++l) {
        if (!kDutyLayer[l]) continue;
        size_t rate = kLayerCalls + 2 * l, duration = rate + 1;
        double n = w.n[rate];
        if (covered) {
          x[rate] /= share;
          calls += n / share - n;
          now[l] = {x[rate], x[duration], n / share};
        } else {
          x[rate] = duty_last_[l].rate;
          x[duration] = duty_last_[l].log_duration;
          calls += duty_last_[l].calls - n;
        }
      }
      // What stands for the off phase: the last covered window in which the job ran. A lull
      // seen while the probes were on lasts, as far as is known, while they were: carried
      // on, a checkpoint's second would read as the whole off phase's stall.
      if (covered && active && !(calls_mean_ > 0 && calls < 0.1 * calls_mean_)) {
        for (size_t l = 0; l < 4; ++l)
          if (kDutyLayer[l]) duty_last_[l] = now[l];
        duty_known_ = true;
      }
      unknown = !duty_known_;
    }
    for (auto [f, floor] : floors) x[f] = std::max(0.0, x[f] - floor);
    // On a log scale, except the durations (already logs): a model fitted on a minute of a
    // steady job sees rates that hardly vary (3,824 calls a second, give or take 16), and on a
    // linear scale any change in them would outweigh a run-queue wait growing a thousandfold.
    for (size_t f = 0; f < kFeatures; ++f)
      if (f < kLayerCalls || (f - kLayerCalls) % 2 == 0) x[f] = std::log1p(std::max(0.0, x[f]));
    if (!changes_.empty()) held_.clear();  // a job started or ended: its lull was no fault
    // (a change in this window or the two before)
    if (!active || !changes_.empty() || unknown) continue;
    if (calls_mean_ > 0 && calls < 0.1 * calls_mean_) {
      held_.push_back({index, x});
      continue;
    }
    rows.insert(rows.end(), held_.begin(), held_.end());  // calls resumed: the pause is judged
    held_.clear();
    rows.push_back({index, x});
    // (a mean over the last ~5 judged windows: a lull is judged against the job as it runs now)
    calls_mean_ = calls_mean_ > 0 ? 0.8 * calls_mean_ + 0.2 * calls : calls;
  }
  release_old(complete);
  gpu_idle_.forget_before(int64_t(next_));
  for (const Held& r : rows) {
    t.ts_ns.push_back(r.index * window_ns_);
    t.dur_ns.push_back(window_ns_);
  }
  t.values.resize(Eigen::Index(rows.size()), Eigen::Index(kFeatures));
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t f = 0; f < kFeatures; ++f) t.values(Eigen::Index(r), Eigen::Index(f)) = rows[r].x[f];
  return t;
}

}  // namespace eacgm
