// The data behind `eacgm report --html`: series cut to two points per column that keep every
// extreme, anomalies where the recording has them, and what a recording lacks said in notes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sqlite3.h>

#include <filesystem>
#include <map>

#include "report/html_report.h"
#include "store/anomalies.h"
#include "store/reader.h"
#include "store/recording.h"
#include "store/sqlite_util.h"

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
  AnomalyRow inf = a;  // a score that is not finite, but a score: judged by a model
  inf.score = -INFINITY, inf.threshold = -12;
  inf.ts_ns += 1000;
  write_anomalies(path, {a, inf}, {{"detect_trained_on", "x"}});
  RecordingReader rec(path);
  json d = html_report_data(rec, {});
  std::string text = d.dump();
  EXPECT_TRUE(d.at("anomalies").at(0).at("score").is_null());
  EXPECT_TRUE(d.at("anomalies").at(0).at("threshold").is_null());
  EXPECT_FALSE(d.at("anomalies").at(0).at("scored"));  // NaN: no model scored it
  EXPECT_TRUE(d.at("anomalies").at(1).at("score").is_null());
  EXPECT_TRUE(d.at("anomalies").at(1).at("scored"));
  EXPECT_EQ(d.at("anomalies").at(0).at("features"), "not json <script>");
  EXPECT_EQ(d.at("layers").at(0).at("series").at(0).at("points").size(), 2u);
  fs::remove(path);
}

// Two communicators of two ranks with one collective name: one heat map each, named as the text
// report names them; in a merged recording each row says the rank's host.
TEST(HtmlReport, EachCommunicatorHasItsHeatMapAndMergedRanksTheirHosts) {
  std::string path = temp_path("comms");
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(kStart));
    w.set_meta("end_monotonic_ns", std::to_string(kStart + 100 * ms));
    auto call = [&](uint32_t pid, uint64_t comm, uint64_t id, int rank, uint64_t ts) {
      CommCallRow c;
      c.ts_ns = kStart + ts;
      c.dur_ns = 10 * us;
      c.pid = c.tid = pid;
      c.name = "ncclAllReduce";
      c.comm = comm;
      c.comm_id = id;
      c.rank = rank;
      c.nranks = 2;
      c.bytes = 1 << 20;
      w.add(c);
    };
    for (int i = 0; i < 5; ++i) {
      uint64_t t = 10 * ms * uint64_t(i);
      call(100, 0xa0, 0x111111ULL, 0, t);
      call(101, 0xa8, 0x111111ULL, 1, t + 3 * ms);  // rank 1 of A joins 3 ms late
      call(100, 0xb0, 0x222222ULL, 0, t + 5 * ms + 1 * ms);  // rank 0 of B 1 ms late
      call(102, 0xb8, 0x222222ULL, 1, t + 5 * ms);
    }
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(exec_sql(db, "INSERT INTO processes(pid, host) VALUES (100, 'node-a'), (101, "
                         "'node-b'), (102, 'node-b')"),
            "");
  sqlite3_close(db);

  RecordingReader rec(path);
  json d = html_report_data(rec, HtmlReportOptions{});
  const json& maps = d.at("collectives").at("heatmaps");
  ASSERT_EQ(maps.size(), 2u) << maps.dump();
  EXPECT_EQ(maps[0].at("name"), "ncclAllReduce [comm 111111]");
  EXPECT_EQ(maps[1].at("name"), "ncclAllReduce [comm 222222]");
  for (const json& m : maps) {
    EXPECT_EQ(m.at("steps"), 5);
    EXPECT_EQ(m.at("ranks"), json({"rank 0 on host node-a", "rank 1 on host node-b"}));
  }
  // A: rank 0 waits 3 ms at every step, rank 1 never; B: rank 1 waits 1 ms
  double a0 = 0, a1 = 0, b0 = 0, b1 = 0;
  for (const json& cell : maps[0].at("cells")) (cell[1] == 0 ? a0 : a1) += cell[2].get<double>();
  for (const json& cell : maps[1].at("cells")) (cell[1] == 0 ? b0 : b1) += cell[2].get<double>();
  EXPECT_DOUBLE_EQ(a0, 15.0);
  EXPECT_DOUBLE_EQ(a1, 0.0);
  EXPECT_DOUBLE_EQ(b0, 0.0);
  EXPECT_DOUBLE_EQ(b1, 5.0);
  EXPECT_EQ(maps[0].at("ranks_detail")[1].at("joined_last"), 5);
  EXPECT_EQ(maps[0].at("ranks_detail")[1].at("label"), "rank 1 on host node-b");
  fs::remove(path);
}

