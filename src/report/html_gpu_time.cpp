// The GPU time line of `eacgm report --html`: every execution of the gputime layer merged into
// fixed time buckets per lane (a GPU stream, an NCCL communicator's rank), per GPU, and per
// kernel name, so the page's size follows the buckets, not the millions of kernels.
#include "report/html_gpu_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "report/html_json.h"
#include "store/reader.h"
#include "store/rows.h"
#include "store/table_readers.h"

namespace eacgm {
namespace {

using nlohmann::json;

// The time line's buckets: bucket i is [edge(i), edge(i + 1)) in whole nanoseconds, so the
// buckets' busy times add up to the executions' exactly.
class Buckets {
 public:
  Buckets(int64_t t0, int64_t span, size_t n)
      : t0_(t0), span_(std::max<int64_t>(span, 1)), n_(std::max<size_t>(n, 1)) {}
  size_t size() const { return n_; }
  // t0 + floor(span * i / n), without the product (which a long recording would overflow)
  int64_t edge(size_t i) const {
    int64_t n = int64_t(n_), q = span_ / n, r = span_ % n;
    return t0_ + q * int64_t(i) + r * int64_t(i) / n;
  }
  int64_t width(size_t i) const { return edge(i + 1) - edge(i); }
  // f(bucket, ns) for each bucket that [s, e) overlaps, within the time line
  template <class F>
  void overlap(int64_t s, int64_t e, F&& f) const {
    s = std::max(s, t0_), e = std::min(e, t0_ + span_);
    if (e <= s) return;
    size_t i = std::min(n_ - 1, size_t(double(s - t0_) / double(span_) * double(n_)));
    while (i > 0 && edge(i) > s) --i;
    while (i + 1 < n_ && edge(i + 1) <= s) ++i;
    for (; i < n_ && edge(i) < e; ++i) {
      int64_t lo = std::max(s, edge(i)), hi = std::min(e, edge(i + 1));
      if (hi > lo) f(i, uint64_t(hi - lo));
    }
  }

 private:
  int64_t t0_, span_;
  size_t n_;
};

// The union of intervals taken in the order of their starts: of each, the part not yet covered
// (concurrent kernels on a GPU are busy time once).
struct Coverage {
  int64_t until = INT64_MIN;
  std::pair<int64_t, int64_t> fresh(int64_t s, int64_t e) {
    std::pair<int64_t, int64_t> out{std::max(s, until), e};
    until = std::max(until, e);
    return out;
  }
};

// What ran, by the name the page shows: a kernel's, or the kind and direction of a copy.
class Names {
 public:
  uint32_t id(std::string_view kind, std::string_view name) {
    std::string_view key = name;
    if (kind != "kernel") {
      key_.assign(kind);
      if (!name.empty()) key_.append(" ").append(name);
      key = key_;
    }
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
    names_.emplace_back(key.size() > 300 ? std::string(key.substr(0, 300)) + "..." : key);
    return ids_.emplace(std::string(key), uint32_t(names_.size() - 1)).first->second;
  }
  const std::string& operator[](uint32_t id) const { return names_[id]; }
  size_t size() const { return names_.size(); }

 private:
  std::map<std::string, uint32_t, std::less<>> ids_;
  std::vector<std::string> names_;
  std::string key_;
};

// One row of the time line: per bucket, how long it was busy and what ran how long in it.
struct Lane {
  std::string label;
  bool nccl = false;
  uint32_t device = 0, pid = 0, stream = 0;
  uint64_t executions = 0, total_ns = 0;  // counted before the buckets (to pick the busiest)
  uint64_t busy_ns = 0;
  Coverage covered;
  std::vector<uint64_t> busy;
  std::vector<std::vector<std::pair<uint32_t, uint64_t>>> ran;  // per bucket: (name, ns)

