// End to end: the GPU layer (`--layers gpu`) loads NVML at run time. Here there is no GPU, so a
// fake libnvidia-ml built by the tests (tests/unit/fake_nvml) answers with scripted values, and
// the recording must hold exactly those values, in eacgm's units, at the sampling interval;
// only the traced process's GPU use is kept; a missing library or function is not fatal.
#include <dlfcn.h>

#include "e2e_util.h"

namespace e2e {
namespace {

const std::string kFakeFull = std::string(EACGM_FAKE_NVML_DIR) + "/full/libnvidia-ml.so.1";
const std::string kFakeOld = std::string(EACGM_FAKE_NVML_DIR) + "/old/libnvidia-ml.so.1";

class RecordGpu : public RecordingTest {
 protected:
  void write_script(const std::string& text) { std::ofstream(script()) << text; }
  std::vector<std::string> env() const { return {"EACGM_FAKE_NVML_SCRIPT=" + script()}; }
  std::string script() const { return dir_ + "/nvml.script"; }
};

TEST_F(RecordGpu, ExactValuesUnitsAndTimestampsFromNvml) {
  // a process to trace, and one that is not traced (pid 1) but uses the GPU too
  Process target({kWorkloads + "/sched_probe", "1", "1200", "5"});
  std::string pid = std::to_string(target.pid());
  write_script(
      "devices 2\n"
      "name 0 Fake H100\nuuid 0 GPU-0000aaaa\npci 0 00000000:17:00.0\n"
      "utilization 0 10:20 30:40 55:66\n"
      "memory 0 1073741824:85899345920\n"
      "temperature 0 61\n"
      "power_instant 0 250500\npower 0 1\npower_limit 0 700000\n"
      "clock_sm 0 1980\nclock_mem 0 2619\n"
      "pcie_tx_count 0 *3\npcie_rx_count 0 *2\npcie_tx 0 1\n"
      "clocks_event 0 0 68\n"
      "ecc_corrected 0 3\necc_uncorrected 0 0\n"
      "procs 0 " + pid + ":536870912,1:4096\n"
      "proc_util 0 " + pid + ":71:12:0:0,1:99:99:0:0\n"
      "utilization 1 !999\n"
      "xid 1 100 79\n");
  auto r = run({kEacgm, "record", "-o", db_, "--layers", "gpu", "--interval", "20",
                "--nvml-library", kFakeFull, "--duration", "0.6", "-p", pid},
               env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.text("SELECT name || '|' || uuid || '|' || pci_bus_id FROM gpu_devices "
                    "WHERE gpu = 0"),
            "Fake H100|GPU-0000aaaa|00000000:17:00.0");
  // the n-th reading gets the n-th scripted answer, the last one repeats (utilization, like
  // every slowly refreshed metric, is read every 100 ms: the other rows leave it empty)
  std::vector<std::string> util;
  db.each("SELECT sm_util_pct || ':' || mem_util_pct FROM gpu_samples WHERE gpu = 0 "
          "AND sm_util_pct IS NOT NULL ORDER BY ts_ns LIMIT 4",
          [&](sqlite3_stmt* s) { util.push_back(reinterpret_cast<const char*>(sqlite3_column_text(s, 0))); });
  EXPECT_EQ(util, (std::vector<std::string>{"10:20", "30:40", "55:66", "55:66"}));
  // units: bytes, degrees C, watts (NVML: mW; the instant reading, not the 1 s average of
  // nvmlDeviceGetPowerUsage), MHz, bytes/s (the PCIe byte counters' rate: 3 and 2 bytes per us),
  // decoded reasons
  EXPECT_EQ(db.text("SELECT DISTINCT mem_used_bytes || '|' || mem_total_bytes || '|' || "
                    "temperature_c || '|' || power_w || '|' || power_limit_w || '|' || "
                    "sm_clock_mhz || '|' || mem_clock_mhz || '|' || pcie_tx_bytes_per_s || '|' "
                    "|| pcie_rx_bytes_per_s || '|' || ecc_corrected || '|' || ecc_uncorrected "
                    "FROM gpu_samples WHERE gpu = 0 AND temperature_c IS NOT NULL AND "
                    "pcie_tx_bytes_per_s IS NOT NULL"),
            "1073741824|85899345920|61|250.5|700.0|1980|2619|3000000|2000000|3|0");
  // (text() keeps the last row: every row with a PCIe rate has the same values)
  EXPECT_EQ(db.scalar("SELECT count(DISTINCT pcie_tx_bytes_per_s || '|' || pcie_rx_bytes_per_s || "
                      "'|' || power_w) FROM gpu_samples WHERE gpu = 0 AND pcie_tx_bytes_per_s IS "
                      "NOT NULL"),
            1);
  // a rate needs two readings of the counters: none in the first row only
  EXPECT_EQ(db.scalar("SELECT pcie_tx_bytes_per_s IS NULL FROM gpu_samples WHERE gpu = 0 "
                      "ORDER BY ts_ns LIMIT 1"),
            1);
  // the fast metrics at every pass, the slow ones (temperature, power limit, ECC,
  // utilization, processes) every 100 ms: every 5th pass at 20 ms
  EXPECT_EQ(db.scalar("SELECT count(*) FROM gpu_samples WHERE gpu = 0 AND (mem_used_bytes IS "
                      "NULL OR power_w IS NULL OR sm_clock_mhz IS NULL OR (pcie_tx_bytes_per_s "
                      "IS NULL AND ts_ns > (SELECT min(ts_ns) FROM gpu_samples WHERE gpu = 0)) "
                      "OR throttle_reasons IS NULL)"),
            0);
  std::vector<int64_t> slow_ts;
  db.each("SELECT ts_ns FROM gpu_samples WHERE gpu = 0 AND temperature_c IS NOT NULL ORDER BY ts_ns",
          [&](sqlite3_stmt* s) { slow_ts.push_back(sqlite3_column_int64(s, 0)); });
  ASSERT_GE(slow_ts.size(), 4u);
  std::vector<int64_t> slow_gaps;
  for (size_t i = 1; i < slow_ts.size(); ++i) {
    slow_gaps.push_back(slow_ts[i] - slow_ts[i - 1]);
    // never sooner than 100 ms less half a pass (a late pass may make one later)
    EXPECT_GE(slow_gaps.back(), 85'000'000) << "slow metrics read too often";
  }
  std::nth_element(slow_gaps.begin(), slow_gaps.begin() + slow_gaps.size() / 2, slow_gaps.end());
  EXPECT_NEAR(double(slow_gaps[slow_gaps.size() / 2]), 100e6, 15e6) << "slow metrics' spacing";
  EXPECT_EQ(db.scalar("SELECT count(*) FROM gpu_samples WHERE gpu = 0 AND temperature_c IS NOT "
                      "NULL AND (power_limit_w IS NULL OR ecc_corrected IS NULL OR sm_util_pct "
                      "IS NULL)"),
            0);
  EXPECT_EQ(db.text("SELECT throttle_reasons_text FROM gpu_samples WHERE gpu = 0 "
                    "ORDER BY ts_ns LIMIT 1"),
            "none");
  EXPECT_EQ(db.text("SELECT DISTINCT throttle_reasons || '|' || throttle_reasons_text FROM "
                    "gpu_samples WHERE gpu = 0 AND throttle_reasons != 0"),
            "68|sw_power_cap,hw_thermal_slowdown");
  // every 20 ms for 0.6 s, inside the recording, on both GPUs
  int64_t n = db.scalar("SELECT count(*) FROM gpu_samples WHERE gpu = 0");
  EXPECT_GE(n, 20);
  EXPECT_LE(n, 35);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM gpu_samples WHERE gpu = 1"), n);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM gpu_samples g, meta s, meta e WHERE "
                      "s.key = 'start_monotonic_ns' AND e.key = 'end_monotonic_ns' AND "
                      "(g.ts_ns < CAST(s.value AS INTEGER) OR g.ts_ns > CAST(e.value AS INTEGER))"),
            0);
  std::vector<int64_t> ts;
  db.each("SELECT ts_ns FROM gpu_samples WHERE gpu = 0 ORDER BY ts_ns",
          [&](sqlite3_stmt* s) { ts.push_back(sqlite3_column_int64(s, 0)); });
  std::vector<int64_t> gaps;
  for (size_t i = 1; i < ts.size(); ++i) gaps.push_back(ts[i] - ts[i - 1]);
  std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
  EXPECT_NEAR(double(gaps[gaps.size() / 2]), 20e6, 4e6) << "median spacing";
  // a GPU whose utilization fails: the rest of its metrics and the other GPU go on, and the
  // failure is said once
  EXPECT_EQ(db.scalar("SELECT count(sm_util_pct) FROM gpu_samples WHERE gpu = 1"), 0);
  EXPECT_NE(db.text("SELECT value FROM meta WHERE key = 'gpu_unavailable_metrics'")
                .find("GPU 1: nvmlDeviceGetUtilizationRates: Unknown Error (code 999)"),
            std::string::npos);
  size_t first = r.err.find("utilization unavailable");
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("utilization unavailable", first + 1), std::string::npos) << r.err;
  // the XID the driver reported
  EXPECT_EQ(db.text("SELECT gpu || ':' || xid FROM gpu_events"), "1:79");
  // per process: only the traced one, with its memory and utilization
  EXPECT_EQ(db.scalar("SELECT count(*) FROM gpu_process_samples WHERE pid != " + pid), 0);
  EXPECT_GE(db.scalar("SELECT count(*) FROM gpu_process_samples WHERE pid = " + pid),
            int64_t(slow_ts.size()) - 1);
  EXPECT_EQ(db.text("SELECT DISTINCT used_memory_bytes FROM gpu_process_samples"), "536870912");
  EXPECT_EQ(db.text("SELECT sm_util_pct || ':' || mem_util_pct FROM gpu_process_samples WHERE "
                    "sm_util_pct IS NOT NULL LIMIT 1"),
            "71:12");
  // the report summarises it
  auto report = run({kEacgm, "report", db_});
  EXPECT_NE(report.out.find("GPU 0 (Fake H100)"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("XID 79"), std::string::npos) << report.out;
}

