// GPU time in the report (see gpu_time.h), from the gpu_activity table.
#include "report/gpu_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "report/report.h"
#include "store/reader.h"
#include "store/table_readers.h"

namespace eacgm {
namespace {

std::string ns_text(double ns) {
  if (ns < 1e3) return fmt::format("{:.0f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.1f} us", ns / 1e3);
  if (ns < 1e9) return fmt::format("{:.2f} ms", ns / 1e6);
  return fmt::format("{:.2f} s", ns / 1e9);
}

std::string bytes_text(int64_t b) {
  if (b <= 0) return "0 B";
  if (b < 1 << 20) return fmt::format("{:.1f} KiB", double(b) / 1024);
  if (b < 1 << 30) return fmt::format("{:.1f} MiB", double(b) / (1 << 20));
  return fmt::format("{:.2f} GiB", double(b) / (1 << 30));
}

using Spans = std::vector<std::pair<uint64_t, uint64_t>>;

// The union of intervals: disjoint, sorted.
Spans merged(Spans spans) {
  std::sort(spans.begin(), spans.end());
  Spans out;
  for (auto [s, e] : spans) {
    if (!out.empty() && s <= out.back().second)
      out.back().second = std::max(out.back().second, e);
    else
      out.emplace_back(s, e);
  }
  return out;
}

uint64_t total_ns(const Spans& disjoint) {
  uint64_t total = 0;
  for (auto [s, e] : disjoint) total += e - s;
  return total;
}

// How long two unions (disjoint, sorted) overlap.
uint64_t overlap_ns(const Spans& a, const Spans& b) {
  uint64_t total = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    uint64_t s = std::max(a[i].first, b[j].first), e = std::min(a[i].second, b[j].second);
    if (e > s) total += e - s;
    (a[i].second < b[j].second ? i : j)++;
  }
  return total;
}

// Innermost frames first, as the page shows them: "func (file:line)".
std::vector<std::string> stack_text(const RecordingReader& rec, int64_t id) {
  std::vector<std::string> out;
  for (const auto& f : python_stack(rec, id, 64))
    out.push_back(fmt::format("{} ({}:{})", f.name, f.file, std::max<int64_t>(f.line, 0)));
  return out;
}

std::vector<GpuCollectiveTime> collective_times(const RecordingReader& rec) {
  struct Acc {
    GpuCollectiveTime t;
    std::vector<uint64_t> durations, starts;
    std::vector<double> busbw;
  };
  std::map<std::tuple<std::string, int64_t, int64_t>, Acc> by_kind;
  each_gpu_collective(rec, [&](const GpuCollectiveRow& r) {
    Acc& a = by_kind[{std::string(r.name), r.rank, r.nranks}];
    ++a.t.operations;
    // (a damaged recording's sizes may sum past int64: the total stops at its largest value)
    if (r.bytes > 0 && __builtin_add_overflow(a.t.bytes, r.bytes, &a.t.bytes)) a.t.bytes = INT64_MAX;
    if (!r.has_gpu_time) return;
    a.durations.push_back(r.gpu_dur_ns);
    if (r.gpu_start_ns >= r.ts_ns) a.starts.push_back(r.gpu_start_ns - r.ts_ns);
    if (r.busbw_gbps >= 0) a.busbw.push_back(r.busbw_gbps);
  });
  std::vector<GpuCollectiveTime> out;
  for (auto& [key, a] : by_kind) {
    GpuCollectiveTime t = a.t;
    std::tie(t.name, t.rank, t.nranks) = key;
    std::sort(a.durations.begin(), a.durations.end());
    std::sort(a.starts.begin(), a.starts.end());
    std::sort(a.busbw.begin(), a.busbw.end());
    t.timed = a.durations.size();
    for (uint64_t d : a.durations) t.total_ns += d;
    t.p50_ns = percentile(a.durations, 50);
    t.max_ns = a.durations.empty() ? 0 : a.durations.back();
    t.start_p50_ns = percentile(a.starts, 50);
    if (!a.busbw.empty()) t.busbw_p50_gbps = a.busbw[a.busbw.size() / 2];
    out.push_back(std::move(t));
  }
  return out;
}

std::string bandwidth_text(double gbps) {
  if (gbps < 0) return "-";
  if (gbps < 0.1) return fmt::format("{:.1f} MB/s", gbps * 1e3);
  return fmt::format("{:.2f} GB/s", gbps);
}

}  // namespace