  void add(const Buckets& b, int64_t s, int64_t e, uint32_t name) {
    if (busy.empty()) busy.assign(b.size(), 0), ran.resize(b.size());
    auto [from, to] = covered.fresh(s, e);
    b.overlap(from, to, [&](size_t i, uint64_t ns) { busy[i] += ns, busy_ns += ns; });
    b.overlap(s, e, [&](size_t i, uint64_t ns) {
      auto& v = ran[i];
      auto it = std::find_if(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
      if (it == v.end())
        v.push_back({name, ns});
      else
        it->second += ns;
    });
  }
};

using StreamKey = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>;  // device pid context stream
using CommKey = std::pair<uint64_t, int64_t>;                          // comm hash, rank

struct Timeline {
  Buckets buckets;
  GpuTimelineOptions opt;
  Names names;
  uint64_t executions = 0;
  std::map<StreamKey, Lane> streams;
  std::map<CommKey, Lane> comms;
  size_t streams_seen = 0, comms_seen = 0;
  std::map<uint32_t, std::pair<Coverage, std::vector<uint64_t>>> devices;  // the union per GPU
  std::vector<uint64_t> kernel_ns;  // per name id: GPU time of kernels
  std::vector<int> series_of;       // per name id: its series of the kernel chart
  std::vector<std::pair<std::string, std::vector<uint64_t>>> series;
};

bool is_execution(const GpuActivityRow& r) {
  return r.kind == "kernel" || r.kind == "memcpy" || r.kind == "memset";
}

StreamKey stream_key(const GpuActivityRow& r) { return {r.device, r.pid, r.context, r.stream}; }

// The `keep` lanes with the most GPU time; the others are dropped before the buckets.
template <class Key>
void keep_busiest(std::map<Key, Lane>& lanes, size_t keep) {
  std::vector<std::pair<uint64_t, Key>> by_time;
  for (const auto& [key, lane] : lanes) by_time.push_back({lane.total_ns, key});
  std::sort(by_time.begin(), by_time.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (size_t i = keep; i < by_time.size(); ++i) lanes.erase(by_time[i].second);
}

// First pass: which lanes and kernels have the most GPU time.
void count(const RecordingReader& rec, Timeline& t) {
  each_gpu_activity(rec, [&](const GpuActivityRow& r) {
    if (!is_execution(r)) return;
    ++t.executions;
    uint32_t id = t.names.id(r.kind, r.name);
    if (t.kernel_ns.size() <= id) t.kernel_ns.resize(id + 1, 0);
    if (r.kind == "kernel") t.kernel_ns[id] += r.dur_ns;
    Lane& lane = t.streams[stream_key(r)];
    lane.device = r.device, lane.pid = r.pid, lane.stream = r.stream;
    ++lane.executions, lane.total_ns += r.dur_ns;
  });
  t.streams_seen = t.streams.size();
  keep_busiest(t.streams, t.opt.lanes);
  // the kernel chart's series: the top kernels by name, the other kernels, copies and memsets
  std::vector<std::pair<uint64_t, uint32_t>> top;
  for (uint32_t id = 0; id < t.kernel_ns.size(); ++id)
    if (t.kernel_ns[id] > 0) top.push_back({t.kernel_ns[id], id});
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  top.resize(std::min(top.size(), t.opt.top_kernels));
  t.series_of.assign(t.names.size(), -1);
  for (const auto& [ns, id] : top) {
    t.series_of[id] = int(t.series.size());
    t.series.push_back({t.names[id], std::vector<uint64_t>(t.buckets.size(), 0)});
  }
  t.series.push_back({"other kernels", std::vector<uint64_t>(t.buckets.size(), 0)});
  t.series.push_back({"copies and memsets", std::vector<uint64_t>(t.buckets.size(), 0)});
}

// Second pass (in order of start, as each_gpu_activity reads them): into the buckets.
void fill(const RecordingReader& rec, Timeline& t) {
  const Buckets& b = t.buckets;
  each_gpu_activity(rec, [&](const GpuActivityRow& r) {
    if (!is_execution(r)) return;
    int64_t s = int64_t(r.ts_ns), e = s + int64_t(r.dur_ns);
    uint32_t id = t.names.id(r.kind, r.name);
    auto& device = t.devices[r.device];  // (clang 14: no structured binding in a lambda)
    std::vector<uint64_t>& busy = device.second;
    if (busy.empty()) busy.assign(b.size(), 0);
    auto [from, to] = device.first.fresh(s, e);
    b.overlap(from, to, [&](size_t i, uint64_t ns) { busy[i] += ns; });
    size_t k = r.kind != "kernel"                                ? t.series.size() - 1
               : id < t.series_of.size() && t.series_of[id] >= 0 ? size_t(t.series_of[id])
                                                                 : t.series.size() - 2;
    b.overlap(s, e, [&](size_t i, uint64_t ns) { t.series[k].second[i] += ns; });
    if (auto lane = t.streams.find(stream_key(r)); lane != t.streams.end())
      lane->second.add(b, s, e, id);
  });
}

// NCCL's operations as the GPU ran them, one lane per communicator and rank.
void add_collectives(const RecordingReader& rec, Timeline& t) {
  std::map<CommKey, std::vector<std::tuple<int64_t, int64_t, uint32_t>>> ops;
  std::map<CommKey, int64_t> nranks;
  each_gpu_collective(rec, [&](const GpuCollectiveRow& r) {
    if (!r.has_gpu_time || r.gpu_dur_ns == 0) return;
    CommKey key{r.comm_hash, r.rank};
    int64_t s = int64_t(r.gpu_start_ns);
    ops[key].emplace_back(s, s + int64_t(r.gpu_dur_ns), t.names.id("kernel", r.name));
    nranks[key] = r.nranks;
    Lane& lane = t.comms[key];
    lane.nccl = true, lane.pid = r.pid;
    ++lane.executions, lane.total_ns += r.gpu_dur_ns;
  });
  t.comms_seen = t.comms.size();
  keep_busiest(t.comms, std::max<size_t>(1, t.opt.lanes / 3));
  for (auto& [key, lane] : t.comms) {
    auto& v = ops[key];
    std::sort(v.begin(), v.end());
    for (const auto& [s, e, id] : v) lane.add(t.buckets, s, e, id);
    lane.label =
        fmt::format("NCCL comm {:06x} rank {}/{}", key.first & 0xffffff, key.second, nranks[key]);
  }
}

// "GPU 0 stream 7", with the process where streams of several share a GPU.
void label_streams(Timeline& t) {
  std::map<uint32_t, std::set<uint32_t>> pids;
  for (const auto& [key, lane] : t.streams) pids[lane.device].insert(lane.pid);
  std::map<std::string, int> uses;
  for (auto& [key, lane] : t.streams) {
    lane.label = fmt::format("GPU {} stream {}", lane.device, lane.stream);
    if (pids[lane.device].size() > 1) lane.label += fmt::format(" pid {}", lane.pid);
    ++uses[lane.label];
  }
  // each of a process's contexts on a GPU numbers its streams on its own
  for (auto& [key, lane] : t.streams)
    if (uses[lane.label] > 1) lane.label += fmt::format(" context {}", std::get<2>(key));
}

// A lane's buckets as [bucket, busy us, [[name, us], ...the longest]], the names by their index
// in `names` (only those shown are written).
json lane_json(const Lane& lane, const Timeline& t, std::map<uint32_t, size_t>& shown,
               json& names) {
  json cells = json::array();
  for (size_t i = 0; i < lane.busy.size(); ++i) {
    if (lane.busy[i] == 0) continue;
    auto ran = lane.ran[i];
    std::sort(ran.begin(), ran.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    json top = json::array();
    for (size_t k = 0; k < ran.size() && k < t.opt.names_per_bucket; ++k) {
      auto [it, added] = shown.try_emplace(ran[k].first, shown.size());
      if (added) names.push_back(t.names[ran[k].first]);
      top.push_back({it->second, rounded(double(ran[k].second) / 1e3, 3)});
    }
    cells.push_back({i, rounded(double(lane.busy[i]) / 1e3, 3), top});
  }
  json j{{"label", lane.label},
         {"kind", lane.nccl ? "nccl" : "stream"},
         {"pid", lane.pid},
         {"executions", lane.executions},
         {"busy_ms", rounded(double(lane.busy_ns) / 1e6, 3)},
         {"cells", cells}};
  if (!lane.nccl) j["device"] = lane.device, j["stream"] = lane.stream;
  return j;
}

// Per bucket, ns as a share of the bucket (100: one GPU all of it); duty-cycled (`collected`,
// per bucket, not empty): of the time collected in it, null where none was (a gap, not idle).
json percent_of_buckets(const std::vector<uint64_t>& ns, const Buckets& b,
                        const std::vector<uint64_t>& collected) {
  json out = json::array();
  for (size_t i = 0; i < ns.size(); ++i) {
    double of = collected.empty() ? double(std::max<int64_t>(b.width(i), 1)) : double(collected[i]);
    if (of > 0)
      out.push_back(rounded(std::min(100.0 * double(ns[i]) / of, collected.empty() ? 1e9 : 100.0), 2));
    else
      out.push_back(nullptr);
  }
  return out;
}

// Per bucket, the time in which some process's GPU time was collected (gpu_time_slices, their
// union); empty when no process was duty-cycled.
std::vector<uint64_t> collected_per_bucket(const RecordingReader& rec, const Buckets& b,
                                           size_t& slices) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  each_gpu_slice(rec, [&](const GpuSliceRow& r) {
    spans.emplace_back(int64_t(r.ts_ns), int64_t(r.ts_ns + r.dur_ns));
  });
  slices = spans.size();
  std::vector<uint64_t> out;
  if (spans.empty()) return out;
  out.assign(b.size(), 0);
  Coverage c;  // (by start: each_gpu_slice's order)
  for (auto [s, e] : spans) {
    auto [from, to] = c.fresh(s, e);
    if (to > from) b.overlap(from, to, [&](size_t i, uint64_t ns) { out[i] += ns; });
  }
  return out;
}

json to_json(const Timeline& t, int64_t span_ns, const std::vector<uint64_t>& collected) {
  uint64_t collected_ns = 0;
  for (uint64_t ns : collected) collected_ns += ns;
  double of_ns = collected.empty() ? double(span_ns) : double(std::max<uint64_t>(collected_ns, 1));
  json names = json::array(), lanes = json::array();
  std::map<uint32_t, size_t> shown;
  for (const auto& [key, lane] : t.streams) lanes.push_back(lane_json(lane, t, shown, names));
  for (const auto& [key, lane] : t.comms) lanes.push_back(lane_json(lane, t, shown, names));
  json busy = json::array(), kernels = json::array();
  for (const auto& [device, d] : t.devices) {
    uint64_t total = 0;
    for (uint64_t ns : d.second) total += ns;
    busy.push_back({{"device", device},
                    {"busy_pct", rounded(100.0 * double(total) / of_ns, 2)},
                    {"values", percent_of_buckets(d.second, t.buckets, collected)}});
  }
  for (const auto& [name, ns] : t.series) {
    uint64_t total = 0;
    for (uint64_t v : ns) total += v;
    if (total == 0) continue;
    kernels.push_back({{"name", name},
                       {"gpu_ms", rounded(double(total) / 1e6, 3)},
                       {"values", percent_of_buckets(ns, t.buckets, collected)}});
  }
  return {{"buckets", t.buckets.size()},
          {"bucket_s", rounded(double(span_ns) / double(t.buckets.size()) / 1e9, 9)},
          {"executions", t.executions},
          {"names", names},
          {"lanes", lanes},
          {"busy", busy},
          {"kernels", kernels}};
}

std::string duration_text(double s) {
  if (s >= 1) return fmt::format("{:.3g} s", s);
  if (s >= 1e-3) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.3g} us", s * 1e6);
}

}  // namespace

json gpu_timeline_section(const RecordingReader& rec, int64_t t0_ns, int64_t span_ns,
                          const GpuTimelineOptions& options, json& notes) {
  span_ns = std::max<int64_t>(span_ns, 1);
  Timeline t{Buckets(t0_ns, span_ns, options.buckets), options};
  count(rec, t);
  fill(rec, t);
  add_collectives(rec, t);
  if (t.executions == 0 && t.comms.empty()) {
    notes.push_back(
        "GPU time: no kernels in this recording (the gputime layer was off, or no process "
        "loaded CUDA)");
    return nullptr;
  }
  label_streams(t);
  size_t slices = 0;
  std::vector<uint64_t> collected = collected_per_bucket(rec, t.buckets, slices);
  if (slices)
    notes.push_back(fmt::format(
        "GPU time: duty-cycled (EACGM_GPUTIME_DUTY), collected in {} slices; GPU busy and kernel "
        "time are shares of the time collected, and the gaps between are times nothing was "
        "collected (not an idle GPU)",
        slices));
  notes.push_back(fmt::format(
      "GPU time: {} executions merged per lane into {} buckets of {} (a bucket's busy time is "
      "the union of what ran in it; hovering names the {} that ran longest)",
      t.executions, t.buckets.size(),
      duration_text(double(span_ns) / double(t.buckets.size()) / 1e9), options.names_per_bucket));
  if (t.streams_seen > t.streams.size())
    notes.push_back(
        fmt::format("GPU time: {} of {} streams drawn (the most GPU time); all are "
                    "in the gpu_activity table",
                    t.streams.size(), t.streams_seen));
  if (t.comms_seen > t.comms.size())
    notes.push_back(
        fmt::format("GPU time: {} of {} NCCL communicators' ranks drawn (the most GPU "
                    "time); all are in the gpu_collectives table",
                    t.comms.size(), t.comms_seen));
  return to_json(t, span_ns, collected);
}

}  // namespace eacgm
