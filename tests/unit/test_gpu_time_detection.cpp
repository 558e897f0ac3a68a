// GPU time in the detector, offline and online alike (detect/gpu_time.h): each process's GPU idle
// share per window, the window anomaly it makes when a job's GPU waits for work, and the agent's
// per-kernel models naming a slow kernel as `eacgm detect` does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "agent/detection.h"
#include "agent/node_collectives.h"
#include "detect/detector.h"
#include "detect/features.h"
#include "detect/gpu_time.h"
#include "export/metrics.h"
#include "gpu/gpu_samples.h"  // monotonic_now_ns
#include "report/collectives.h"
#include "store/reader.h"
#include "store/recording.h"

namespace eacgm {
namespace {

constexpr uint64_t kSecond = 1'000'000'000, kMs = 1'000'000;

// A process's idle share is over its GPU span only: its first window from its first execution,
// its last up to its last execution's end once its rows are all in; a window inside the span
// without executions is idle 100%; executions overlapping on two streams count once. While
// rows may still come, a window is known only once an execution ended after it.
TEST(GpuIdle, SharesOverTheProcessesGpuSpan) {
  detect::GpuIdle idle(0, kSecond);
  idle.add(7, 500 * kMs, 100 * kMs);   // window 0: from 0.5 s, busy 0.1 s of 0.5 s
  idle.add(7, 1200 * kMs, 300 * kMs);  // window 1: 1.2-1.5 s and, on another stream,
  idle.add(7, 1400 * kMs, 200 * kMs);  // 1.4-1.6 s: busy 0.4 s
  idle.add(7, 3900 * kMs, 200 * kMs);  // windows 3 and 4: 0.1 s each; window 2: none
  EXPECT_NEAR(*idle.idle_share(7, 0), 0.8, 1e-9);
  EXPECT_NEAR(*idle.idle_share(7, 1), 0.6, 1e-9);
  EXPECT_NEAR(*idle.idle_share(7, 2), 1.0, 1e-9);
  EXPECT_NEAR(*idle.idle_share(7, 3), 0.9, 1e-9);
  EXPECT_FALSE(idle.idle_share(7, 4)) << "its rows for window 4 may still come";
  EXPECT_EQ(idle.known_until(7), 3);
  EXPECT_FALSE(idle.idle_share(8, 0)) << "no GPU time";
  idle.ended(7);
  EXPECT_NEAR(*idle.idle_share(7, 4), 0.0, 1e-9) << "its span ended at 4.1 s, busy till then";
  EXPECT_FALSE(idle.idle_share(7, 5));
  EXPECT_FALSE(idle.known_until(7));
  idle.add(9, 1000 * kMs, 1000 * kMs);  // busy all of window 1
  idle.ended(9);
  EXPECT_NEAR(*idle.mean_idle_share(1), 0.3, 1e-9);  // (0.6 + 0) / 2
  EXPECT_NEAR(*idle.mean_idle_share(2), 1.0, 1e-9);  // process 9's span ended before
  idle.forget_before(2);
  EXPECT_EQ(idle.pids(), std::vector<uint32_t>{7}) << "9 ended before window 2";
}

// A duty-cycled process (its GPU time collected in slices) counts over what was collected only:
// a window no slice covers has no share (not collected is not idle), one partly covered counts
// over the covered part; its windows are known up to when the next slice is due.
TEST(GpuIdle, ADutyCycledProcessCountsOverWhatWasCollected) {
  detect::GpuIdle idle(0, kSecond);
  idle.collected(7, 0, 200 * kMs, 2 * kSecond);  // 0-0.2 s, the next at 2 s
  EXPECT_FALSE(idle.idle_share(7, 0)) << "its GPU span starts at its first execution";
  idle.add(7, 50 * kMs, 50 * kMs);  // busy 50 of the 150 ms collected from then
  EXPECT_NEAR(*idle.idle_share(7, 0), 2.0 / 3, 1e-9);
  EXPECT_FALSE(idle.idle_share(7, 1)) << "nothing collected in window 1";
  EXPECT_EQ(idle.known_until(7), 1) << "nothing will come before 2 s";
  idle.collected(7, 2 * kSecond, 200 * kMs, 4 * kSecond);
  idle.add(7, 2150 * kMs, 100 * kMs);  // runs 50 ms past the slice's end: 50 ms count
  EXPECT_NEAR(*idle.idle_share(7, 2), 0.75, 1e-9);
  EXPECT_EQ(idle.known_until(7), 3);
  EXPECT_NEAR(*idle.mean_idle_share(2), 0.75, 1e-9);
  EXPECT_FALSE(idle.mean_idle_share(3));
  idle.forget_before(3);
  idle.collected(7, 4 * kSecond, 200 * kMs, 0);  // the last: at the process's exit
  idle.ended(7);
  EXPECT_NEAR(*idle.idle_share(7, 4), 1.0, 1e-9) << "collected, and nothing ran";
  EXPECT_FALSE(idle.idle_share(7, 5));
}

// One second of a training job as both drivers see it: 20 CUDA calls and 10 executions on its
// GPU, each `busy_ms` long (about 90 ms: 10% idle; 20 ms while it waits on data: 80%).
struct JobSecond {
  std::vector<CudaCallRow> calls;
  std::vector<GpuActivityRow> executions;
};
JobSecond job_second(uint64_t t0, uint64_t busy_ms, std::mt19937& rng) {
  std::uniform_real_distribution<double> jitter(0.95, 1.05);
  JobSecond s;
  for (int i = 0; i < 20; ++i) {
    CudaCallRow c;
    c.ts_ns = t0 + uint64_t(i) * 50 * kMs, c.dur_ns = 20'000, c.pid = c.tid = 100;
    c.name = "cudaLaunchKernel";
    s.calls.push_back(c);
  }
  for (int i = 0; i < 10; ++i) {
    GpuActivityRow k;
    k.ts_ns = t0 + uint64_t(i) * 100 * kMs, k.pid = 100, k.kind = "kernel", k.stream = 7;
    k.name = "sgemm";
    k.dur_ns = busy_ms == 90 ? uint64_t(90e6 * jitter(rng)) : busy_ms * kMs;
    s.executions.push_back(k);
  }
  return s;
}

constexpr int kStallFrom = 70, kStallTo = 74;  // seconds in which the GPU waits on data

// A window anomaly of the stall: in its seconds, "GPU idle", said in units.
void expect_the_stall(const detect::Anomaly& a, uint64_t start) {
  EXPECT_GE(a.ts_ns, start + kStallFrom * kSecond);
  EXPECT_LT(a.ts_ns, start + kStallTo * kSecond);
  EXPECT_EQ(a.cause, "GPU idle");
  EXPECT_TRUE(std::regex_search(
      detect::describe_measured(a),
      std::regex(R"(^GPU idle 80% of the window \(usual ([5-9]|1[0-5])(\.[0-9]+)?%\))")))
      << detect::describe_measured(a);
}

// detect: 90 s, trained on the first half; the 4 s in which the job's GPU went idle are window
// anomalies of cause "GPU idle", said in units; the steady windows are not.
TEST(GpuIdleWindows, DetectNamesAJobsGpuWaitingForWork) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("eacgm_gpu_idle_" + std::to_string(getpid()) + ".eacgm.db"))
                         .string();
  const uint64_t start = 1000 * kSecond;
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(start));
    w.set_meta("end_monotonic_ns", std::to_string(start + 90 * kSecond));
    std::mt19937 rng(5);
    for (int s = 0; s < 90; ++s) {
      bool stalled = s >= kStallFrom && s < kStallTo;
      JobSecond j = job_second(start + uint64_t(s) * kSecond, stalled ? 20 : 90, rng);
      for (const auto& c : j.calls) w.add(c);
      for (const auto& k : j.executions) w.add(k);
    }
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  detect::FeatureTable t = detect::window_features(rec, kSecond);
  std::filesystem::remove(path);
  auto f = std::find(t.feature_names.begin(), t.feature_names.end(), "gpu_idle_pct");
  ASSERT_NE(f, t.feature_names.end());
  Eigen::Index col = f - t.feature_names.begin();
  EXPECT_NEAR(t.values(10, col), 10, 5.5);
  EXPECT_NEAR(t.values(kStallFrom + 1, col), 80, 1e-6);
  detect::DetectorModel model =
      detect::train_detector({t}, start + 45 * kSecond, detect::DetectOptions{}, nullptr);
  ASSERT_EQ(model.groups.size(), 1u);
  auto found = detect::find_anomalies(model, {t}, start + 45 * kSecond);
  ASSERT_EQ(found.size(), size_t(kStallTo - kStallFrom));
  for (const auto& a : found) expect_the_stall(a, start);
}

