// The GPU layer against fake NVML libraries (tests/unit/fake_nvml): loading, fallbacks, exact
// values and units, per-process join, XID events, error handling, stop().
#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "gpu/gpu_sampler.h"
#include "gpu/nvml.h"

using namespace eacgm;
using namespace std::chrono_literals;

namespace {

// The script the fake library reads at nvmlInit, in a temporary file named by the env var.
class FakeScript {
 public:
  explicit FakeScript(const std::string& text) {
    char name[] = "/tmp/eacgm_fake_nvml_XXXXXX";
    int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = name;
    std::ofstream(path_) << text;
    setenv("EACGM_FAKE_NVML_SCRIPT", path_.c_str(), 1);
  }
  ~FakeScript() {
    unsetenv("EACGM_FAKE_NVML_SCRIPT");
    unlink(path_.c_str());
  }

 private:
  std::string path_;
};

std::unique_ptr<NvmlLibrary> load_fake(const char* path) {
  NvmlLoadResult r = NvmlLibrary::load({path, true});
  EXPECT_TRUE(r) << r.failure.warning();
  return std::move(r.library);
}

// Collects what the sampler delivers; the test thread reads it under the same mutex.
class CollectingSink : public GpuSink {
 public:
  void on_gpu_sample(const GpuSample& s) override {
    std::lock_guard lock(mutex);
    samples.push_back(s);
  }
  void on_gpu_process_sample(const GpuProcessSample& s) override {
    std::lock_guard lock(mutex);
    processes.push_back(s);
  }
  void on_gpu_xid(const GpuXidEvent& e) override {
    std::lock_guard lock(mutex);
    xids.push_back(e);
  }
  std::vector<GpuSample> samples_of(uint32_t gpu) {
    std::lock_guard lock(mutex);
    std::vector<GpuSample> out;
    for (const GpuSample& s : samples) {
      if (s.gpu == gpu) out.push_back(s);
    }
    return out;
  }
  // Waits (up to 5 s) until `done` holds, checked under the lock.
  template <typename Pred>
  bool wait_for(Pred done) {
    for (int i = 0; i < 1000; ++i) {
      {
        std::lock_guard lock(mutex);
        if (done()) return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  std::mutex mutex;
  std::vector<GpuSample> samples;
  std::vector<GpuProcessSample> processes;
  std::vector<GpuXidEvent> xids;
};

// Runs a sampler until gpu 0 has `passes` samples.
void run_passes(GpuSampler& sampler, CollectingSink& sink, size_t passes) {
  sampler.start();
  EXPECT_TRUE(sink.wait_for([&] {
    return std::count_if(sink.samples.begin(), sink.samples.end(),
                         [](const GpuSample& s) { return s.gpu == 0; }) >= long(passes);
  }));
  sampler.stop();
}

std::string unavailable_text(const GpuSampler& sampler) {
  std::string out;
  for (const UnavailableMetric& m : sampler.unavailable_metrics()) {
    out += m.metric + ": " + m.reason + "\n";
  }
  return out;
}

}  // namespace

TEST(NvmlLibrary, MissingLibraryIsAWarningAndOnRequestAnError) {
  NvmlLoadResult r = NvmlLibrary::load({"/nonexistent/libnvidia-ml.so.1", false});
  ASSERT_FALSE(r);
  EXPECT_NE(r.failure.reason.find("No such file"), std::string::npos) << r.failure.reason;
  EXPECT_EQ(r.failure.warning(), "GPU layer: cannot load /nonexistent/libnvidia-ml.so.1 (" +
                                     r.failure.reason +
                                     "): is the NVIDIA driver installed? use --nvml-library PATH");
  try {
    NvmlLibrary::load_or_throw({"/nonexistent/libnvidia-ml.so.1", true});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot load the NVML library /nonexistent/libnvidia-ml.so.1"),
        std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--nvml-library PATH"), std::string::npos);
    EXPECT_EQ(e.exit_code(), 1);
  }
}

TEST(NvmlLibrary, ChoosesCommandLineThenEnvironmentThenDefault) {
  NvmlLibraryChoice c = choose_nvml_library("/a/libnvidia-ml.so.1", "/b/lib.so");
  EXPECT_EQ(c.path, "/a/libnvidia-ml.so.1");
  EXPECT_TRUE(c.explicit_path);
  c = choose_nvml_library("", "/b/lib.so");
  EXPECT_EQ(c.path, "/b/lib.so");
  EXPECT_TRUE(c.explicit_path);
  c = choose_nvml_library("", "");
  EXPECT_EQ(c.path, "libnvidia-ml.so.1");
  EXPECT_FALSE(c.explicit_path);
  c = choose_nvml_library("", nullptr);
  EXPECT_EQ(c.path, "libnvidia-ml.so.1");
}

TEST(NvmlLibrary, FullLibraryHasEveryFunction) {
  FakeScript script("devices 1\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  EXPECT_TRUE(nvml->missing_functions().empty());
  EXPECT_EQ(nvml->error_text(999), "Unknown Error (code 999)");
  EXPECT_EQ(nvml->error_text(15), "GPU is lost (code 15)");
}

TEST(NvmlLibrary, OldLibraryReportsItsMissingFunctions) {
  FakeScript script("devices 1\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_OLD);
  ASSERT_TRUE(nvml);
  EXPECT_EQ(nvml->missing_functions(),
            (std::vector<std::string>{"nvmlErrorString", "nvmlDeviceGetFieldValues",
                                      "nvmlDeviceGetProcessUtilization"}));
  EXPECT_EQ(nvml->error_text(999), "NVML error 999");  // no nvmlErrorString
  EXPECT_NE(nvml->api().device_get_compute_running_processes_v1, nullptr);
  EXPECT_EQ(nvml->api().device_get_compute_running_processes_v2, nullptr);
}

TEST(NvmlLibrary, InitFailureIsReportedNotThrown) {
  FakeScript script("init 0 !9\n");
  NvmlLoadResult r = NvmlLibrary::load({EACGM_FAKE_NVML_FULL, false});
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.failure.init_failed);
  EXPECT_EQ(r.failure.reason, "nvmlInit: Driver Not Loaded (code 9)");
  EXPECT_NE(r.failure.warning().find("GPU layer: cannot initialise NVML from"), std::string::npos);
  EXPECT_NE(r.failure.warning().find("is the NVIDIA driver loaded?"), std::string::npos);
}

// nvidia-smi and DCGM's FB_USED leave out what the driver reserves (nvmlMemory_v2_t); v1's used
// counts it (an H100 with driver 580: ~510 MiB more). The old driver's library has no _v2.
TEST(GpuSampler, MemoryUsedLeavesOutTheReservedWhereTheDriverTellsIt) {
  FakeScript script("memory 0 1073741824:85899345920:536870912\n");
  for (bool full : {true, false}) {
    const char* lib = full ? EACGM_FAKE_NVML_FULL : EACGM_FAKE_NVML_OLD;
    auto nvml = load_fake(lib);
    ASSERT_TRUE(nvml);
    EXPECT_EQ(nvml->api().device_get_memory_info_v2 != nullptr, full);
    CollectingSink sink;
    GpuSamplerOptions options;
    options.interval = 20ms;
    GpuSampler sampler(*nvml, sink, options);
    run_passes(sampler, sink, 1);
    std::vector<GpuSample> s = sink.samples_of(0);
    ASSERT_GE(s.size(), 1u);
    EXPECT_EQ(*s[0].mem_used_bytes, full ? 1073741824u : 1610612736u) << lib;
    EXPECT_EQ(*s[0].mem_total_bytes, 85899345920u);
  }
}

TEST(GpuSampler, ReadsDevicesOnce) {
  FakeScript script(
      "devices 2\n"
      "name 0 Fake H100 80GB\nuuid 0 GPU-00000000-1111\npci 0 00000000:17:00.0\n"
      "name 1 Fake A100\nuuid 1 GPU-22222222-3333\npci 1 00000000:65:00.0\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSampler sampler(*nvml, sink);
  ASSERT_EQ(sampler.devices().size(), 2u);
  EXPECT_EQ(sampler.devices()[0].index, 0u);
  EXPECT_EQ(sampler.devices()[0].name, "Fake H100 80GB");
  EXPECT_EQ(sampler.devices()[0].uuid, "GPU-00000000-1111");
  EXPECT_EQ(sampler.devices()[0].pci_bus_id, "00000000:17:00.0");
  EXPECT_EQ(sampler.devices()[1].name, "Fake A100");
  EXPECT_EQ(sampler.devices()[1].pci_bus_id, "00000000:65:00.0");
}

TEST(GpuSampler, ExactValuesUnitsAndTimestamps) {
  FakeScript script(
      "devices 2\n"
      "utilization 0 10:20 11:21 12:22 13:23\n"
      "memory 0 1073741824:85899345920 2147483648:85899345920\n"
      "temperature 0 61 62 63\n"
      "power 0 150250 151000\n"
      "power_limit 0 300000\n"
      "clock_sm 0 1980 1410\n"
      "clock_mem 0 2619\n"
      "pcie_tx 0 2048 4096\n"
      "pcie_rx 0 1000\n"
      "clocks_event 0 0 68 1\n"
      "ecc_corrected 0 0 2\n"
      "ecc_uncorrected 0 1\n"
      "nvlink_tx 0 1000@1000000 1500@1100000 3500@1300000\n"
      "nvlink_rx 0 10@1000000 20@1100000 20@1300000\n"
      "utilization 1 99:98\n"
      "power 1 70000\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  GpuSampler sampler(*nvml, sink, options);
  uint64_t before = monotonic_now_ns();
  run_passes(sampler, sink, 4);
  uint64_t after = monotonic_now_ns();

  std::vector<GpuSample> s = sink.samples_of(0);
  ASSERT_GE(s.size(), 4u);
  EXPECT_EQ(*s[0].sm_util_pct, 10u);
  EXPECT_EQ(*s[0].mem_util_pct, 20u);
  EXPECT_EQ(*s[3].sm_util_pct, 13u);
  EXPECT_EQ(*s[3].mem_util_pct, 23u);
  EXPECT_EQ(*s[0].mem_used_bytes, 1073741824u);
  EXPECT_EQ(*s[1].mem_used_bytes, 2147483648u);
  EXPECT_EQ(*s[1].mem_total_bytes, 85899345920u);
  EXPECT_EQ(*s[0].temperature_c, 61u);
  EXPECT_EQ(*s[3].temperature_c, 63u);      // the last answer repeats
  EXPECT_DOUBLE_EQ(*s[0].power_w, 150.25);  // mW -> W
  EXPECT_DOUBLE_EQ(*s[1].power_w, 151.0);
  EXPECT_DOUBLE_EQ(*s[0].power_limit_w, 300.0);
  EXPECT_EQ(*s[0].sm_clock_mhz, 1980u);
  EXPECT_EQ(*s[1].sm_clock_mhz, 1410u);
  EXPECT_EQ(*s[0].mem_clock_mhz, 2619u);
  EXPECT_EQ(*s[0].pcie_tx_bytes_per_s, 2048u * 1024);  // KB/s -> B/s
  EXPECT_EQ(*s[1].pcie_tx_bytes_per_s, 4096u * 1024);
  EXPECT_EQ(*s[0].pcie_rx_bytes_per_s, 1000u * 1024);
  EXPECT_EQ(*s[0].throttle_reasons, 0u);
  EXPECT_EQ(*s[1].throttle_reasons, 68u);
  EXPECT_EQ(throttle_reasons_text(*s[1].throttle_reasons), "sw_power_cap,hw_thermal_slowdown");
  EXPECT_EQ(*s[2].throttle_reasons, 1u);
  EXPECT_EQ(*s[0].ecc_corrected, 0u);
  EXPECT_EQ(*s[1].ecc_corrected, 2u);
  EXPECT_EQ(*s[0].ecc_uncorrected, 1u);
  // NVLink: no rate on the first pass; then KiB deltas over NVML's reading times.
  EXPECT_FALSE(s[0].nvlink_tx_bytes_per_s);
  EXPECT_DOUBLE_EQ(*s[1].nvlink_tx_bytes_per_s, 500.0 * 1024 / 0.1);
  EXPECT_DOUBLE_EQ(*s[1].nvlink_rx_bytes_per_s, 10.0 * 1024 / 0.1);
  EXPECT_DOUBLE_EQ(*s[2].nvlink_tx_bytes_per_s, 2000.0 * 1024 / 0.2);
  EXPECT_DOUBLE_EQ(*s[2].nvlink_rx_bytes_per_s, 0.0);

  // GPU 1: its own script; unscripted metrics are NOT_SUPPORTED: absent, and not "unavailable".
  std::vector<GpuSample> g1 = sink.samples_of(1);
  ASSERT_GE(g1.size(), 3u);
  EXPECT_EQ(*g1[0].sm_util_pct, 99u);
  EXPECT_DOUBLE_EQ(*g1[0].power_w, 70.0);
  EXPECT_FALSE(g1[0].temperature_c);
  EXPECT_FALSE(g1[0].mem_used_bytes);
  EXPECT_FALSE(g1[0].throttle_reasons);
  EXPECT_EQ(unavailable_text(sampler), "");

  // CLOCK_MONOTONIC stamps, increasing, on a fixed schedule of 20 ms.
  const uint64_t interval = 20'000'000;
  EXPECT_GE(s.front().ts_ns, before);
  EXPECT_LE(s.back().ts_ns, after);
  std::vector<uint64_t> gaps;
  for (size_t i = 1; i < s.size(); ++i) {
    ASSERT_GT(s[i].ts_ns, s[i - 1].ts_ns);
    // Deadlines are start + k * interval, so a pass is never early (2 ms of slack for the
    // first pass's own work).
    EXPECT_GE(s[i].ts_ns - s[0].ts_ns, i * interval - 2'000'000) << "pass " << i;
    gaps.push_back(s[i].ts_ns - s[i - 1].ts_ns);
  }
  std::sort(gaps.begin(), gaps.end());
  EXPECT_LT(gaps[gaps.size() / 2], 2 * interval) << "median gap";
  EXPECT_GE(sampler.stats().passes, 4u);
}

// Where the driver has the fields, power is the instant reading and PCIe the byte counters'
// rate (one nvmlDeviceGetFieldValues call); elsewhere nvmlDeviceGetPowerUsage and, only with the
// slow metrics, nvmlDeviceGetPcieThroughput (it measures for 20 ms per direction).
TEST(GpuSampler, PowerAndPcieFromFieldValuesWhereTheDriverHasThem) {
  FakeScript script(
      "devices 2\n"
      "power_instant 0 250500\n"
      "power 0 999\n"  // not read: the field answered
      "pcie_tx 0 1\n"  // nor this
      "pcie_tx_count 0 1000000@2000000 1500000@2000100 1500000@2000300 100@2000400 300@2000500\n"
      "pcie_rx_count 0 7@2000000 10007@2000100 20007@2000300 20008@2000400 20009@2000500\n"
      "temperature 0 50\n"
      "power 1 70000\n"
      "pcie_tx 1 2048\npcie_rx 1 4\n"
      "temperature 1 40\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  options.slow_interval = 40ms;  // every other pass
  GpuSampler sampler(*nvml, sink, options);
  run_passes(sampler, sink, 5);

  std::vector<GpuSample> s = sink.samples_of(0);
  ASSERT_GE(s.size(), 5u);
  for (const GpuSample& x : s) EXPECT_DOUBLE_EQ(*x.power_w, 250.5);
  EXPECT_FALSE(s[0].pcie_tx_bytes_per_s);                // one reading: no rate yet
  EXPECT_EQ(*s[1].pcie_tx_bytes_per_s, 5'000'000'000u);  // 500,000 B in 100 us
  EXPECT_EQ(*s[1].pcie_rx_bytes_per_s, 100'000'000u);    // 10,000 B in 100 us
  EXPECT_EQ(*s[2].pcie_tx_bytes_per_s, 0u);
  EXPECT_EQ(*s[2].pcie_rx_bytes_per_s, 50'000'000u);  // over NVML's 200 us, not ours
  EXPECT_FALSE(s[3].pcie_tx_bytes_per_s);             // a 64-bit counter went down: reset
  EXPECT_FALSE(s[3].pcie_rx_bytes_per_s);
  EXPECT_EQ(*s[4].pcie_tx_bytes_per_s, 2'000'000u);  // and counts on from the reset
  EXPECT_EQ(*s[4].pcie_rx_bytes_per_s, 10'000u);

  std::vector<GpuSample> g1 = sink.samples_of(1);
  ASSERT_GE(g1.size(), 5u);
  int slow_passes = 0;
  for (const GpuSample& x : g1) {
    EXPECT_DOUBLE_EQ(*x.power_w, 70.0);
    // PCIe throughput only with the slow metrics, in KB/s -> B/s
    EXPECT_EQ(x.pcie_tx_bytes_per_s.has_value(), x.temperature_c.has_value());
    if (!x.temperature_c) continue;
    ++slow_passes;
    EXPECT_EQ(*x.pcie_tx_bytes_per_s, 2048u * 1024);
    EXPECT_EQ(*x.pcie_rx_bytes_per_s, 4u * 1024);
  }
  EXPECT_GE(slow_passes, 2);
  EXPECT_LE(slow_passes, int(g1.size()) - 2);
  EXPECT_EQ(unavailable_text(sampler), "");
}

// An error at the first pass is not "no such field": the field is asked again, not replaced.
TEST(GpuSampler, FieldErrorsLoseAPassNotTheField) {
  FakeScript script(
      "devices 1\n"
      "power_instant 0 !15 100000\n"
      "power 0 999\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  GpuSampler sampler(*nvml, sink, options);
  run_passes(sampler, sink, 3);
  std::vector<GpuSample> s = sink.samples_of(0);
  ASSERT_GE(s.size(), 3u);
  EXPECT_FALSE(s[0].power_w);
  EXPECT_DOUBLE_EQ(*s[1].power_w, 100.0);
  EXPECT_DOUBLE_EQ(*s[2].power_w, 100.0);
  EXPECT_EQ(unavailable_text(sampler),
            "power: GPU 0: nvmlDeviceGetFieldValues(POWER_INSTANT): GPU is lost (code 15)\n");
}

TEST(GpuSampler, ProcessesAreJoinedAndFiltered) {
  uint32_t self = uint32_t(getpid());
  uint32_t foreign = 4194000;  // above any default pid_max: never a traced pid
  std::ostringstream text;
  text << "devices 1\n"
       << "procs 0 " << self << ":1048576," << foreign << ":2048 " << self << ":3145728\n"
       << "proc_util 0 " << self << ":55:44:3:2," << foreign << ":99:99:99:99 = " << self
       << ":60:40:0:1 =\n";
  FakeScript script(text.str());
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  std::atomic<int> filter_calls{0};
  options.keep_pid = [&](uint32_t pid) {
    ++filter_calls;
    return pid == self;
  };
  GpuSampler sampler(*nvml, sink, options);
  run_passes(sampler, sink, 4);

  std::vector<GpuSample> s = sink.samples_of(0);
  std::vector<GpuProcessSample> p;
  {
    std::lock_guard lock(sink.mutex);
    p = sink.processes;
  }
  ASSERT_GE(p.size(), 4u);
  ASSERT_EQ(p.size(), s.size()) << "one row per pass for the traced pid";
  EXPECT_GT(filter_calls.load(), 0);
  // The expected namespace pid, read independently from /proc/self/status.
  std::ifstream status("/proc/self/status");
  std::string line, last_field;
  while (std::getline(status, line)) {
    if (line.rfind("NSpid:", 0) == 0) last_field = line.substr(line.find_last_of(" \t") + 1);
  }
  std::optional<uint32_t> want_ns_pid;
  if (!last_field.empty() && uint32_t(std::stoul(last_field)) != self) {
    want_ns_pid = uint32_t(std::stoul(last_field));
  }
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].pid, self) << "the foreign pid must be filtered out";
    EXPECT_EQ(p[i].gpu, 0u);
    EXPECT_EQ(p[i].ts_ns, s[i].ts_ns) << "one row per pass, stamped like the GPU sample";
    EXPECT_EQ(p[i].ns_pid, want_ns_pid);
    EXPECT_EQ(*p[i].used_memory_bytes, i == 0 ? 1048576u : 3145728u);
  }
  // Pass 0: new samples; pass 1: the same samples again (NOT_FOUND past lastSeenTimeStamp):
  // no utilization; pass 2: new ones; pass 3: nothing new.
  ASSERT_TRUE(p[0].sm_util_pct);
  EXPECT_EQ(*p[0].sm_util_pct, 55u);
  EXPECT_EQ(*p[0].mem_util_pct, 44u);
  EXPECT_EQ(*p[0].enc_util_pct, 3u);
  EXPECT_EQ(*p[0].dec_util_pct, 2u);
  EXPECT_FALSE(p[1].sm_util_pct);
  EXPECT_FALSE(p[1].util_ts_ns);
  ASSERT_TRUE(p[2].sm_util_pct);
  EXPECT_EQ(*p[2].sm_util_pct, 60u);
  EXPECT_EQ(*p[2].dec_util_pct, 1u);
  EXPECT_FALSE(p[3].sm_util_pct);
  // NVML's CLOCK_REALTIME microseconds, mapped to CLOCK_MONOTONIC: the fake stamps samples at
  // the call, inside the pass.
  for (size_t i : {size_t(0), size_t(2)}) {
    ASSERT_TRUE(p[i].util_ts_ns);
    int64_t skew = int64_t(*p[i].util_ts_ns) - int64_t(p[i].ts_ns);
    EXPECT_LT(std::abs(skew), 5'000'000) << "pass " << i << " skew " << skew;
  }
  EXPECT_EQ(unavailable_text(sampler), "");  // NOT_FOUND is normal
}

TEST(GpuSampler, WithoutFilterEveryProcessIsKept) {
  FakeScript script("procs 0 111:1,222:2\nproc_util 0 222:5:6:7:8\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  GpuSampler sampler(*nvml, sink, options);
  run_passes(sampler, sink, 1);
  std::lock_guard lock(sink.mutex);
  ASSERT_GE(sink.processes.size(), 2u);
  EXPECT_EQ(sink.processes[0].pid, 111u);
  EXPECT_EQ(*sink.processes[0].used_memory_bytes, 1u);
  EXPECT_FALSE(sink.processes[0].sm_util_pct);
  EXPECT_EQ(sink.processes[1].pid, 222u);
  EXPECT_EQ(*sink.processes[1].used_memory_bytes, 2u);
  EXPECT_EQ(*sink.processes[1].sm_util_pct, 5u);
  EXPECT_EQ(*sink.processes[1].dec_util_pct, 8u);
}

TEST(GpuSampler, OldDriverFallbacksAndMissingFunctions) {
  FakeScript script(
      "devices 1\npci 0 00000000:3B:00.0\n"
      "clocks_event 0 136\n"
      "procs 0 4242:1048576,4343:2097152\n"
      "temperature 0 !999\n"
      "xid 0 20 48\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_OLD);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  GpuSampler sampler(*nvml, sink, options);
  EXPECT_EQ(sampler.devices().at(0).pci_bus_id, "00000000:3B:00.0");  // _v2
  sampler.start();
  EXPECT_TRUE(sink.wait_for([&] { return !sink.xids.empty() && sink.samples.size() >= 2; }));
  sampler.stop();

  std::vector<GpuSample> s = sink.samples_of(0);
  EXPECT_EQ(*s[0].throttle_reasons, 136u);  // via nvmlDeviceGetCurrentClocksThrottleReasons
  EXPECT_EQ(throttle_reasons_text(136), "hw_slowdown,hw_power_brake_slowdown");
  EXPECT_FALSE(s[0].temperature_c);
  EXPECT_FALSE(s[1].nvlink_tx_bytes_per_s);
  {
    std::lock_guard lock(sink.mutex);
    // The v1 layout (16-byte entries): a wrong stride would misread the second process.
    ASSERT_GE(sink.processes.size(), 2u);
    EXPECT_EQ(sink.processes[0].pid, 4242u);
    EXPECT_EQ(*sink.processes[0].used_memory_bytes, 1048576u);
    EXPECT_EQ(sink.processes[1].pid, 4343u);
    EXPECT_EQ(*sink.processes[1].used_memory_bytes, 2097152u);
    ASSERT_EQ(sink.xids.size(), 1u);  // via the unversioned nvmlEventSetWait
    EXPECT_EQ(sink.xids[0].gpu, 0u);
    EXPECT_EQ(sink.xids[0].xid, 48u);
  }
  std::string path = EACGM_FAKE_NVML_OLD;
  EXPECT_EQ(unavailable_text(sampler),
            "temperature: GPU 0: nvmlDeviceGetTemperature: NVML error 999\n"
            "nvlink: nvmlDeviceGetFieldValues is not in " +
                path +
                " (an older driver?)\n"
                "process_utilization: nvmlDeviceGetProcessUtilization is not in " +
                path + " (an older driver?)\n");
}

TEST(GpuSampler, ErrorCodesBecomeUnavailableMetricsOnce) {
  FakeScript script(
      "devices 1\n"
      "temperature 0 !999\n"
      "power 0 !15 150000\n"
      "ecc_corrected 0 !3\n"
      "clock_sm 0 !3\n"
      "clock_mem 0 1593\n"
      "proc_util 0 !999\n"
      "nvlink_tx 0 !999\n"
      "nvlink_rx 0 5@1\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  GpuSampler sampler(*nvml, sink, options);
  run_passes(sampler, sink, 3);
  std::vector<GpuSample> s = sink.samples_of(0);
  EXPECT_FALSE(s[0].power_w);              // GPU_IS_LOST on the first call...
  EXPECT_DOUBLE_EQ(*s[1].power_w, 150.0);  // ...and back on the next
  EXPECT_FALSE(s[2].temperature_c);
  EXPECT_FALSE(s[2].ecc_corrected);
  EXPECT_FALSE(s[2].sm_clock_mhz);
  EXPECT_EQ(*s[2].mem_clock_mhz, 1593u);
  EXPECT_FALSE(s[2].nvlink_rx_bytes_per_s);  // needs both counters
  // Each once, in metric order; NOT_SUPPORTED (ecc, SM clock) is not listed.
  EXPECT_EQ(unavailable_text(sampler),
            "temperature: GPU 0: nvmlDeviceGetTemperature: Unknown Error (code 999)\n"
            "power: GPU 0: nvmlDeviceGetPowerUsage: GPU is lost (code 15)\n"
            "nvlink: GPU 0: nvmlDeviceGetFieldValues(NVLINK_THROUGHPUT_DATA_TX): Unknown Error "
            "(code 999)\n"
            "process_utilization: GPU 0: nvmlDeviceGetProcessUtilization: Unknown Error (code "
            "999)\n");
}

TEST(GpuSampler, LostGpuHandleLeavesTheOthers) {
  FakeScript script("devices 2\nhandle 0 !15\ntemperature 1 40\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  GpuSampler sampler(*nvml, sink, options);
  ASSERT_EQ(sampler.devices().size(), 1u);
  EXPECT_EQ(sampler.devices()[0].index, 1u);
  sampler.start();
  EXPECT_TRUE(sink.wait_for([&] { return sink.samples.size() >= 2; }));
  sampler.stop();
  EXPECT_TRUE(sink.samples_of(0).empty());
  std::vector<GpuSample> s = sink.samples_of(1);
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(*s[0].temperature_c, 40u);
  EXPECT_EQ(unavailable_text(sampler),
            "devices: GPU 0: nvmlDeviceGetHandleByIndex: GPU is lost (code 15)\n");
}

TEST(GpuSampler, XidEventsAreDelivered) {
  FakeScript script("devices 2\nxid 1 30 79\nxid 0 60 13\n");
  uint64_t before_init = monotonic_now_ns();  // the fake's due times count from nvmlInit
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  GpuSampler sampler(*nvml, sink, options);
  sampler.start();
  EXPECT_TRUE(sink.wait_for([&] { return sink.xids.size() >= 2; }));
  sampler.stop();
  std::lock_guard lock(sink.mutex);
  ASSERT_EQ(sink.xids.size(), 2u);
  EXPECT_EQ(sink.xids[0].gpu, 1u);
  EXPECT_EQ(sink.xids[0].xid, 79u);
  EXPECT_EQ(sink.xids[1].gpu, 0u);
  EXPECT_EQ(sink.xids[1].xid, 13u);
  // Stamped on receipt, on CLOCK_MONOTONIC: never before the fake made them deliverable.
  EXPECT_GE(sink.xids[0].ts_ns, before_init + 30'000'000);
  EXPECT_GE(sink.xids[1].ts_ns, before_init + 60'000'000);
  EXPECT_LE(sink.xids[1].ts_ns, monotonic_now_ns());
}

TEST(GpuSampler, XidRegistrationNotSupportedSkipsThatGpuQuietly) {
  FakeScript script("devices 2\nregister_events 0 !3\nxid 0 10 13\nxid 1 20 79\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  GpuSampler sampler(*nvml, sink, options);
  sampler.start();
  EXPECT_TRUE(sink.wait_for([&] { return !sink.xids.empty(); }));
  std::this_thread::sleep_for(50ms);  // time for GPU 0's event, were it (wrongly) delivered
  sampler.stop();
  std::lock_guard lock(sink.mutex);
  ASSERT_EQ(sink.xids.size(), 1u);
  EXPECT_EQ(sink.xids[0].gpu, 1u);
  EXPECT_EQ(sink.xids[0].xid, 79u);
  EXPECT_EQ(unavailable_text(sampler), "");
}

TEST(GpuSampler, StopIsPrompt) {
  FakeScript script(
      "devices 4\nutilization 0 1:2\nutilization 1 1:2\nutilization 2 1:2\nutilization 3 1:2\n"
      "temperature 0 50\npower 0 100000\nprocs 0 1:1\nproc_util 0 1:1:1:1:1\n");
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 250ms;
  GpuSampler sampler(*nvml, sink, options);
  sampler.start();
  EXPECT_TRUE(sink.wait_for([&] { return sink.samples.size() >= 4; }));  // first pass done
  std::this_thread::sleep_for(30ms);                                     // both threads now waiting
  auto t0 = std::chrono::steady_clock::now();
  sampler.stop();
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 150ms) << "stop() must not wait out the 250 ms interval";
}

TEST(GpuSampler, PassesAreCheap) {
  std::string text = "devices 4\n";
  for (int g = 0; g < 4; ++g) {
    for (const char* m : {"utilization 1:2", "memory 1:2", "temperature 50", "power 100000",
                          "power_limit 300000", "clock_sm 1", "clock_mem 2", "pcie_tx 3",
                          "pcie_rx 4", "clocks_event 5", "ecc_corrected 6", "ecc_uncorrected 7",
                          "nvlink_tx 8", "nvlink_rx 9", "procs 1:1,2:2", "proc_util 1:1:1:1:1"}) {
      std::string line = m;
      text += line.insert(line.find(' '), " " + std::to_string(g)) + "\n";
    }
  }
  FakeScript script(text);
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  ASSERT_TRUE(nvml);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 1ms;
  GpuSampler sampler(*nvml, sink, options);
  run_passes(sampler, sink, 200);
  GpuSamplerStats st = sampler.stats();
  ASSERT_GE(st.passes, 200u);
  double mean_us = double(st.total_pass_ns) / double(st.passes) / 1000.0;
  std::printf(
      "gpu sampler: %.1f us per pass over 4 fake GPUs, every metric (max %.1f us, "
      "%llu passes, %llu skipped)\n",
      mean_us, double(st.max_pass_ns) / 1000.0, (unsigned long long)st.passes,
      (unsigned long long)st.skipped_passes);
  EXPECT_LT(mean_us, 2000.0);
}

// A process in its own pid namespace (a user namespace too, so no root is needed): NVML
// reports our view of its pid; ns_pid is its pid inside, 1.
TEST(GpuSampler, NamespacePidOfAContainedProcess) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t helper = fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    uint32_t inner_pid = 0;
    if (unshare(CLONE_NEWUSER | CLONE_NEWPID) == 0) {
      pid_t inner = fork();
      if (inner == 0) {
        pause();
        _exit(0);
      }
      inner_pid = inner > 0 ? uint32_t(inner) : 0;
    }
    if (write(pipe_fds[1], &inner_pid, sizeof(inner_pid)) != sizeof(inner_pid)) _exit(1);
    if (inner_pid) waitpid(pid_t(inner_pid), nullptr, 0);
    _exit(0);
  }
  close(pipe_fds[1]);
  uint32_t inner = 0;
  ASSERT_EQ(read(pipe_fds[0], &inner, sizeof(inner)), ssize_t(sizeof(inner)));
  close(pipe_fds[0]);
  if (inner == 0) {
    waitpid(helper, nullptr, 0);
    GTEST_SKIP() << "cannot create a user + pid namespace here (unprivileged user namespaces "
                    "disabled?): the namespace pid join is untested";
  }
  std::ostringstream text;
  text << "procs 0 " << inner << ":4096\n";
  FakeScript script(text.str());
  auto nvml = load_fake(EACGM_FAKE_NVML_FULL);
  CollectingSink sink;
  GpuSamplerOptions options;
  options.interval = 20ms;
  if (nvml) {
    GpuSampler sampler(*nvml, sink, options);
    run_passes(sampler, sink, 1);
  }
  kill(pid_t(inner), SIGKILL);
  waitpid(helper, nullptr, 0);
  EXPECT_EQ(read_ns_pid(inner), std::nullopt);  // gone
  std::lock_guard lock(sink.mutex);
  ASSERT_FALSE(sink.processes.empty());
  EXPECT_EQ(sink.processes[0].pid, inner);
  EXPECT_EQ(sink.processes[0].ns_pid, std::optional<uint32_t>(1));
  EXPECT_EQ(*sink.processes[0].used_memory_bytes, 4096u);
}

TEST(GpuSamples, ThrottleReasonBitsHaveNvmlNames) {
  const char* want[] = {"gpu_idle",
                        "applications_clocks_setting",
                        "sw_power_cap",
                        "hw_slowdown",
                        "sync_boost",
                        "sw_thermal_slowdown",
                        "hw_thermal_slowdown",
                        "hw_power_brake_slowdown",
                        "display_clock_setting"};
  for (unsigned bit = 0; bit < 9; ++bit) {
    EXPECT_EQ(throttle_reason_names(1ull << bit), std::vector<std::string>{want[bit]}) << bit;
  }
  EXPECT_EQ(throttle_reasons_text(0), "none");
  EXPECT_EQ(throttle_reasons_text(0x201), "gpu_idle,0x200");
}

// realtime - monotonic agrees with a bracket this test reads itself, to within that bracket's
// width and 20 us (the helper's own reads are never split by a preemption: it keeps the tightest
// of several)
TEST(GpuSamples, RealtimeMinusMonotonicIsReadAsOneInstant) {
  for (int i = 0; i < 20; ++i) {
    uint64_t before = monotonic_now_ns();
    uint64_t real = realtime_now_ns();
    uint64_t after = monotonic_now_ns();
    int64_t helper = realtime_minus_monotonic_ns();
    int64_t mine = int64_t(real) - int64_t(before + (after - before) / 2);
    EXPECT_LE(std::llabs(helper - mine), int64_t(after - before) + 20'000) << i;
  }
}

TEST(GpuSamples, ClockAndNamespaceHelpers) {
  EXPECT_EQ(realtime_us_to_monotonic_ns(1'700'000'000'000'000ull, 1'699'999'000'000'000'000ll),
            std::optional<uint64_t>(1'000'000'000'000ull));
  EXPECT_EQ(realtime_us_to_monotonic_ns(5, 1'000'000), std::nullopt);
  EXPECT_EQ(parse_ns_pid("Name:\tpython\nNSpid:\t4242\t17\nNSsid:\t1\n"), 17u);
  EXPECT_EQ(parse_ns_pid("NSpid:\t4242\n"), 4242u);
  EXPECT_EQ(parse_ns_pid("Name:\tx\nXNSpid:\t1\n"), std::nullopt);
  EXPECT_EQ(parse_ns_pid("Name:\tx\n"), std::nullopt);
  EXPECT_DOUBLE_EQ(milliwatts_to_watts(150250), 150.25);
  EXPECT_EQ(kib_to_bytes(3), 3072u);
}