// Top kernels come with the Python stack most of their launches were made from (lookups that
// carry the kernel's name are no launches).
TEST(HtmlReport, KernelsAreListedWithTheirUsualPythonStack) {
  std::string path = temp_path("kernels");
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(kStart));
    auto frame = [&](int64_t id, uint32_t depth, const char* name, int64_t line) {
      PythonStackFrameRow f;
      f.id = id, f.depth = depth, f.name = name, f.file = "train.py", f.line = line;
      w.add(f);
    };
    frame(1, 0, "forward", 10), frame(1, 1, "step", 40);
    frame(2, 0, "warmup", 5);
    for (int i = 0; i < 10; ++i) {
      CudaCallRow c;
      c.ts_ns = kStart + uint64_t(i) * ms;
      c.dur_ns = 5 * us;
      c.pid = c.tid = 7;
      c.name = "cudaLaunchKernel";
      c.is_launch = true;
      c.grid[0] = c.grid[1] = c.grid[2] = 1;
      c.kernel = "gemm_kernel";
      c.py_stack = i < 7 ? 1 : 2;
      w.add(c);
    }
    for (int i = 0; i < 20; ++i) {  // lookups of that name from elsewhere: not launches
      CudaCallRow c;
      c.ts_ns = kStart + 20 * ms + uint64_t(i) * us;
      c.dur_ns = us;
      c.pid = c.tid = 7;
      c.name = "cuModuleGetFunction";
      c.kernel = "gemm_kernel";
      c.py_stack = 2;
      w.add(c);
    }
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  json d = html_report_data(rec, {});
  const json& kernels = d.at("top").at("kernels");
  ASSERT_EQ(kernels.size(), 1u) << kernels.dump();
  EXPECT_EQ(kernels[0].at("kernel"), "gemm_kernel");
  EXPECT_EQ(kernels[0].at("launches"), 10);
  EXPECT_EQ(kernels[0].at("stack"), json({"forward (train.py:10)", "step (train.py:40)"}));
  fs::remove(path);
}

// The CPU profile on the page: top functions and the flame graph's tree, whose every node holds
// the samples of the stacks through it.
TEST(HtmlReport, TheProfileIsATreeOfSamplesFromTheOutermostFrame) {
  std::string path = temp_path("profile");
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(kStart));
    w.set_meta("sample_hz", "99");
    w.add(PythonStackFrameRow{1, 0, "m.a", "m.py", 3});
    w.add(PythonStackFrameRow{1, 1, "m.main", "m.py", 9});
    w.add(PythonStackFrameRow{2, 0, "m.b", "m.py", 5});
    w.add(PythonStackFrameRow{2, 1, "m.main", "m.py", 10});
    w.add(NativeFrameRow{1, 0, "spin", "libx.so"});
    for (int i = 0; i < 6; ++i) w.add(StackSampleRow{kStart + uint64_t(i), 7, 7, 0, 1});
    for (int i = 0; i < 3; ++i) w.add(StackSampleRow{kStart + 10 + uint64_t(i), 7, 7, 1, 2});
    w.add(StackSampleRow{kStart + 20, 7, 8, 1, 0});  // a thread without Python
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  json d = html_report_data(rec, {});
  const json& p = d.at("profile");
  EXPECT_EQ(p.at("samples"), 10);
  EXPECT_EQ(p.at("threads"), 2);
  EXPECT_EQ(p.at("hz"), 99);
  const json& tree = p.at("tree");
  EXPECT_EQ(tree.at("v"), 10);
  std::map<std::string, json> top;
  for (const auto& c : tree.at("c")) top[c.at("n")] = c;
  ASSERT_EQ(top.size(), 2u) << tree.dump();
  EXPECT_EQ(top.at("m.main").at("v"), 9);
  EXPECT_EQ(top.at("m.main").at("p"), true);
  EXPECT_EQ(top.at("spin").at("v"), 1);
  EXPECT_EQ(top.at("spin").at("w"), "libx.so");
  std::map<std::string, int> under_main;
  for (const auto& c : top.at("m.main").at("c")) under_main[c.at("n")] = c.at("v");
  EXPECT_EQ(under_main, (std::map<std::string, int>{{"m.a", 6}, {"m.b", 3}}));
  // spin under m.b: the native frame innermost
  EXPECT_EQ(top.at("m.main").at("c").at(1).at("c").at(0).at("n"), "spin");
  EXPECT_EQ(p.at("functions").at(0).at("name"), "m.a");
  EXPECT_EQ(p.at("functions").at(0).at("self_pct"), 60.0);
  // by thread: the Python thread's 9 samples, mostly in m.a; the other's one, in spin
  const json& bt = p.at("by_thread");
  ASSERT_EQ(bt.size(), 2u);
  EXPECT_EQ(bt.at(0).at("tid"), 7);
  EXPECT_EQ(bt.at(0).at("weight"), 9);
  EXPECT_EQ(bt.at(0).at("pct"), 90.0);
  EXPECT_EQ(bt.at(0).at("python"), "m.a");
  EXPECT_EQ(bt.at(1).at("native"), "spin");
  fs::remove(path);
}