// The agent, the same job online: a window model of its 60 steady seconds, judged windows of 10
// more that stay quiet, then the stall's windows reported with the same cause and words. Each
// second's rows come with the first execution of the next (a window is judged once its GPU's
// rows are in: once an execution ended after it, as CUPTI hands them over in order).
TEST(GpuIdleWindows, TheAgentNamesAJobsGpuWaitingForWorkAsDetectDoes) {
  DetectionOptions o;
  o.warm_up_ns = 0;
  o.train_windows = 30;
  o.train_span_ns = 5 * kSecond;
  std::vector<AgentAnomaly> found;
  DetectionSink sink(o, [&](std::vector<AgentAnomaly>& a) {
    for (auto& x : a)
      if (x.anomaly.layer == "window") found.push_back(x);
  });
  const uint64_t start = (monotonic_now_ns() - 300 * kSecond) / kSecond * kSecond;
  std::mt19937 rng(5);
  std::vector<JobSecond> job;
  for (int s = 0; s <= 80; ++s) {
    bool stalled = s >= kStallFrom && s < kStallTo;
    job.push_back(job_second(start + uint64_t(s) * kSecond, stalled ? 20 : 90, rng));
  }
  auto second = [&](int s) {
    const JobSecond& j = job[size_t(s)];
    for (const auto& c : j.calls) sink.add(c);
    for (size_t k = s == 0 ? 0 : 1; k < j.executions.size(); ++k) sink.add(j.executions[k]);
    sink.add(job[size_t(s) + 1].executions[0]);
    HostSampleRow h;  // (the process's CPU: a traced process's windows are judged)
    for (int i = 1; i <= 10; ++i) {
      h.ts_ns = start + uint64_t(s) * kSecond + uint64_t(i) * 100 * kMs, h.interval_ns = 100 * kMs;
      h.id = 100, h.oncpu_ns = 50 * kMs;
      sink.add(h);
    }
    sink.flush();
  };
  int s = 0;
  for (; s < 60; ++s) second(s);
  for (int i = 0; i < 3000 && sink.models() < 3; ++i) {  // (for the refit thread, not a bound)
    sink.flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(sink.models(), 3u) << "cudaLaunchKernel's, sgemm's and the job's window model";
  for (; s < kStallFrom; ++s) second(s);
  ASSERT_TRUE(found.empty()) << found.front().anomaly.cause;
  for (; s < 80; ++s) second(s);
  ASSERT_FALSE(found.empty());
  for (const AgentAnomaly& f : found) expect_the_stall(f.anomaly, start);
}

// The agent models each kernel's GPU time by its name, as detect does: a burst of executions of
// one kernel 25x its usual time is "slow kernel: NAME" (layer gpu); executions of the other
// kernel 2.5x and 0.3 ms slower stay below the same --min-slowdown and 1 ms excess. Kernel names
// are no /metrics labels (an unbounded set, as Python functions).
TEST(DetectionSink, ASlowKernelIsNamedAsDetectNamesIt) {
  DetectionOptions o;
  o.warm_up_ns = 0;
  o.train_span_ns = 5 * kSecond;
  std::vector<detect::Anomaly> found;
  DetectionSink sink(o, [&](std::vector<AgentAnomaly>& a) {
    for (auto& x : a) found.push_back(x.anomaly);
  });
  std::mt19937 rng(21);
  std::uniform_int_distribution<uint64_t> dur(190'000, 210'000);
  const char* const names[2] = {"axpy(float*, float const*, float, int)", "relu_kernel"};
  auto kernel = [&](uint64_t ts, int which, uint64_t d) {
    GpuActivityRow k;
    k.ts_ns = ts, k.dur_ns = d, k.pid = 42, k.kind = "kernel", k.name = names[which];
    k.stream = 7;
    sink.add(k);
    GpuActivityRow launch = k;  // (launch records and copies are no kernels' calls)
    launch.kind = "launch", launch.name = "cudaLaunchKernel";
    sink.add(launch);
  };
  const uint64_t start = monotonic_now_ns() - 100 * kSecond;  // all ended long ago
  auto step = [&](int i, uint64_t axpy_ns, uint64_t relu_ns) {
    kernel(start + uint64_t(i) * 20 * kMs, 0, axpy_ns);
    kernel(start + uint64_t(i) * 20 * kMs + 5 * kMs, 1, relu_ns);
    if (i % 100 == 99) sink.flush();
  };
  for (int i = 0; i < 2000; ++i) step(i, dur(rng), dur(rng));  // 40 s
  for (int i = 0; i < 3000 && sink.models() < 2; ++i) {
    sink.flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(sink.models(), 2u);
  ASSERT_TRUE(found.empty()) << found.front().cause;
  for (int i = 2000; i < 2200; ++i)  // 4 s: every 20th relu 5 ms, every 20th axpy 0.5 ms
    step(i, i % 20 == 10 ? 500'000 : dur(rng), i % 20 == 0 ? 5'000'000 : dur(rng));
  sink.flush();
  ASSERT_GE(found.size(), 5u) << "of the 10 slow relu_kernel executions";
  for (const auto& a : found) {
    EXPECT_EQ(a.layer, "gpu");
    EXPECT_EQ(a.cause, "slow kernel: relu_kernel");
    EXPECT_EQ(a.dur_ns, 5'000'000u);
    GpuActivityRow on_stream_7;
    on_stream_7.stream = 7;
    EXPECT_EQ(a.tid, detect::stream_thread(on_stream_7));
  }
  MetricsSink metrics("node-a");
  metrics.set_models(sink.states(), sink.models());
  std::string text = metrics.text();
  EXPECT_EQ(text.find("relu_kernel"), std::string::npos) << text;
  EXPECT_NE(text.find("eacgm_detector_models 2"), std::string::npos) << text;
}

// NCCL's all_reduce on the GPU, two ranks: rank 1's kernels start 0-20 ms after rank 0's (its
// wait), both end ~0.5 ms after rank 1 joined; in every 10th of the steps after `slow_from`
// the collective itself takes 8 ms there (a slow link). Which steps were slow is `faulty`.
struct GpuAllReduce {
  std::vector<GpuCollectiveRow> rows;  // in enqueue order, rank 0 first
  std::set<uint64_t> faulty;           // their rank 0 GPU start
};
GpuAllReduce gpu_all_reduce(uint64_t start, int steps, int slow_from) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint64_t> late(0, 20 * kMs), own(450'000, 550'000);
  GpuAllReduce out;
  for (int k = 0; k < steps; ++k) {
    uint64_t t = start + uint64_t(k) * 25 * kMs, joined = t + late(rng);
    bool slow = k >= slow_from && k % 10 == 0;
    uint64_t end = joined + (slow ? 8 * kMs : own(rng));
    if (slow) out.faulty.insert(t);
    for (int rank : {0, 1}) {
      GpuCollectiveRow r;
      r.name = "ncclAllReduce";
      r.pid = r.tid = uint32_t(100 + rank);
      r.comm_hash = 0xfeedbeefcafe0001ull, r.seq = k, r.rank = rank, r.nranks = 2;
      r.bytes = 4 << 20;
      r.ts_ns = t - 100'000;  // enqueued 100 us before rank 0's kernels started
      r.has_gpu_time = true;
      r.gpu_start_ns = rank == 0 ? t : joined;
      r.gpu_dur_ns = end - r.gpu_start_ns;
      r.dur_ns = end + 50'000 - r.ts_ns;
      out.rows.push_back(r);
    }
  }
  return out;
}

// How many of `found` are slow steps' ranks (each must be one, named as such).
size_t slow_steps_named(const std::vector<detect::Anomaly>& found, const GpuAllReduce& job,
                        uint64_t start) {
  size_t n = 0;
  for (const auto& a : found) {
    EXPECT_EQ(a.cause, "slow collective: ncclAllReduce on the GPU");
    // rank 0's row starts at the step's start, rank 1's when it joined (within the step)
    uint64_t step = start + (a.ts_ns - start) / (25 * kMs) * (25 * kMs);
    EXPECT_TRUE(job.faulty.count(step)) << "a step that was not slow on the GPU: " << a.ts_ns;
    n += job.faulty.count(step);
  }
  return n;
}

// detect models each NCCL collective's own time on the GPU, net of its wait for the last rank:
// the steps slow on the GPU are "slow collective: ncclAllReduce on the GPU", the ones where
// rank 0 only waited (up to 20 ms, far longer than the slow steps' 8 ms) are not.
TEST(GpuCollectiveModels, DetectNamesACollectiveSlowOnTheGpuAndNotAWaitForAPeer) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("eacgm_gpu_nccl_" + std::to_string(getpid()) + ".eacgm.db"))
                         .string();
  const uint64_t start = 1000 * kSecond;
  GpuAllReduce job = gpu_all_reduce(start, 3000, 2000);
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(start));
    w.set_meta("end_monotonic_ns", std::to_string(start + 80 * kSecond));
    for (const auto& r : job.rows) w.add(r);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  Collectives collectives(rec);
  std::vector<detect::FeatureTable> tables = detect::call_features(rec, &collectives);
  std::filesystem::remove(path);
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].group, "comm/ncclAllReduce on the GPU");
  uint64_t train_end = start + 2000 * 25 * kMs;
  detect::DetectorModel model =
      detect::train_detector(tables, train_end, detect::DetectOptions{}, nullptr);
  auto found = detect::find_anomalies(model, tables, train_end);
  ASSERT_FALSE(found.empty());
  EXPECT_GE(slow_steps_named(found, job, start), job.faulty.size())
      << "of " << job.faulty.size() << " slow steps' 2 ranks";
}