TEST_F(RecordGpu, OldDriverWithoutNewerFunctionsIsRecordedWithWhatItHas) {
  write_script("utilization 0 42:7\ntemperature 0 50\nclocks_event 0 4\n");
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--layers", "gpu", "--interval", "20",
                "--nvml-library", kFakeOld, "--", "/bin/sleep", "0.3"},
               env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  // the old names answer (unversioned functions, the throttle-reasons name)
  EXPECT_EQ(db.text("SELECT DISTINCT sm_util_pct || '|' || temperature_c || '|' || "
                    "throttle_reasons_text FROM gpu_samples WHERE sm_util_pct IS NOT NULL"),
            "42|50|sw_power_cap");
  // what this driver lacks is said, once, and kept in the recording
  std::string missing = db.text("SELECT value FROM meta WHERE key = 'gpu_unavailable_metrics'");
  EXPECT_NE(missing.find("nvmlDeviceGetProcessUtilization"), std::string::npos) << missing;
  EXPECT_NE(r.err.find("nvmlDeviceGetProcessUtilization"), std::string::npos) << r.err;
}

TEST_F(RecordGpu, MissingNvmlIsAWarningAndTheRestIsRecorded) {
  if (void* h = dlopen("libnvidia-ml.so.1", RTLD_LAZY)) {
    dlclose(h);
    GTEST_SKIP() << "a real libnvidia-ml.so.1 is installed here: nothing is missing";
  }
  auto r = run({kEacgm, "record", "-o", db_, "--layers", "gpu,host", "--", "/bin/sleep", "0.2"},
               {"EACGM_NVML_LIBRARY="});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("GPU layer: cannot load libnvidia-ml.so.1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--nvml-library"), std::string::npos) << r.err;
  Db db(db_);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM gpu_samples"), 0);
  EXPECT_GT(db.scalar("SELECT count(*) FROM host_samples"), 0);
}

TEST_F(RecordGpu, ANamedLibraryThatDoesNotLoadIsAnError) {
  auto r = run({kEacgm, "record", "-o", db_, "--layers", "gpu", "--nvml-library",
                dir_ + "/no-such-libnvidia-ml.so", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no-such-libnvidia-ml.so"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace e2e
