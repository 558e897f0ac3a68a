// End to end: `eacgm report --html` on real recordings, drawn by headless Chromium. The page
// checks itself after drawing (marks inside each chart's plot, a red cross at each anomaly's
// place as the anomalies table gives it, JavaScript errors) into #eacgm-selfcheck; the tests read
// that, the page's data and its tables from the DOM Chromium dumps, compare them with the
// recording, and keep a screenshot under build/test-artifacts/html/.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "chromium.h"
#include "e2e_util.h"
#include "store/recording.h"
#include "store/rows.h"

namespace e2e {
namespace {

class ReportHtml : public RecordingTest {
 protected:
  void SetUp() override {
    RecordingTest::SetUp();
    if (IsSkipped()) return;
    if (std::string why = chromium_missing(); !why.empty()) GTEST_SKIP() << why;
  }
};

// A CUDA run with injected slow launches, after detect: the latency chart, its distribution and
// the anomalies' time line are drawn, each slow launch is a red cross where the table puts it,
// and the table has a row per anomaly of the recording.
TEST_F(ReportHtml, CudaRunShowsEachAnomalyAsARedCrossWhereTheTableSays) {
  E2E_REQUIRE_CUDA();
  auto r = run(
      {kEacgm, "record", "-q", "-o", db_, "--", kWorkloads + "/cuda_slow_launches", "4000", "250"},
      {"LD_LIBRARY_PATH=" + kWorkloads + "/fakecuda"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(run({kEacgm, "detect", db_, "--layers", "cuda"}).exit_code, 0);
  int64_t anomalies = Db(db_).scalar("SELECT count(*) FROM anomalies");
  ASSERT_GE(anomalies, 6);
  std::string page = dir_ + "/report.html";
  auto w = run({kEacgm, "report", db_, "--html", page});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_NE(w.err.find(page), std::string::npos) << "it says where the page is: " << w.err;
  // self-contained: nothing the page would fetch
  std::ifstream in(page);
  std::string html((std::istreambuf_iterator<char>(in)), {});
  for (const char* ref : {"src=\"http", "href=\"http", "<link ", "src=\"//"})
    EXPECT_EQ(html.find(ref), std::string::npos) << ref;
  EXPECT_EQ((std::filesystem::status(page).permissions() & std::filesystem::perms::others_write),
            std::filesystem::perms::none);

  Rendered p = render(page, "cuda_slow_launches");
  expect_drawn(p, {"layer-cuda", "hist-cuda", "timeline"});
  // every anomaly in the table, and each checked as a red cross (on the layer's chart and on
  // the time line)
  int64_t on_calls = Db(db_).scalar("SELECT count(*) FROM anomalies WHERE layer = 'cuda'");
  EXPECT_EQ(p.check.at("anomalies").at("checked").get<int64_t>(), anomalies + on_calls);
  ASSERT_TRUE(p.data.is_object());
  EXPECT_EQ(int64_t(p.data.at("anomalies").size()), anomalies);
  size_t table = p.dom.find("id=\"anomaly-table\"");
  ASSERT_NE(table, std::string::npos);
  EXPECT_EQ(int64_t(count_of(p.dom.substr(table, p.dom.find("</table>", table) - table),
                             "<tr class=\"link\"")),
            anomalies);
  // the table's times are the recording's, from its start
  int64_t t0 = std::stoll(Db(db_).text("SELECT value FROM meta WHERE key = 'start_monotonic_ns'"));
  int64_t first = Db(db_).scalar("SELECT min(ts_ns) FROM anomalies");
  EXPECT_NEAR(p.data.at("anomalies").at(0).at("t").get<double>(), double(first - t0) / 1e9, 1e-5);
  EXPECT_EQ(p.data.at("anomalies").at(0).at("cause"), "slow cuda call: cuLaunchKernel");
  // what the recording lacks is said, not drawn empty
  EXPECT_NE(p.dom.find("GPU: no NVML samples"), std::string::npos);
  EXPECT_NE(p.dom.find("No collectives in this recording"), std::string::npos);
}

// A two-rank Gloo job whose rank 1 arrives 10 ms late at many steps, recorded with the default
// layers and analysed with plain detect: the heat map of waits, the per-rank straggling bars and
// the host charts are drawn, and the page's data puts the straggling on rank 1.
TEST_F(ReportHtml, GlooStragglerIsTheRankThatKeptTheOthersWaiting) {
  if (run({"/usr/bin/python3", "-c", "import torch"}).exit_code != 0)
    GTEST_SKIP() << "python3-torch is not installed (scripts/setup.sh installs it)";
  const std::string w = EACGM_WORKLOAD_SOURCES;
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--", "/usr/bin/python3", w + "/launch_ranks.py",
                "2", std::string(EACGM_SOURCE_DIR) + "/eval/workloads/gloo_straggler.py", "300",
                dir_ + "/truth.json", "0.5", "0.9", "0.7", "10"},
               {}, 100);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto d = run({kEacgm, "detect", db_});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  std::string page = dir_ + "/report.html";
  ASSERT_EQ(run({kEacgm, "report", db_, "--html", page}).exit_code, 0);
  Rendered p = render(page, "gloo_straggler");
  expect_drawn(p, {"layer-comm", "heat-0", "straggle-0", "host_cpu", "timeline"});
  ASSERT_TRUE(p.data.is_object());
  const auto& heat = p.data.at("collectives").at("heatmaps").at(0);
  EXPECT_EQ(heat.at("name"), "gloo:all_reduce");
  double straggled[2] = {0, 0};
  for (const auto& rank : heat.at("ranks_detail"))
    straggled[rank.at("rank").get<int>()] = rank.at("straggled_ms").get<double>();
  auto truth = nlohmann::json::parse(std::ifstream(dir_ + "/truth.json"));
  double slept_ms = 0;
  for (const auto& i : truth.at("intervals"))
    slept_ms += double(i.at(1).get<int64_t>() - i.at(0).get<int64_t>()) / 1e6;
  printf("rank 1 slept %.1f ms in all; straggled: rank 0 %.1f ms, rank 1 %.1f ms\n", slept_ms,
         straggled[0], straggled[1]);
  EXPECT_GT(straggled[1], 0.5 * slept_ms);
  EXPECT_GT(straggled[1], 5 * straggled[0]);
  EXPECT_GT(count_of(p.dom, "straggling rank: gloo:all_reduce"), 0u) << "the causes are listed";
}

// The GPU layer's metrics (from the fake NVML the GPU tests use: utilization that changes,
// memory, power, temperature, clocks, throttle reasons, PCIe) are each a chart with marks, under
// the GPU's name.
TEST_F(ReportHtml, GpuMetricsAreDrawnPerGpu) {
  // a traced process that NVML says uses the GPU, beside one that is not traced (pid 1)
  Process target({kWorkloads + "/sched_probe", "0", "3000"});
  std::string pid = std::to_string(target.pid());
  std::ofstream(dir_ + "/nvml.script")
      << "devices 1\nname 0 Fake H100\n"
         "procs 0 " + pid + ":536870912,1:4096\n"
         "proc_util 0 " + pid + ":71:12:0:0,1:99:99:0:0\n"
         "utilization 0 10:20 30:40 55:66 80:10 95:50 20:20\n"
         "memory 0 1073741824:85899345920\ntemperature 0 61\n"
         "power_instant 0 250500\npower 0 1\npower_limit 0 700000\n"
         "clock_sm 0 1980\nclock_mem 0 2619\n"
         "pcie_tx_count 0 *3\npcie_rx_count 0 *2\npcie_tx 0 1\n"
         "clocks_event 0 0 68\n";
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--layers", "gpu,host", "--interval", "20",
                "--nvml-library", std::string(EACGM_FAKE_NVML_DIR) + "/full/libnvidia-ml.so.1",
                "--duration", "0.8", "-p", pid},
               {"EACGM_FAKE_NVML_SCRIPT=" + dir_ + "/nvml.script"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_GT(Db(db_).scalar("SELECT count(*) FROM gpu_samples"), 10);
  std::string page = dir_ + "/report.html";
  ASSERT_EQ(run({kEacgm, "report", db_, "--html", page}).exit_code, 0);
  Rendered p = render(page, "gpu_fake_nvml");
  expect_drawn(p, {"gpu_util", "gpu_memory", "gpu_power", "gpu_temperature", "gpu_clocks",
                   "gpu_throttle", "gpu_proc_sm", "gpu_proc_memory", "host_cpu"});
  // per process: the traced one only, with NVML's figures
  for (const auto& c : p.data.at("gpu").at("charts")) {
    if (c.at("id") != "gpu_proc_sm" && c.at("id") != "gpu_proc_memory") continue;
    ASSERT_EQ(c.at("series").size(), 1u) << c.dump();
    EXPECT_EQ(c.at("series").at(0).at("name"), "sched_probe (" + pid + ") on GPU 0");
    std::set<double> values;
    for (const auto& pt : c.at("series").at(0).at("points")) values.insert(pt.at(1).get<double>());
    EXPECT_EQ(values, (std::set<double>{c.at("id") == "gpu_proc_sm" ? 71.0 : 0.5})) << c.dump();
  }
  EXPECT_NE(p.dom.find("GPU 0: Fake H100"), std::string::npos);
  // utilization as NVML gave it: every scripted value is in the chart's data
  std::set<double> sm;
  for (const auto& c : p.data.at("gpu").at("charts"))
    if (c.at("id") == "gpu_util")
      for (const auto& s : c.at("series"))
        if (s.at("name") == "GPU 0 SM")
          for (const auto& pt : s.at("points")) sm.insert(pt.at(1).get<double>());
  EXPECT_EQ(sm, (std::set<double>{10, 30, 55, 80, 95, 20}));
}

// The python layer's calls: their latency chart and distribution, and the functions' table
// with where each is defined and its exact count.
TEST_F(ReportHtml, PythonFunctionsAreDrawnAndListedWithWhereTheyAre) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--layers", "python", "--python-calls", "user",
                "--", "/usr/bin/python3", std::string(EACGM_PY_WORKLOADS) + "/nesting.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // the summary's events count the python layer's calls too
  Db db(db_);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'events'"),
            std::to_string(db.scalar("SELECT count(*) FROM python_calls")));
  std::string page = dir_ + "/report.html";
  ASSERT_EQ(run({kEacgm, "report", db_, "--html", page}).exit_code, 0);
  Rendered p = render(page, "python_nesting");
  expect_drawn(p, {"layer-python", "hist-python"});
  bool found = false;
  for (const auto& row : p.data.at("top").at("python"))
    if (row.at("name") == "nesting.h") {
      found = true;
      EXPECT_EQ(row.at("calls"), 61);
      EXPECT_EQ(row.at("where"), std::string(EACGM_PY_WORKLOADS) + "/nesting.py:5");
    }
  EXPECT_TRUE(found) << p.data.at("top").dump();
  EXPECT_NE(p.dom.find("nesting.py:5"), std::string::npos);
}