// The agent the same online: NodeCollectives matches the ranks' GPU rows, the detector's model
// of "ncclAllReduce on the GPU" judges each one's own time there.
TEST(GpuCollectiveModels, TheAgentNamesACollectiveSlowOnTheGpuAsDetectDoes) {
  DetectionOptions o;
  o.warm_up_ns = 0;
  o.train_span_ns = 5 * kSecond;
  std::vector<detect::Anomaly> found;
  DetectionSink sink(o, [&](std::vector<AgentAnomaly>& a) {
    for (auto& x : a) found.push_back(x.anomaly);
  });
  NodeCollectives collectives([](uint32_t) { return std::string(); });
  sink.use_collectives(collectives);
  const uint64_t start = monotonic_now_ns() - 200 * kSecond;  // all ended long ago
  GpuAllReduce job = gpu_all_reduce(start, 3000, 2000);
  auto feed = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      collectives.add(job.rows[i]);  // first, as in the agent's fanout
      sink.add(job.rows[i]);
      if (i % 80 == 79) sink.flush();
    }
    sink.flush();
  };
  feed(0, 4000);  // 2,000 healthy steps
  for (int i = 0; i < 3000 && sink.models() == 0; ++i) {  // (for the refit thread, not a bound)
    sink.flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(sink.models(), 1u);
  ASSERT_TRUE(found.empty()) << found.front().cause;
  feed(4000, job.rows.size());
  ASSERT_FALSE(found.empty());
  EXPECT_GE(slow_steps_named(found, job, start), job.faulty.size() / 2)
      << "of " << job.faulty.size() << " slow steps";
}

}  // namespace
}  // namespace eacgm