// The GPU time line's buckets: concurrent kernels of one stream are its busy time once (and
// their GPU time twice), an execution across buckets fills each, launch records are no
// executions, and only the busiest streams get a lane (a note says how many).
TEST(HtmlReport, GpuTimelineBucketsCountOverlapsOnceAndLeaveLaunchesOut) {
  std::string path = temp_path("gputime");
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(kStart));
    w.set_meta("end_monotonic_ns", std::to_string(kStart + 10 * ms));
    auto add = [&](const char* kind, uint32_t stream, uint64_t at, uint64_t dur) {
      GpuActivityRow r;
      r.ts_ns = kStart + at, r.dur_ns = dur, r.pid = 5, r.kind = kind, r.name = "k";
      r.stream = stream;
      w.add(r);
    };
    add("kernel", 1, 1 * ms, 2 * ms);    // 1-3 ms
    add("kernel", 1, 2 * ms, 500 * us);  // 2-2.5 ms: within the first
    add("launch", 1, 4 * ms, 1 * ms);    // no execution
    add("memset", 1, 9 * ms, 1 * ms);    // 9-10 ms
    add("kernel", 2, 5 * ms, 1 * ms);    // stream 2, less time
    w.flush();
  }
  RecordingReader rec(path);
  HtmlReportOptions opt;
  opt.gpu_time.buckets = 10;
  opt.gpu_time.lanes = 1;
  json d = html_report_data(rec, opt);
  const json& g = d.at("gpu_time");
  ASSERT_TRUE(g.is_object()) << d.at("notes").dump();
  EXPECT_EQ(g.at("executions"), 4);
  ASSERT_EQ(g.at("lanes").size(), 1u);
  EXPECT_EQ(g.at("lanes").at(0).at("label"), "GPU 0 stream 1");
  std::map<int, double> busy;
  for (const auto& c : g.at("lanes").at(0).at("cells")) busy[c.at(0).get<int>()] = c.at(1);
  EXPECT_EQ(busy, (std::map<int, double>{{1, 1000}, {2, 1000}, {9, 1000}}));
  EXPECT_EQ(g.at("busy").at(0).at("values"), json({0, 100, 100, 0, 0, 100, 0, 0, 0, 100}));
  // the GPU time of the kernel "k": each execution's (3.5 ms)
  std::map<std::string, double> gpu_ms;
  for (const auto& k : g.at("kernels")) gpu_ms[k.at("name")] = k.at("gpu_ms");
  EXPECT_EQ(gpu_ms, (std::map<std::string, double>{{"k", 3.5}, {"copies and memsets", 1}}));
  EXPECT_TRUE(notes_say(d, "GPU time: 1 of 2 streams drawn"));
  fs::remove(path);
}

// Duty-cycled GPU time: busy is a share of the time collected in each bucket, and a bucket
// nothing was collected in is a gap (null), not an idle GPU.
TEST(HtmlReport, ADutyCycledGpuIsBusyOverWhatWasCollected) {
  std::string path = temp_path("gpuduty");
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(kStart));
    w.set_meta("end_monotonic_ns", std::to_string(kStart + 10 * ms));
    w.add(GpuSliceRow{kStart, 2 * ms, 5});
    w.add(GpuSliceRow{kStart + 5 * ms, 1500 * us, 5});  // half of bucket 6
    GpuActivityRow r;
    r.ts_ns = kStart + 500 * us, r.dur_ns = 500 * us, r.pid = 5, r.kind = "kernel", r.name = "k";
    w.add(r);  // half of bucket 0
    r.ts_ns = kStart + 6 * ms, r.dur_ns = 250 * us;
    w.add(r);  // half of what was collected in bucket 6
    r.ts_ns = kStart + 9 * ms, r.dur_ns = 1 * ms;
    w.add(r);  // (a kernel 10 ms in: the time line's end)
    w.flush();
  }
  RecordingReader rec(path);
  HtmlReportOptions opt;
  opt.gpu_time.buckets = 10;
  json d = html_report_data(rec, opt);
  const json& g = d.at("gpu_time");
  ASSERT_TRUE(g.is_object()) << d.at("notes").dump();
  EXPECT_EQ(g.at("busy").at(0).at("values"),
            json({50, 0, nullptr, nullptr, nullptr, 0, 50, nullptr, nullptr, nullptr}));
  EXPECT_TRUE(notes_say(d, "GPU time: duty-cycled (EACGM_GPUTIME_DUTY), collected in 2 slices"));
  fs::remove(path);
}

}  // namespace
}  // namespace eacgm