// A recording without what most sections draw (no anomalies yet, no GPU, NULL metrics in the
// samples it has) gives a page that says what is missing, without an error; and the page is
// written only where eacgm may write.
TEST_F(ReportHtml, WhatARecordingLacksIsSaidAndBadOutputsAreRefused) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--layers", "host", "--",
                kWorkloads + "/sched_probe", "0", "300"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // a sampled metric the kernel could not give, and a GPU that answered nothing
  {
    sqlite3* db;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "UPDATE host_samples SET runq_wait_ns = NULL, tx_bytes = NULL "
                           "WHERE rowid % 2 = 0;"
                           "INSERT INTO gpu_samples(ts_ns, gpu) SELECT ts_ns, 0 FROM host_samples;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  std::string page = dir_ + "/report.html";
  auto w = run({kEacgm, "report", db_, "--html", page});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  Rendered p = render(page, "no_anomalies_null_metrics");
  expect_drawn(p, {"host_cpu"});
  EXPECT_NE(p.dom.find("eacgm detect has not run on this recording"), std::string::npos);
  EXPECT_NE(p.dom.find("calls: none recorded"), std::string::npos);

  // an existing page is kept without --force; what is not a regular file is never replaced
  auto again = run({kEacgm, "report", db_, "--html", page});
  EXPECT_EQ(again.exit_code, 2) << again.err;
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
  auto dev = run({kEacgm, "report", db_, "--html", "/dev/null", "--force"});
  EXPECT_NE(dev.exit_code, 0);
  EXPECT_NE(dev.err.find("only regular files"), std::string::npos) << dev.err;
  struct stat st;
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  auto both = run({kEacgm, "report", db_, "--html", page, "--json"});
  EXPECT_EQ(both.exit_code, 2) << both.err;
  // an empty name is no page (not the text report instead); --force alone is a usage error
  auto empty = run({kEacgm, "report", db_, "--html", ""});
  EXPECT_EQ(empty.exit_code, 2) << empty.out;
  EXPECT_NE(empty.err.find("--html: give a file name"), std::string::npos) << empty.err;
  EXPECT_EQ(run({kEacgm, "report", db_, "--force"}).exit_code, 2);
  auto dir = run({kEacgm, "report", db_, "--html", dir_});
  EXPECT_EQ(dir.exit_code, 2);
  EXPECT_NE(dir.err.find("e.g. " + dir_ + "/run.html"), std::string::npos) << dir.err;
  auto missing = run({kEacgm, "report", dir_ + "/nope.eacgm.db", "--html", dir_ + "/x.html"});
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/x.html"));
}

