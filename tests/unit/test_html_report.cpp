// The data behind `eacgm report --html`: series cut to two points per column that keep every
// extreme, anomalies where the recording has them, and what a recording lacks said in notes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "report/html_report.h"
#include "store/anomalies.h"
#include "store/reader.h"
#include "store/recording.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr uint64_t kStart = 5'000'000'000'000, ms = 1'000'000, us = 1'000;

std::string temp_path(const char* what) {
  return (fs::temp_directory_path() /
          (std::string("eacgm_html_") + what + "_" + std::to_string(getpid()) + ".eacgm.db"))
      .string();
}

bool notes_say(const json& data, const std::string& text) {
  for (const auto& n : data.at("notes"))
    if (n.get<std::string>().find(text) != std::string::npos) return true;
  return false;
}

TEST(HtmlReport, ManyCallsAreCutToTwoPointsPerColumnKeepingEveryExtreme) {
  std::string path = temp_path("calls");
  constexpr int kCalls = 200'000;
  const uint64_t spike_ts = kStart + 7'777 * 50 * us;
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(kStart));
    w.set_meta("end_monotonic_ns", std::to_string(kStart + kCalls * 50 * us));
    for (int i = 0; i < kCalls; ++i) {
      CudaCallRow c;
      c.ts_ns = kStart + uint64_t(i) * 50 * us;
      c.dur_ns = 10 * us + uint64_t(i % 7) * 100;  // 10.0-10.6 us
      if (c.ts_ns == spike_ts) c.dur_ns = 50 * ms;
      if (i == 123'456) c.dur_ns = 1 * us;
      c.pid = c.tid = 10;
      c.name = i % 10 == 0 ? "cudaMemcpy" : "cudaLaunchKernel";
      w.add(c);
    }
    w.flush();
  }
  AnomalyRow a;
  a.ts_ns = spike_ts;
  a.dur_ns = 50 * ms;
  a.layer = "cuda";
  a.name = "cudaLaunchKernel";
  a.score = -40, a.threshold = -12;
  a.cause = "slow cuda call: cudaLaunchKernel";
  a.features = R"([["log_duration_us", -25.5]])";
  AnomalyRow window = a;
  window.layer = window.name = "window";
  window.ts_ns = kStart + 3000 * ms;
  window.dur_ns = 100 * ms;
  window.cause = "CPU interference";
  write_anomalies(path, {a, window}, {{"detect_trained_on", "the first half"}});

  RecordingReader rec(path);
  HtmlReportOptions opt;
  opt.columns = 100;
  json d = html_report_data(rec, opt);
  ASSERT_EQ(d.at("layers").size(), 1u);
  const json& cuda = d.at("layers").at(0);
  EXPECT_EQ(cuda.at("layer"), "cuda");
  ASSERT_EQ(cuda.at("series").size(), 2u);
  const json& launches = cuda.at("series").at(0);  // the most total time first
  EXPECT_EQ(launches.at("name"), "cudaLaunchKernel");
  EXPECT_EQ(launches.at("calls"), kCalls - kCalls / 10);
  const json& points = launches.at("points");
  EXPECT_LE(points.size(), 2 * opt.columns);
  EXPECT_GE(points.size(), opt.columns);
  // the spike and the fastest call are kept, at their times; the points are in time order
  bool spike = false, fastest = false;
  double last_t = -1;
  for (const auto& p : points) {
    double t = p.at(0).get<double>(), v = p.at(1).get<double>();
    EXPECT_GE(t, last_t);
    last_t = t;
    spike |= v == 50'000 && std::abs(t - double(spike_ts - kStart) / 1e9) < 1e-6;
    fastest |= v == 1 && std::abs(t - 123'456 * 50e-6) < 1e-6;
  }
  EXPECT_TRUE(spike);
  EXPECT_TRUE(fastest);
  // the distribution counts every call
  uint64_t counted = 0;
  for (const auto& h : cuda.at("histograms"))
    for (const auto& c : h.at("counts")) counted += c.get<uint64_t>();
  EXPECT_EQ(counted, uint64_t(kCalls));
  EXPECT_EQ(cuda.at("histogram_edges_us").size(),
            cuda.at("histograms").at(0).at("counts").size() + 1);
  // the call anomaly on the layer's chart, the window one on the time line; both in the table
  ASSERT_EQ(d.at("anomalies").size(), 2u);
  ASSERT_EQ(cuda.at("anomalies").size(), 1u);
  size_t row = cuda.at("anomalies").at(0).at(2).get<size_t>();
  EXPECT_EQ(d.at("anomalies").at(row).at("cause"), "slow cuda call: cudaLaunchKernel");
  EXPECT_EQ(d.at("anomalies").at(row).at("chart"), "layer-cuda");
  EXPECT_DOUBLE_EQ(d.at("anomalies").at(row).at("t").get<double>(), 0.38885);
  EXPECT_EQ(d.at("anomalies").at(row).at("features"), "log_duration_us=-25.5");
  EXPECT_EQ(d.at("anomalies").at(1 - row).at("chart"), "timeline");
  EXPECT_TRUE(d.at("detected").get<bool>());
  EXPECT_TRUE(notes_say(d, "GPU: no NVML samples"));
  fs::remove(path);
}