GpuTimeSummary gpu_time_summary(const RecordingReader& rec, size_t top) {
  GpuTimeSummary s;
  struct Device {
    GpuDeviceTime t;
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    uint64_t first = UINT64_MAX, last = 0;
  };
  std::map<uint32_t, Device> devices;
  struct Kernel {
    std::vector<uint64_t> durations, queues;
  };
  std::map<std::string, Kernel, std::less<>> kernels;
  std::unordered_map<uint64_t, uint64_t> launch_at;  // (pid, correlation) -> launch start
  std::vector<uint64_t> queues;
  // in time order: a launch starts before the executions it makes
  each_gpu_activity(rec, [&](const GpuActivityRow& r) {
    uint64_t key = uint64_t(r.pid) << 32 | r.correlation;
    if (r.kind == "launch") {
      launch_at[key] = r.ts_ns;
      return;
    }
    Device& d = devices[r.device];
    d.t.device = r.device;
    d.spans.emplace_back(r.ts_ns, r.ts_ns + r.dur_ns);
    d.first = std::min(d.first, r.ts_ns);
    d.last = std::max(d.last, r.ts_ns + r.dur_ns);
    if (r.kind == "memcpy") {
      ++d.t.copies;
      if (r.bytes > 0 && __builtin_add_overflow(d.t.copy_bytes, r.bytes, &d.t.copy_bytes))
        d.t.copy_bytes = INT64_MAX;  // (as the collectives' bytes above)
    }
    if (r.kind == "memset") ++d.t.memsets;
    if (r.kind != "kernel") return;
    ++d.t.kernels;
    auto [it, added] = kernels.try_emplace(std::string(r.name));
    it->second.durations.push_back(r.dur_ns);
    if (auto l = launch_at.find(key); l != launch_at.end() && l->second <= r.ts_ns) {
      uint64_t q = r.ts_ns - l->second;
      it->second.queues.push_back(q);
      queues.push_back(q);
      ++s.linked;
      launch_at.erase(l);
    } else {
      ++s.unlinked;
    }
  });
  // duty-cycled: what was collected (the slices), and the busy time within it
  Spans slices;
  each_gpu_slice(rec, [&](const GpuSliceRow& r) { slices.emplace_back(r.ts_ns, r.ts_ns + r.dur_ns); });
  s.slices = slices.size();
  slices = merged(std::move(slices));
  s.collected_ns = total_ns(slices);
  if (!slices.empty()) s.sliced_span_ns = slices.back().second - slices.front().first;
  for (auto& [id, d] : devices) {
    Spans busy = merged(std::move(d.spans));
    if (slices.empty()) {
      d.t.busy_ns = total_ns(busy);
      d.t.span_ns = d.last > d.first ? d.last - d.first : 0;
    } else {
      d.t.busy_ns = overlap_ns(busy, slices);
      d.t.span_ns = overlap_ns(Spans{{d.first, std::max(d.last, d.first)}}, slices);
    }
    s.devices.push_back(d.t);
  }
  std::sort(queues.begin(), queues.end());
  s.queue_p50_ns = percentile(queues, 50);
  s.queue_p95_ns = percentile(queues, 95);
  s.queue_p99_ns = percentile(queues, 99);
  s.queue_max_ns = queues.empty() ? 0 : queues.back();
  for (auto& [name, k] : kernels) {
    std::sort(k.durations.begin(), k.durations.end());
    std::sort(k.queues.begin(), k.queues.end());
    GpuKernelTime t{name,
                    k.durations.size(),
                    0,
                    percentile(k.durations, 50),
                    k.durations.back(),
                    percentile(k.queues, 50),
                    k.queues.size()};
    for (uint64_t d : k.durations) t.total_ns += d;
    s.kernels.push_back(std::move(t));
  }
  std::sort(s.kernels.begin(), s.kernels.end(), [](const auto& a, const auto& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.kernel < b.kernel;
  });
  if (s.kernels.size() > top) s.kernels.resize(top);
  // their Python stacks: the cuda layer's launch calls name the kernel they launched as CUPTI
  // names its execution (both demangled)
  if (!s.kernels.empty()) {
    std::map<std::string, int64_t> usual = usual_python_stacks(rec, "cuda", true);
    for (auto& k : s.kernels)
      if (auto it = usual.find(k.kernel); it != usual.end()) k.python_stack = stack_text(rec, it->second);
  }
  s.collectives = collective_times(rec);
  return s;
}

static void print_collective_times(const std::vector<GpuCollectiveTime>& ops, FILE* out) {
  if (ops.empty()) return;
  fmt::print(out, "  NCCL on the GPU (its profiler plugin: each operation's kernels, all channels):\n");
  fmt::print(out, "  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>12}  {}\n", "operations", "GPU time",
             "p50", "max", "start p50", "busbw p50", "operation");
  for (const auto& c : ops) {
    std::string what = c.name + (c.rank >= 0 ? fmt::format(" (rank {} of {})", c.rank, c.nranks) : "");
    if (c.timed < c.operations) what += fmt::format(", {} without GPU time", c.operations - c.timed);
    fmt::print(out, "  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>12}  {}\n", c.operations,
               ns_text(double(c.total_ns)), c.timed ? ns_text(double(c.p50_ns)) : "-",
               c.timed ? ns_text(double(c.max_ns)) : "-",
               c.timed ? ns_text(double(c.start_p50_ns)) : "-",
               bandwidth_text(c.busbw_p50_gbps), what);
  }
}