// Per bucket [t0 + i * width, t0 + (i + 1) * width): how long any of `intervals` covered it
// (overlapping ones counted once), as the page must say.
std::vector<int64_t> busy_per_bucket(std::vector<std::pair<int64_t, int64_t>> intervals, int64_t t0,
                                     int64_t width, size_t n) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& iv : intervals)
    if (!merged.empty() && iv.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, iv.second);
    else
      merged.push_back(iv);
  std::vector<int64_t> busy(n, 0);
  for (size_t i = 0; i < n; ++i) {
    int64_t lo = t0 + int64_t(i) * width, hi = lo + width;
    for (const auto& [s, e] : merged)
      busy[i] += std::max<int64_t>(0, std::min(e, hi) - std::max(s, lo));
  }
  return busy;
}

void write_gputime_meta(eacgm::RecordingWriter& w, uint64_t t0, uint64_t span) {
  w.set_meta("start_monotonic_ns", std::to_string(t0));
  w.set_meta("end_monotonic_ns", std::to_string(t0 + span));
  w.set_meta("monotonic_to_realtime_ns", "0");
  w.set_meta("recording_state", "complete");
  w.set_meta("layers", "gputime");
}

// The gputime layer's executions on two streams of a GPU, and an NCCL communicator's operations:
// the time line has a lane for each, each bucket's busy time is what its rows covered of it, the
// GPU's busy share counts the streams' overlap once, the kernels' GPU time is drawn by name, and
// hovering a bucket names what ran longest in it.
TEST_F(ReportHtml, GpuTimelineHasALanePerStreamBusyAsTheRowsSay) {
  const int64_t t0 = 1'000'000'000'000, ms = 1'000'000, span = 2000 * ms;
  std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> by_stream;
  {
    eacgm::RecordingWriter w(db_, false);
    write_gputime_meta(w, uint64_t(t0), uint64_t(span));
    auto add = [&](const char* kind, const char* name, uint32_t stream, int64_t at, int64_t dur) {
      eacgm::GpuActivityRow r;
      r.ts_ns = uint64_t(at), r.dur_ns = uint64_t(dur), r.pid = 77, r.kind = kind, r.name = name;
      r.stream = stream, r.device = 0, r.context = 1;
      w.add(r);
      if (std::string_view(kind) != "launch") by_stream[stream].push_back({at, at + dur});
    };
    // every 10 ms: gemm 0.3-2.8 ms on stream 7; softmax 2.0-2.4 ms (over the gemm) and a copy
    // 5.5-6.5 ms on stream 9; a launch record, which is no execution
    for (int k = 0; k < 200; ++k) {
      int64_t at = t0 + k * 10 * ms;
      add("launch", "cudaLaunchKernel", 0, at, 5000);
      add("kernel", "gemm_a(float*)", 7, at + 300'000, 2'500'000);
      add("kernel", "softmax(float*)", 9, at + 2 * ms, 400'000);
      add("memcpy", "HostToDevice", 9, at + 5'500'000, 1 * ms);
    }
    for (int k = 0; k < 5; ++k) {
      eacgm::GpuCollectiveRow c;
      c.ts_ns = uint64_t(t0 + 1500 * ms + k * 20 * ms), c.dur_ns = 4 * ms, c.pid = 77;
      c.name = "ncclAllReduce", c.comm_hash = 0xabc123def, c.rank = 0, c.nranks = 2;
      c.has_gpu_time = true, c.gpu_start_ns = c.ts_ns + 500'000, c.gpu_dur_ns = 3 * ms;
      w.add(c);
    }
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  std::string page = dir_ + "/report.html";
  auto r = run({kEacgm, "report", db_, "--html", page});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Rendered p = render(page, "gpu_timeline");
  expect_drawn(p, {"gpu_timeline", "gpu_busy", "gpu_kernel_time"});
  ASSERT_TRUE(p.data.is_object());
  const auto& g = p.data.at("gpu_time");
  ASSERT_TRUE(g.is_object()) << p.data.at("notes").dump();
  ASSERT_EQ(g.at("buckets"), 2000);
  EXPECT_EQ(g.at("executions"), 600) << "launch records are no executions";
  std::vector<std::string> labels;
  for (const auto& lane : g.at("lanes")) labels.push_back(lane.at("label"));
  EXPECT_EQ(labels, (std::vector<std::string>{"GPU 0 stream 7", "GPU 0 stream 9",
                                              "NCCL comm 123def rank 0/2"}));
  // each stream's buckets: busy as its rows cover them (1 ms buckets), to the nanosecond
  for (const auto& lane : g.at("lanes")) {
    if (lane.at("kind") != "stream") continue;
    uint32_t stream = lane.at("stream");
    SCOPED_TRACE(lane.at("label").get<std::string>());
    auto want = busy_per_bucket(by_stream[stream], t0, ms, 2000);
    std::map<size_t, double> got;
    for (const auto& c : lane.at("cells")) got[c.at(0).get<size_t>()] = c.at(1).get<double>();
    size_t nonzero = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      nonzero += want[i] > 0;
      EXPECT_NEAR(got.count(i) ? got[i] : 0.0, double(want[i]) / 1e3, 1e-3) << "bucket " << i;
    }
    EXPECT_EQ(got.size(), nonzero);
    EXPECT_EQ(lane.at("executions"), stream == 7 ? 200 : 400);
  }
  // hovering stream 9's bucket 2 (2-3 ms) names the softmax; bucket 5 the copy
  const auto& names = g.at("names");
  std::map<size_t, std::string> top;
  for (const auto& c : g.at("lanes").at(1).at("cells"))
    top[c.at(0).get<size_t>()] = names.at(c.at(2).at(0).at(0).get<size_t>());
  EXPECT_EQ(top[2], "softmax(float*)");
  EXPECT_EQ(top[5], "memcpy HostToDevice");
  // the GPU's busy share: both streams' union per bucket (the softmax runs within the gemm)
  std::vector<std::pair<int64_t, int64_t>> all = by_stream[7];
  all.insert(all.end(), by_stream[9].begin(), by_stream[9].end());
  auto want = busy_per_bucket(all, t0, ms, 2000);
  ASSERT_EQ(g.at("busy").size(), 1u);
  const auto& values = g.at("busy").at(0).at("values");
  ASSERT_EQ(values.size(), 2000u);
  for (size_t i = 0; i < 2000; ++i)
    EXPECT_NEAR(values.at(i).get<double>(), 100.0 * double(want[i]) / double(ms), 0.006) << i;
  int64_t total = 0;
  for (int64_t v : want) total += v;
  EXPECT_NEAR(g.at("busy").at(0).at("busy_pct").get<double>(), 100.0 * double(total) / double(span),
              0.006);
  // the kernels' GPU time by name: exactly what ran
  std::map<std::string, double> gpu_ms;
  for (const auto& k : g.at("kernels")) gpu_ms[k.at("name")] = k.at("gpu_ms").get<double>();
  EXPECT_EQ(gpu_ms,
            (std::map<std::string, double>{
                {"gemm_a(float*)", 500}, {"softmax(float*)", 80}, {"copies and memsets", 200}}));
  EXPECT_NE(p.dom.find("600 executions merged per lane into 2000 buckets"), std::string::npos);
}

// 200,000 kernels on 30 streams: the page's GPU time stays within its buckets (each lane at most
// one cell per bucket with three names, 24 lanes, the top 8 kernels by name and the rest as one),
// a note says what was merged and left out, and the page draws it without an error.
TEST_F(ReportHtml, GpuTimelineOfManyKernelsStaysBounded) {
  const uint64_t t0 = 1'000'000'000'000, span = 4'000'000'000;
  std::vector<std::string> kernels;
  for (int i = 0; i < 50; ++i) kernels.push_back("kernel_" + std::to_string(i) + "(float*, int)");
  {
    eacgm::RecordingWriter w(db_, false);
    write_gputime_meta(w, t0, span);
    for (uint64_t i = 0; i < 200'000; ++i) {
      eacgm::GpuActivityRow r;
      r.ts_ns = t0 + i * (span / 200'000), r.dur_ns = 15'000 + i % 7 * 1000, r.pid = 88;
      r.kind = "kernel", r.name = kernels[i * 7919 % kernels.size()];
      r.stream = uint32_t(i % 30), r.device = uint32_t(i % 2), r.context = 1;
      w.add(r);
      if (i % 50'000 == 0) w.flush();
    }
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  std::string page = dir_ + "/report.html";
  auto r = run({kEacgm, "report", db_, "--html", page});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Rendered p = render(page, "gpu_timeline_200k");
  expect_drawn(p, {"gpu_timeline", "gpu_busy", "gpu_kernel_time"});
  ASSERT_TRUE(p.data.is_object());
  const auto& g = p.data.at("gpu_time");
  EXPECT_EQ(g.at("executions"), 200000);
  const size_t buckets = g.at("buckets");
  EXPECT_EQ(buckets, 2000u);
  EXPECT_EQ(g.at("lanes").size(), 24u);
  for (const auto& lane : g.at("lanes")) {
    EXPECT_LE(lane.at("cells").size(), buckets);
    for (const auto& c : lane.at("cells")) EXPECT_LE(c.at(2).size(), 3u);
  }
  EXPECT_EQ(g.at("kernels").size(), 9u) << "8 kernels by name and the other kernels";
  EXPECT_EQ(g.at("busy").size(), 2u);
  for (const auto& b : g.at("busy")) EXPECT_EQ(b.at("values").size(), buckets);
  size_t bytes = g.dump().size();
  printf("gpu_time: %zu bytes of JSON for 200000 kernels\n", bytes);
  EXPECT_LT(bytes, 24 * buckets * 64 + 200'000);
  EXPECT_NE(p.dom.find("24 of 30 streams drawn"), std::string::npos) << p.data.at("notes").dump();
}

}  // namespace
}  // namespace e2e
