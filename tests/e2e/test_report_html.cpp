// End to end: `eacgm report --html` on real recordings, drawn by headless Chromium. The page
// checks itself after drawing (marks inside each chart's plot, a red cross at each anomaly's
// place as the anomalies table gives it, JavaScript errors) into #eacgm-selfcheck; the tests read
// that, the page's data and its tables from the DOM Chromium dumps, compare them with the
// recording, and keep a screenshot under build/test-artifacts/html/.
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <set>

#include "chromium.h"
#include "e2e_util.h"

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

}  // namespace
}  // namespace e2e