TEST(HtmlReport, WhatARecordingLacksIsSaidAndNullMetricsAreLeftOut) {
  std::string path = temp_path("empty");
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(kStart));
    for (int i = 0; i < 50; ++i) {
      GpuSample s;
      s.ts_ns = kStart + uint64_t(i) * 100 * ms;
      s.gpu = 0;
      if (i % 2) s.sm_util_pct = uint32_t(i);  // utilization every other sample, power never
      w.add(s);
    }
    w.flush();
  }
  RecordingReader rec(path);
  json d = html_report_data(rec, {});
  EXPECT_TRUE(d.at("layers").empty());
  EXPECT_FALSE(d.at("detected").get<bool>());
  EXPECT_TRUE(d.at("anomalies").empty());
  EXPECT_TRUE(notes_say(d, "eacgm detect has not run"));
  EXPECT_TRUE(notes_say(d, "calls: none recorded"));
  EXPECT_TRUE(notes_say(d, "collectives: none recorded"));
  ASSERT_TRUE(d.at("gpu").is_object());
  const json& charts = d.at("gpu").at("charts");
  ASSERT_EQ(charts.size(), 1u) << charts.dump();
  EXPECT_EQ(charts.at(0).at("id"), "gpu_util");
  EXPECT_EQ(charts.at(0).at("series").at(0).at("points").size(), 25u);
  fs::remove(path);
}

// A damaged value in a cell (NaN, an absurd time) is drawn as nothing, not as a page that breaks.
TEST(HtmlReport, NonFiniteAndAbsurdValuesDoNotBreakThePage) {
  std::string path = temp_path("damaged");
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(kStart));
    CudaCallRow c;
    c.ts_ns = kStart + ms;
    c.dur_ns = us;
    c.pid = c.tid = 1;
    c.name = "cudaMalloc";
    w.add(c);
    c.ts_ns = uint64_t(1) << 62;  // far beyond the rest
    w.add(c);
    w.flush();
  }
  AnomalyRow a;
  a.ts_ns = kStart + ms;
  a.dur_ns = us;
  a.layer = "cuda";
  a.name = "cudaMalloc";
  a.score = std::nan(""), a.threshold = -INFINITY;
  a.cause = "slow cuda call: cudaMalloc";
  a.features = "not json <script>";
  write_anomalies(path, {a}, {{"detect_trained_on", "x"}});
  RecordingReader rec(path);
  json d = html_report_data(rec, {});
  std::string text = d.dump();
  EXPECT_TRUE(d.at("anomalies").at(0).at("score").is_null());
  EXPECT_TRUE(d.at("anomalies").at(0).at("threshold").is_null());
  EXPECT_EQ(d.at("anomalies").at(0).at("features"), "not json <script>");
  EXPECT_EQ(d.at("layers").at(0).at("series").at(0).at("points").size(), 2u);
  fs::remove(path);
}

}  // namespace
}  // namespace eacgm
