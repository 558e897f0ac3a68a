// The agent's metrics sink on its own: the collective counters of a node's ranks, as /metrics
// shows them.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>

#include "export/metrics.h"
#include "report/collectives.h"
#include "store/rows.h"

namespace eacgm {
namespace {

constexpr uint64_t ms = 1'000'000;

// The value of the one series of FAMILY whose labels include LABEL, if /metrics has it.
std::optional<double> series_value(const std::string& text, const std::string& family,
                                   const std::string& label) {
  std::istringstream in(text);
  std::optional<double> found;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family + "{", 0) != 0 || line.find(label) == std::string::npos) continue;
    EXPECT_FALSE(found) << "two series of " << family << " with " << label;
    found = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return found;
}

// One instance of a 2-rank collective where rank 1 joined WAIT_NS after rank 0.
CollectiveMatcher::Instance instance(uint64_t t, uint64_t wait_ns) {
  CollectiveMatcher::Instance inst;
  RankCall r0, r1;
  r0.rank = 0, r0.pid = 100, r0.ts = t, r0.end = t + wait_ns + ms;
  r1.rank = 1, r1.pid = 101, r1.ts = t + wait_ns, r1.end = t + wait_ns + ms;
  inst.calls = {r0, r1};
  PeerWait w0, w1;
  w0.wait_ns = wait_ns, w0.last_rank = 1, w0.last_pid = 101;
  w1.wait_ns = 0, w1.last_rank = 1, w1.last_pid = 101;
  inst.waits = {w0, w1};
  inst.all_ranks = true;
  return inst;
}

