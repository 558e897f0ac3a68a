// Per-operation statistics and top kernels from a recording, printed as tables or JSON.
#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "report/collectives.h"
#include "report/gpu_time.h"
#include "report/profile.h"
#include "report/sampled_report.h"
#include "store/anomalies.h"
#include "store/reader.h"
#include "store/rows.h"
#include "store/table_readers.h"
#include "util/error.h"

namespace eacgm {
namespace {

// An anomaly's features column: JSON as the detector wrote it, or else the text as it is.
nlohmann::json features_json(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  return j.is_discarded() ? nlohmann::json(std::string(text)) : j;
}

std::string human_ns(double ns) {
  if (ns < 1e3) return fmt::format("{:.0f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.2f} us", ns / 1e3);
  if (ns < 1e9) return fmt::format("{:.2f} ms", ns / 1e6);
  return fmt::format("{:.2f} s", ns / 1e9);
}

std::string human_bytes(int64_t b) {
  if (b <= 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

// The anomalies eacgm detect wrote, if it ran: counts by cause, then the strongest ones.
void print_anomalies(const RecordingReader& rec, FILE* out) {
  if (!rec.has_table("anomalies")) return;
  std::string trained = rec.meta_or("detect_trained_on", "");
  if (trained.empty()) return;
  int64_t t0 = rec.meta_ns("start_monotonic_ns");
  fmt::print(out, "\nanomalies (eacgm detect, trained on {}):\n", trained);
  size_t n = 0;
  for (const auto& g : group_causes(anomaly_cause_counts(rec))) {
    fmt::print(out, "  {:>6}  {}\n", g.count, g.cause);
    n += g.count;
  }
  if (n == 0) {
    fmt::print(out, "  none\n");
    return;
  }
  fmt::print(out, "  strongest (lowest score against its threshold):\n");
  for (const AnomalyRow& a : strongest_anomalies(rec, 10)) {
    // the top features as detect prints them: measured and usual, in their units
    std::string top = features_text(a.features);
    // (a collective flagged for a wait past its group's tail may score above it; a late join
    // named against the job's own collectives has no score: detect/young_stragglers.h)
    std::string judged =
        std::isnan(a.score)        ? std::string("late join, against the job's own collectives")
        : a.score < a.threshold ? fmt::format("score {:.1f} < {:.1f}", a.score, a.threshold)
                                : fmt::format("score {:.1f}, wait past its tail", a.score);
    fmt::print(out, "  +{:.3f} s  {:<6} {:<24} {:>11}  {}  {}{}\n",
               (double(a.ts_ns) - double(t0)) / 1e9, a.layer, anomaly_subject(a.layer, a.name),
               human_ns(double(a.dur_ns)), judged, a.cause, top.empty() ? "" : " (" + top + ")");
  }
}

}  // namespace

uint64_t percentile(const std::vector<uint64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = size_t(std::ceil(p / 100.0 * double(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

std::vector<OperationStats> operation_stats(const RecordingReader& rec) {
  struct Acc {
    std::vector<uint64_t> durs;
    int64_t bytes = 0;
    uint64_t errors = 0;
  };
  std::map<std::pair<std::string, std::string>, Acc> acc;
  each_traced_call(rec, [&](const TracedCall& c) {
    Acc& a = acc[{std::string(c.layer), std::string(c.name)}];
    a.durs.push_back(c.dur_ns);
    // a damaged recording's sizes may add up past int64: the total stops at its largest
    if (c.bytes >= 0 && __builtin_add_overflow(a.bytes, c.bytes, &a.bytes)) a.bytes = INT64_MAX;
    if (c.ret != 0) ++a.errors;
  });
  std::vector<OperationStats> out;
  for (auto& [key, a] : acc) {
    std::sort(a.durs.begin(), a.durs.end());
    OperationStats o;
    o.layer = key.first;
    o.name = key.second;
    o.count = a.durs.size();
    for (uint64_t d : a.durs) o.total_ns += d;
    o.mean_ns = double(o.total_ns) / double(o.count);
    o.p50_ns = percentile(a.durs, 50);
    o.p99_ns = percentile(a.durs, 99);
    o.max_ns = a.durs.back();
    o.bytes = a.bytes;
    o.errors = a.errors;
    out.push_back(std::move(o));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  return out;
}

std::vector<KernelStats> top_kernels(const RecordingReader& rec, size_t limit) {
  // A runtime launch (cudaLaunchKernel*) makes a driver launch (cuLaunchKernel*) of the same
  // kernel inside it where a GPU runs it; libraries also launch through the driver alone, and
  // without a GPU the runtime fails before the driver. Each kernel's launches are those of
  // the level that saw more of them (the runtime's on a tie: its time holds the driver's).
  std::map<std::string, KernelStats> by_kernel;
  for (auto& level : kernel_launches(rec)) {  // the driver's first, then the runtime's
    KernelStats k{std::move(level.kernel), level.launches, level.total_ns};
    auto [it, fresh] = by_kernel.try_emplace(k.kernel, k);
    if (!fresh && k.launches >= it->second.launches) it->second = std::move(k);
  }
  std::vector<KernelStats> out;
  for (auto& [name, k] : by_kernel) out.push_back(std::move(k));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.launches != b.launches ? a.launches > b.launches : a.kernel < b.kernel;
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

namespace {

nlohmann::json anomalies_json(const RecordingReader& rec) {
  nlohmann::json j = nlohmann::json::array();
  each_anomaly(rec, [&](const AnomalyRow& a) {
    j.push_back({{"ts_ns", a.ts_ns}, {"dur_ns", a.dur_ns}, {"layer", a.layer}, {"name", a.name},
                 {"score", a.score}, {"threshold", a.threshold}, {"cause", a.cause},
                 // the detector writes JSON here; anything else (an edit, damage) is passed on
                 // as the text it is
                 {"features", features_json(a.features)}});
  });
  return j;
}

// The CPU and off-CPU profiles: their top functions and threads.
void add_profiles_json(const RecordingReader& rec, nlohmann::json& j) {
  CpuProfile cpu(rec);
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> cpu_samples;  // per thread
  for (const auto& t : cpu.threads()) cpu_samples[{t.pid, t.tid}] = t.weight;
  for (ProfileKind kind : {ProfileKind::Cpu, ProfileKind::OffCpu}) {
    CpuProfile profile = kind == ProfileKind::Cpu ? std::move(cpu) : CpuProfile(rec, kind);
    if (profile.empty()) continue;
    const bool off = kind == ProfileKind::OffCpu;
    nlohmann::json functions = nlohmann::json::array();
    for (const auto& f : profile.top_functions(100)) {
      nlohmann::json fj{{"name", f.name}, {"where", f.where}, {"python", f.python}};
      fj[off ? "self_ns" : "self_samples"] = f.self;
      fj[off ? "total_ns" : "total_samples"] = f.total;
      functions.push_back(std::move(fj));
    }
    // by weight: the 32 heaviest; off-CPU, every thread that also ran and the 32 heaviest
    // idle ones (a node's idle helpers would otherwise crowd out the ranks' threads)
    nlohmann::json threads = nlohmann::json::array();
    size_t listed = 0;
    for (const auto& t : profile.threads()) {
      nlohmann::json tj{{"pid", t.pid}, {"tid", t.tid}, {"name", t.name},
                        {"python", t.python}, {"native", t.native}};
      tj[off ? "blocked_ns" : "samples"] = t.weight;
      bool idle = false;
      if (off) {
        // with the CPU profile: whether it also ran, or only waited for work
        auto ran = cpu_samples.find({t.pid, t.tid});
        uint64_t samples = ran == cpu_samples.end() ? 0 : ran->second;
        tj["cpu_samples"] = samples;
        if (uint32_t hz = profile.hz())
          tj["idle"] = idle = is_idle_thread(double(samples) / hz, t.weight);
      }
      if ((!off || idle || !profile.hz()) && listed++ >= 32) continue;
      threads.push_back(std::move(tj));
    }
    nlohmann::json pj{{"samples", profile.samples().size()},
                      {"functions", functions},
                      {"threads", threads}};
    if (off)
      pj["blocked_ns"] = profile.total_weight();
    else
      pj["sample_hz"] = profile.hz();
    j[off ? "offcpu_profile" : "cpu_profile"] = std::move(pj);
  }
}

nlohmann::json collectives_json(const Collectives& collectives) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [key, v] : collectives.instances()) {
    CollectiveSummary s = summarize(v);
    nlohmann::json straggled = nlohmann::json::array();
    for (const auto* i : s.straggled)
      straggled.push_back({{"ts_ns", i->ts_ns}, {"rank", i->last_rank}, {"pid", i->last_pid},
                           {"straggling_ns", i->straggling_ns}, {"wait_ns", i->wait_ns}});
    nlohmann::json c{{"name", key.first},           {"nranks", key.second},
                     {"instances", v.size()},       {"wait_p50_ns", s.wait_p50_ns},
                     {"wait_p99_ns", s.wait_p99_ns}, {"wait_max_ns", s.wait_max_ns},
                     {"straggled", straggled}};  // instances straggled 1 ms or more
    j.push_back(c);
  }
  return j;
}

void print_report_json(const RecordingReader& rec, const std::string& path,
                       const std::vector<OperationStats>& ops,
                       const std::vector<KernelStats>& kernels, FILE* out) {
  nlohmann::json j;
  j["recording"] = path;
  j["meta"] = rec.meta();
  j["operations"] = nlohmann::json::array();
  for (const auto& o : ops)
    j["operations"].push_back({{"layer", o.layer}, {"name", o.name}, {"count", o.count},
                               {"total_ns", o.total_ns}, {"mean_ns", o.mean_ns},
                               {"p50_ns", o.p50_ns}, {"p99_ns", o.p99_ns},
                               {"max_ns", o.max_ns}, {"bytes", o.bytes},
                               {"errors", o.errors}});
  j["top_kernels"] = nlohmann::json::array();
  for (const auto& k : kernels)
    j["top_kernels"].push_back(
        {{"kernel", k.kernel}, {"launches", k.launches}, {"total_ns", k.total_ns}});
  j["gpu_time"] = gpu_time_json(gpu_time_summary(rec, 20));
  j["host"] = metric_stats_json(host_metric_stats(rec));
  j["gpu"] = metric_stats_json(gpu_metric_stats(rec));
  j["anomalies"] = anomalies_json(rec);
  add_profiles_json(rec, j);
  Collectives collectives(rec);
  j["collectives"] = collectives_json(collectives);
  j["collectives_not_lined_up"] = collectives.notes();
  j["gpu_xids"] = nlohmann::json::array();
  for (const auto& x : gpu_xids(rec))
    j["gpu_xids"].push_back({{"ts_ns", x.ts_ns}, {"gpu", x.gpu}, {"xid", x.xid}});
  // text from the traced programs may not be UTF-8 (a damaged recording): replaced, not refused
  fmt::print(out, "{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

// Where the recording came from, and whether it was closed.
void print_header(const RecordingReader& rec, const std::string& path, FILE* out) {
  fmt::print(out, "recording {}: {} on {}, layers {}\n", path, rec.meta_or("command", "?"),
             rec.meta_or("hostname", "?"), rec.meta_or("layers", "?"));
  fmt::print(out, "events {}, dropped {}\n", rec.meta_or("events", "?"),
             rec.meta_or("dropped_events", "?"));
  if (rec.meta_or("recording_state", "") == "recording") {
    // a recorder killed outright (or one still running) left its progress of the last second
    double s = 0;
    try {
      s = double(rec.meta_ns("end_monotonic_ns") - rec.meta_ns("start_monotonic_ns")) / 1e9;
    } catch (const std::exception&) {
    }
    fmt::print(out, "not finished: the recorder was stopped without closing it (killed?), or is "
                    "still writing; events and drops as of {:.1f} s in\n", s);
  }
  fmt::print(out, "durations are host-side API times (enqueue time for async calls), not GPU "
                  "execution times{}\n\n",
             rec.has_table("gpu_activity") && rec.meta_or("gpu_activity_rows", "0") != "0"
                 ? " (those are under \"GPU time\")"
                 : "");
}

}  // namespace

void print_report(const std::string& path, bool json, FILE* out) {
  RecordingReader rec(path);
  auto ops = operation_stats(rec);
  auto kernels = top_kernels(rec, 20);
  if (json) {
    print_report_json(rec, path, ops, kernels, out);
    return;
  }
  print_header(rec, path, out);
  fmt::print(out, "{:<6} {:<28} {:>9} {:>11} {:>11} {:>11} {:>11} {:>11} {:>10} {:>7}\n",
             "layer", "name", "count", "total", "mean", "p50", "p99", "max", "bytes", "errors");
  for (const auto& o : ops)
    fmt::print(out, "{:<6} {:<28} {:>9} {:>11} {:>11} {:>11} {:>11} {:>11} {:>10} {:>7}\n",
               o.layer, o.name, o.count, human_ns(double(o.total_ns)), human_ns(o.mean_ns),
               human_ns(double(o.p50_ns)), human_ns(double(o.p99_ns)),
               human_ns(double(o.max_ns)), human_bytes(o.bytes), o.errors);
  if (ops.empty()) fmt::print(out, "(no calls recorded)\n");
  if (!kernels.empty()) {
    fmt::print(out, "\ntop kernels by launches:\n{:>9}  {:>11}  {}\n", "launches", "launch time",
               "kernel");
    for (const auto& k : kernels)
      fmt::print(out, "{:>9}  {:>11}  {}\n", k.launches, human_ns(double(k.total_ns)), k.kernel);
  }
  print_gpu_time(gpu_time_summary(rec, 15), out);
  print_metric_table(host_metric_stats(rec), "host (per sampling interval with activity)", out);
  print_metric_table(gpu_metric_stats(rec), "gpu (per NVML sample)", out);
  auto xids = gpu_xids(rec);
  if (!xids.empty()) {
    fmt::print(out, "\nGPU XID errors (see NVIDIA's XID table):\n");
    int64_t t0 = rec.meta_ns("start_monotonic_ns");
    for (const auto& x : xids)
      fmt::print(out, "  +{:.3f} s  GPU {}  XID {}\n", (double(x.ts_ns) - double(t0)) / 1e9, x.gpu,
                 x.xid);
  }
  print_collectives(Collectives(rec), out);
  CpuProfile cpu(rec);
  print_cpu_profile(cpu, out);
  print_cpu_profile(CpuProfile(rec, ProfileKind::OffCpu), out, 15, &cpu);
  if (std::string gaps = rec.meta_or("gpu_unavailable_metrics", ""); !gaps.empty())
    fmt::print(out, "\n{}\n", gaps);
  if (std::string gaps = rec.meta_or("host_unavailable_metrics", ""); !gaps.empty())
    fmt::print(out, "\nHost metrics not recorded:\n{}\n", gaps);
  print_anomalies(rec, out);
}

void print_summary(const std::string& path, FILE* out) {
  try {
    RecordingReader rec(path);
    auto ops = operation_stats(rec);
    uint64_t total = 0;
    for (const auto& o : ops) total += o.count;
    fmt::print(out, "eacgm: {} calls recorded ({} dropped)\n", total,
               rec.meta_or("dropped_events", "0"));
    for (size_t i = 0; i < ops.size() && i < 10; ++i)
      fmt::print(out, "  {:<6} {:<28} {:>8} calls  mean {:>10}  total {:>10}\n", ops[i].layer,
                 ops[i].name, ops[i].count, human_ns(ops[i].mean_ns),
                 human_ns(double(ops[i].total_ns)));
    auto kernels = top_kernels(rec, 5);
    for (const auto& k : kernels)
      fmt::print(out, "  kernel {} launched {} times\n", k.kernel, k.launches);
    if (CpuProfile profile(rec); !profile.empty()) {
      auto functions = profile.functions();
      double n = double(profile.samples().size());
      std::string top;
      for (size_t i = 0; i < functions.size() && i < 3; ++i) {
        const auto& f = functions[i];
        std::string name = f.name;
        if (name.size() > 60) name = name.substr(0, 57) + "...";
        // a function without a symbol is only an address: its file says what it is
        if (!f.python && !f.where.empty() && unnamed_native(f.name)) name += " in " + f.where;
        top += fmt::format("{}{} {:.0f}%", i ? ", " : "", name, 100.0 * double(f.self) / n);
      }
      fmt::print(out, "  CPU profile: {} samples; most time in {} (eacgm report; export --pprof)\n",
                 profile.samples().size(), top);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "eacgm: cannot summarise {}: {}\n", path, e.what());
  }
}

}  // namespace eacgm
