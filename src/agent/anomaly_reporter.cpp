// The agent's anomaly reporter (agent/anomaly_reporter.h).
#include "agent/anomaly_reporter.h"

#include <fmt/format.h>

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "gpu/gpu_samples.h"  // monotonic_now_ns

namespace eacgm {
namespace {

std::string utc_time(uint64_t realtime_ns) {
  time_t secs = time_t(realtime_ns / 1'000'000'000);
  tm t{};
  gmtime_r(&secs, &t);
  char buf[40];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &t);
  return fmt::format("{}.{:03}Z", buf, realtime_ns / 1'000'000 % 1000);
}

std::string ms_text(uint64_t ns) {
  double ms = double(ns) / 1e6;
  return ms >= 100 ? fmt::format("{:.0f} ms", ms) : fmt::format("{:.2g} ms", ms);
}

}  // namespace

std::string unusual_text(const detect::Anomaly& a) {
  std::string out;
  if (a.usual_us > 0)
    out = fmt::format("{:.3g}x its usual {}", double(a.dur_ns) / 1e3 / a.usual_us,
                      ms_text(uint64_t(a.usual_us * 1e3)));
  if (a.late_share > 0) {
    double usual_us = a.measured.empty() ? 0 : a.measured.front().usual;
    return fmt::format("{} late joins of that rank in {:.3g} s, its peers waiting for it {:.0f}% of "
                       "that time; a join is usually {} late in this job (judged against its own "
                       "collectives: no model judges these calls yet)",
                       a.burst, double(a.burst_window_ns) / 1e9, 100 * a.late_share,
                       ms_text(uint64_t(usual_us * 1e3)));
  }
  if (a.burst > 0 && !a.burst_of.empty())
    out += fmt::format("{}with its process's burst of slow {} ({} in {:.3g} s where {:.2g} are "
                       "usual)", out.empty() ? "" : "; ", a.burst_of, a.burst,
                       double(a.burst_window_ns) / 1e9, a.burst_expected);
  else if (a.burst > 0)
    out += fmt::format("{}{} such calls in {:.3g} s where {:.2g} are usual", out.empty() ? "" : "; ",
                       a.burst, double(a.burst_window_ns) / 1e9, a.burst_expected);
  else if (a.burst_window_ns == 0 && !out.empty())
    out += ", far slower than any call of its history";
  if (out.empty()) out = fmt::format("score {:.1f} below {:.1f}", a.score, a.threshold);
  return out;
}

void AnomalyReporter::operator()(std::vector<AgentAnomaly>& found) {
  std::vector<StoredAnomaly> rows;
  uint64_t now = monotonic_now_ns();
  // One flight recording for the anomalies of a while (a sixth of the held past after the
  // first, so that the recording shows what followed too), at most one every 5 minutes.
  if (now >= dump_due_ + 300'000'000'000ull || dump_due_ == 0) {
    uint64_t after = flight_ns_ / 6;
    dump_path_ = flight_.request("anomaly", after);
    dump_due_ = now + after;
  }
  std::string recording = now <= dump_due_ ? dump_path_ : std::string();
  for (const AgentAnomaly& f : found) {
    const detect::Anomaly& a = f.anomaly;
    const std::string& process = f.process;
    std::string kind = detect::cause_kind(a.cause);
    metrics_.count_anomaly(a.layer, kind);
    uint64_t real = uint64_t(int64_t(a.ts_ns) + to_real_);
    // (an episode's one anomaly has a line of its own, not taken by its kind's others)
    const bool folded = f.folded_calls + f.folded_windows > 0;
    Limit& limit = limits_[a.layer + "\t" + kind + (folded ? "\tfolded" : "")];
    if (limit.last == 0 || now - limit.last >= 10'000'000'000ull) {
      std::string what =
          folded
              ? fmt::format("{}, in {}, from {}", a.cause, process, utc_time(real))
          : a.layer == "window"
              // (its kind, where and when, then what the cause adds: "CPU interference in P,
              // 1 s window at T; mostly behind cc1plus (pid 4242): ...")
              ? fmt::format("{} in {}, {} s window at {}{}", kind,
                            process.empty() ? "the traced processes" : process,
                            double(a.dur_ns) / 1e9, utc_time(real),
                            std::string_view(a.cause).substr(std::min(kind.size(), a.cause.size())))
              : fmt::format("{}, {}, in {} (pid {}) at {}", a.cause, ms_text(a.dur_ns),
                            process.empty() ? "?" : process, a.pid, utc_time(real));
      std::string how;
      if (folded) {
        how = fmt::format("one anomaly for the {} it brought", f.folded_calls + f.folded_windows);
      } else if (a.layer == "window") {
        how = detect::describe_measured(a);
      } else {
        how = unusual_text(a);
      }
      std::string more =
          limit.suppressed ? fmt::format("; {} more like it since the last line", limit.suppressed)
                           : "";
      std::string where = recording.empty() ? "" : fmt::format("; flight recording {}", recording);
      fprintf(stderr, "eacgm: anomaly: %s; %s%s%s\n", what.c_str(), how.c_str(), more.c_str(),
              where.c_str());
      limit.last = now;
      limit.suppressed = 0;
    } else {
      ++limit.suppressed;
    }
    if (!store_) continue;  // (every one: the store keeps the newest million)
    StoredAnomaly r;
    r.ts_ns = a.ts_ns;
    r.time_ns = real;
    r.dur_ns = a.dur_ns;
    r.layer = a.layer;
    r.name = a.name;
    r.pid = a.pid;
    r.process = process;
    r.score = a.score;
    r.threshold = a.threshold;
    r.cause = a.cause;
    r.features = detect::features_column(a);
    r.recording = recording;
    r.found_ns = now;
    rows.push_back(std::move(r));
  }
  if (store_)
    if (std::string e = store_->add(rows); !e.empty() && e != last_error_) {
      fprintf(stderr, "eacgm: agent: could not store anomalies in %s: %s\n", store_->path().c_str(),
              e.c_str());
      last_error_ = e;
    }
}

}  // namespace eacgm