TEST(MetricsSink, EveryRankHasItsStragglerCountersFromItsFirstInstanceAtZero) {
  MetricsSink m("node-a");
  m.add_instance("gloo:all_reduce", instance(1'000 * ms, 30 * ms));
  const std::string text = m.text();
  // Rank 0 never joined last: its counters exist at 0, so that its first late join is an
  // increase that rate() and the straggler alert see (a counter born at 1 is not).
  EXPECT_EQ(series_value(text, "eacgm_collective_last_joined_total", "rank=\"0\""), 0.0) << text;
  EXPECT_EQ(series_value(text, "eacgm_collective_straggling_seconds_total", "rank=\"0\""), 0.0);
  // Rank 1 joined last, 30 ms late, with nothing else to explain it: all of it is straggling.
  EXPECT_EQ(series_value(text, "eacgm_collective_last_joined_total", "rank=\"1\""), 1.0);
  EXPECT_NEAR(
      series_value(text, "eacgm_collective_straggling_seconds_total", "rank=\"1\"").value_or(NAN),
      0.030, 1e-9);
  EXPECT_NEAR(
      series_value(text, "eacgm_collective_peer_wait_seconds_total", "rank=\"0\"").value_or(NAN),
      0.030, 1e-9);

  m.add_instance("gloo:all_reduce", instance(2'000 * ms, 10 * ms));
  const std::string later = m.text();
  EXPECT_EQ(series_value(later, "eacgm_collective_last_joined_total", "rank=\"0\""), 0.0);
  EXPECT_EQ(series_value(later, "eacgm_collective_last_joined_total", "rank=\"1\""), 2.0);
  EXPECT_NEAR(
      series_value(later, "eacgm_collective_straggling_seconds_total", "rank=\"1\"").value_or(NAN),
      0.040, 1e-9);
}

// How many series of FAMILY /metrics has whose labels include LABEL.
size_t series_count(const std::string& text, const std::string& family, const std::string& label) {
  std::istringstream in(text);
  size_t n = 0;
  for (std::string line; std::getline(in, line);)
    n += line.rfind(family + "{", 0) == 0 && line.find(label) != std::string::npos;
  return n;
}

CudaCallRow cuda_call(uint32_t pid) {
  CudaCallRow r;
  r.pid = pid, r.tid = pid, r.dur_ns = 5 * 1000, r.name = "cudaMalloc", r.bytes = 4096;
  return r;
}

void start(MetricsSink& m, uint32_t pid, const std::string& name) {
  ProcessRow p;
  p.pid = pid, p.name = name;
  m.add(p);
}

void exit_(MetricsSink& m, uint32_t pid) {
  ProcessExitRow e;
  e.pid = pid;
  m.add(e);
}

constexpr uint64_t s = 1'000'000'000;
constexpr uint64_t kLinger = MetricsSink::kSeriesLingerNs;

TEST(MetricsSink, AFinishedJobsSeriesGoAfterTheLingerAndNotBefore) {
  MetricsSink m("node-a");
  start(m, 100, "train");
  start(m, 101, "train_r1");
  m.add(cuda_call(100));
  m.add_instance("gloo:all_reduce", instance(1'000 * ms, 30 * ms));
  m.expire_series(10 * s);
  std::string text = m.text();
  ASSERT_EQ(series_count(text, "eacgm_calls_total", "process=\"train\""), 1u) << text;
  ASSERT_EQ(series_count(text, "eacgm_collective_peer_wait_seconds_total", "rank="), 2u);
  const size_t tracked = m.process_series();
  // calls, errors, bytes and the duration histogram; 3 collective counters per rank
  EXPECT_EQ(tracked, 4u + 6u);

  exit_(m, 100);
  exit_(m, 101);
  m.expire_series(20 * s);  // the exits are seen here: the linger starts
  m.expire_series(20 * s + kLinger - 1);
  text = m.text();
  EXPECT_EQ(series_count(text, "eacgm_calls_total", "process=\"train\""), 1u)
      << "removed before its last scrapes could read it";
  EXPECT_EQ(series_count(text, "eacgm_collective_last_joined_total", "rank="), 2u);
  EXPECT_EQ(m.process_series(), tracked);

  m.expire_series(20 * s + kLinger);
  text = m.text();
  EXPECT_EQ(series_count(text, "eacgm_calls_total", "process="), 0u) << text;
  EXPECT_EQ(series_count(text, "eacgm_call_duration_seconds_count", "process="), 0u);
  EXPECT_EQ(series_count(text, "eacgm_collective_peer_wait_seconds_total", "rank="), 0u);
  EXPECT_EQ(series_count(text, "eacgm_collective_straggling_seconds_total", "rank="), 0u);
  EXPECT_EQ(m.process_series(), 0u);
  EXPECT_EQ(m.traced_processes(), 0u);
}

// A collective instance is matched once every rank joined it, which can be after a rank's
// exit row (its last all_reduce, then its exit, then the matcher): the instance counts under
// the rank's own labels (its job, read while it lived), and the dead pid does not keep the
// series for ever (it was the leak: a pid that never exits again held them open).
TEST(MetricsSink, AnInstanceMatchedAfterARanksExitCountsAndStillExpires) {
  MetricsSink m("node-a");
  int identified = 0;
  m.identify = [&](uint32_t pid) {
    ++identified;
    JobIdentity j;
    j.job = "job7", j.rank = std::to_string(pid - 100);
    return j;
  };
  start(m, 100, "train");
  start(m, 101, "train");
  m.add_instance("gloo:all_reduce", instance(1'000 * ms, 30 * ms));
  exit_(m, 100);
  exit_(m, 101);
  m.add_instance("gloo:all_reduce", instance(2'000 * ms, 10 * ms));
  std::string text = m.text();
  EXPECT_EQ(identified, 2) << "a dead pid's identity read again (from a /proc that is gone)";
  EXPECT_EQ(series_count(text, "eacgm_collective_last_joined_total", "rank="), 2u) << text;
  EXPECT_EQ(series_value(text, "eacgm_collective_last_joined_total",
                         "job_id=\"job7\",op=\"gloo:all_reduce\",rank=\"1\""),
            2.0)
      << text;
  m.expire_series(20 * s);
  m.expire_series(20 * s + kLinger);
  text = m.text();
  EXPECT_EQ(series_count(text, "eacgm_collective_last_joined_total", "rank="), 0u) << text;
  EXPECT_EQ(m.process_series(), 0u);
}

TEST(MetricsSink, ASeriesStaysWhileAnyProcessWithItsLabelsLives) {
  MetricsSink m("node-a");
  start(m, 200, "worker");
  start(m, 201, "worker");
  m.add(cuda_call(200));
  m.add(cuda_call(201));
  exit_(m, 200);
  m.expire_series(0);
  m.expire_series(10 * kLinger);
  std::string text = m.text();
  EXPECT_EQ(series_value(text, "eacgm_calls_total", "process=\"worker\""), 2.0) << text;

  // 201 exits, and a process with the same labels starts within the linger: it goes on
  // counting in the same series, which then stays while it lives.
  exit_(m, 201);
  m.expire_series(20 * kLinger);
  start(m, 202, "worker");
  m.add(cuda_call(202));
  m.expire_series(22 * kLinger);
  text = m.text();
  EXPECT_EQ(series_value(text, "eacgm_calls_total", "process=\"worker\""), 3.0) << text;

  // A process that exec's another program leaves its old name's series to expire.
  start(m, 202, "python3");
  m.add(cuda_call(202));
  m.expire_series(23 * kLinger);
  m.expire_series(24 * kLinger);
  text = m.text();
  EXPECT_EQ(series_count(text, "eacgm_calls_total", "process=\"worker\""), 0u) << text;
  EXPECT_EQ(series_value(text, "eacgm_calls_total", "process=\"python3\""), 1.0);
}

// GPU time (the gputime layer): kernels' GPU seconds and counts per process and device; copies
// and launches count in neither, and no kernel name becomes a label.
TEST(MetricsSink, KernelsCountTheirGpuTimePerProcessAndDevice) {
  MetricsSink m("node-a");
  start(m, 300, "trainer");
  auto kernel = [](uint32_t device, uint64_t dur_ns) {
    GpuActivityRow r;
    r.pid = 300, r.kind = "kernel", r.name = "sgemm_128x64", r.device = device, r.dur_ns = dur_ns;
    return r;
  };
  m.add(kernel(0, 2 * ms));
  m.add(kernel(0, 3 * ms));
  m.add(kernel(1, 7 * ms));
  GpuActivityRow copy = kernel(0, 50 * ms);
  copy.kind = "memcpy";
  m.add(copy);
  GpuActivityRow launch = kernel(0, 1 * ms);
  launch.kind = "launch";
  m.add(launch);
  std::string text = m.text();
  EXPECT_DOUBLE_EQ(*series_value(text, "eacgm_gpu_kernel_seconds_total", "device=\"0\""), 0.005)
      << text;
  EXPECT_DOUBLE_EQ(*series_value(text, "eacgm_gpu_kernel_seconds_total", "device=\"1\""), 0.007);
  EXPECT_EQ(*series_value(text, "eacgm_gpu_kernels_total", "device=\"0\""), 2.0);
  EXPECT_EQ(text.find("sgemm"), std::string::npos) << "a kernel name as a label";
}

}  // namespace
}  // namespace eacgm