void print_gpu_time(const GpuTimeSummary& s, FILE* out) {
  if (s.empty()) return;
  fmt::print(out,
             "\nGPU time (gputime layer: when the GPU ran the work, not when it was asked):\n");
  if (s.slices)
    fmt::print(out,
               "  duty-cycled (EACGM_GPUTIME_DUTY): collected in {} slices, {} of {}; what "
               "follows is what ran in them\n",
               s.slices, ns_text(double(s.collected_ns)), ns_text(double(s.sliced_span_ns)));
  for (const auto& d : s.devices)
    fmt::print(out,
               "  device {}: busy {} of {}{} ({:.1f}%); kernels {}, copies {} ({}), memsets {}\n",
               d.device, ns_text(double(d.busy_ns)), ns_text(double(d.span_ns)),
               s.slices ? " collected" : "",
               d.span_ns ? 100.0 * double(d.busy_ns) / double(d.span_ns) : 0.0, d.kernels, d.copies,
               bytes_text(d.copy_bytes), d.memsets);
  if (s.linked)
    fmt::print(out, "  queue delay (launch call to GPU start): p50 {}, p95 {}, p99 {}, max {}{}\n",
               ns_text(double(s.queue_p50_ns)), ns_text(double(s.queue_p95_ns)),
               ns_text(double(s.queue_p99_ns)), ns_text(double(s.queue_max_ns)),
               s.unlinked ? fmt::format(" (kernels without their launch: {})", s.unlinked) : "");
  print_collective_times(s.collectives, out);
  if (s.kernels.empty()) return;
  fmt::print(out, "  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {}\n", "executions", "GPU time", "p50",
             "max", "queue p50", "kernel");
  for (const auto& k : s.kernels) {
    fmt::print(out, "  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {}\n", k.executions,
               ns_text(double(k.total_ns)), ns_text(double(k.p50_ns)), ns_text(double(k.max_ns)),
               k.queued ? ns_text(double(k.queue_p50_ns)) : "-", k.kernel);
    // where it is launched from: the innermost frames of its usual Python stack
    if (k.python_stack.empty()) continue;
    std::string from;
    for (size_t i = 0; i < k.python_stack.size() && i < 3; ++i)
      from += (i ? " < " : "") + k.python_stack[i];
    fmt::print(out, "  {:>58}  from {}\n", "", from);
  }
}

nlohmann::json gpu_time_json(const GpuTimeSummary& s) {
  nlohmann::json j = nlohmann::json::object();
  if (s.empty()) return j;
  j["devices"] = nlohmann::json::array();
  for (const auto& d : s.devices)
    j["devices"].push_back({{"device", d.device},
                            {"busy_ns", d.busy_ns},
                            {"span_ns", d.span_ns},
                            {"kernels", d.kernels},
                            {"copies", d.copies},
                            {"copy_bytes", d.copy_bytes},
                            {"memsets", d.memsets}});
  if (s.slices)
    j["duty_cycled"] = {{"slices", s.slices},
                        {"collected_ns", s.collected_ns},
                        {"span_ns", s.sliced_span_ns}};
  j["queue_delay_ns"] = {{"linked", s.linked},    {"unlinked", s.unlinked},
                         {"p50", s.queue_p50_ns}, {"p95", s.queue_p95_ns},
                         {"p99", s.queue_p99_ns}, {"max", s.queue_max_ns}};
  j["collectives"] = nlohmann::json::array();
  for (const auto& c : s.collectives)
    j["collectives"].push_back({{"name", c.name},
                                {"rank", c.rank},
                                {"nranks", c.nranks},
                                {"operations", c.operations},
                                {"timed", c.timed},
                                {"gpu_ns", c.total_ns},
                                {"p50_ns", c.p50_ns},
                                {"max_ns", c.max_ns},
                                {"start_p50_ns", c.start_p50_ns},
                                {"bytes", c.bytes},
                                {"busbw_p50_gbps", c.busbw_p50_gbps}});
  j["top_kernels"] = nlohmann::json::array();
  for (const auto& k : s.kernels)
    j["top_kernels"].push_back({{"kernel", k.kernel},
                                {"executions", k.executions},
                                {"gpu_ns", k.total_ns},
                                {"p50_ns", k.p50_ns},
                                {"max_ns", k.max_ns},
                                {"queue_p50_ns", k.queue_p50_ns},
                                {"python_stack", k.python_stack}});
  return j;
}

}  // namespace eacgm
