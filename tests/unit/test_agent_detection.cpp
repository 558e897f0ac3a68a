// The agent's online detection: window features as rows arrive, deferred refits, models saved
// and resumed, the anomalies store.
#include <gtest/gtest.h>
#include <sched.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "agent/agent.h"
#include "agent/anomaly_reporter.h"
#include "agent/call_duty.h"
#include "store/agent_anomalies.h"
#include "agent/detection.h"
#include "agent/flight.h"
#include "agent/match_filter.h"
#include "agent/node_collectives.h"
#include "agent/windows.h"
#include "detect/online.h"
#include "gpu/gpu_samples.h"
#include "probe/job_identity.h"
#include "store/reader.h"
#include "store/sqlite_util.h"
#include "util/error.h"

namespace eacgm {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

size_t feature(const std::string& name) {
  const auto& names = OnlineWindows::feature_names();
  return size_t(std::find(names.begin(), names.end(), name) - names.begin());
}

// A DetectionSink that judges calls from the first one and models an operation from 5 s of its
// calls; its anomalies are collected in `found`.
struct QuickSink {
  static DetectionOptions options() {
    DetectionOptions o;
    o.warm_up_ns = 0;
    o.train_span_ns = 5 * kSecond;
    return o;
  }
  std::vector<detect::Anomaly> found;
  DetectionSink sink{options(), [this](std::vector<AgentAnomaly>& a) {
                       for (auto& x : a) found.push_back(x.anomaly);
                     }};
  // an aten::mm call of thread 42, and the time one usually takes (90-110 us)
  void mm(uint64_t ts, uint64_t ns) {
    TorchCallRow t;
    t.ts_ns = ts, t.dur_ns = ns, t.pid = t.tid = 42, t.name = "aten::mm";
    sink.add(t);
  }
  std::mt19937 rng{9};
  uint64_t usual_mm_ns() { return std::uniform_int_distribution<uint64_t>(90'000, 110'000)(rng); }
  // step(i) for 2,000 steps, a flush every 100, then a wait until `models` models are fitted
  // (for the refit thread, not a bound: a fit of a few thousand calls takes milliseconds)
  void train(const std::function<void(int)>& step, size_t models) {
    for (int i = 0; i < 2000; ++i) {
      step(i);
      if (i % 100 == 99) sink.flush();
    }
    for (int i = 0; i < 3000 && sink.models() < models; ++i) {
      sink.flush();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
};

HostSampleRow process_sample(uint32_t pid, uint64_t ts, uint64_t runq_ns, uint64_t oncpu_ns) {
  HostSampleRow r;
  r.ts_ns = ts;
  r.interval_ns = kSecond / 10;
  r.scope = HostScope::Process;
  r.id = pid;
  r.runq_wait_ns = runq_ns;
  r.oncpu_ns = oncpu_ns;
  return r;
}

// One traced process for 10 s: 100 calls and 10 samples a second. It counts from its third
// window (1003, a change); windows are judged only once no counted process started or ended in
// them or the two before; untraced processes' samples are not counted; rates are log(1 + x).
// A process that lives less than three windows changes nothing.
TEST(OnlineWindows, FeaturesOfTheTracedProcessesOnceTheirSetIsSteady) {
  OnlineWindows w(kSecond, kSecond / 4);
  uint64_t t0 = 1000 * kSecond;
  for (uint64_t ms = 0; ms < 10'000; ms += 10) w.add_call("cuda", 7, t0 + ms * 1'000'000, 20'000);
  for (uint64_t ms = 100; ms <= 10'000; ms += 100) {
    w.add(process_sample(7, t0 + ms * 1'000'000, 1'000'000, 50'000'000));
    w.add(process_sample(8, t0 + ms * 1'000'000, 90'000'000, 90'000'000));  // not traced
  }
  for (uint64_t ms = 6000; ms < 7500; ms += 10)  // a tool that runs 1.5 s, from window 1006
    w.add_call("cuda", 9, t0 + ms * 1'000'000, 5'000'000);
  w.exited(9, t0 + 7500ull * 1'000'000);
  EXPECT_EQ(w.take_complete(t0 + 2 * kSecond).ts_ns.size(), 0u);  // not counted yet
  EXPECT_EQ(w.take_complete(t0 + 5 * kSecond + kSecond / 5).ts_ns.size(), 0u)
      << "window 1003 (the process counts from it) and the two after are not judged";
  w.exited(7, t0 + 9 * kSecond + kSecond / 2);
  detect::FeatureTable t = w.take_complete(t0 + 20 * kSecond);
  ASSERT_EQ(t.ts_ns.size(), 3u);  // windows 1006-1008; 1009 holds the exit
  EXPECT_EQ(t.ts_ns.front(), t0 + 6 * kSecond);
  EXPECT_EQ(t.feature_names, OnlineWindows::feature_names());
  Eigen::Index r = 1;
  EXPECT_NEAR(t.values(r, Eigen::Index(feature("cuda_calls_per_s"))), std::log1p(100.0), 1e-9);
  EXPECT_NEAR(t.values(r, Eigen::Index(feature("cuda_call_log_duration_us"))), std::log(20.0),
              1e-9);
  EXPECT_NEAR(t.values(r, Eigen::Index(feature("runq_wait_ms_per_s"))), std::log1p(10.0), 1e-9);
  EXPECT_NEAR(t.values(r, Eigen::Index(feature("cpu_cores"))), std::log1p(0.5), 1e-9);
  EXPECT_EQ(t.values(r, Eigen::Index(feature("comm_calls_per_s"))), 0.0);
  EXPECT_EQ(w.traced_processes(), 0u);
}

// A sample counts what happened over its interval: one the loaded machine took late (300 ms
// where 100 ms is usual) across two windows gives each its share, so a process on a CPU half
// the time reads 0.5 cores in both (by the sample's middle, the first read 0.55, the second
// 0.45; on this 2-core VM such a window once read 2.7 cores).
TEST(OnlineWindows, ASampleAcrossTwoWindowsCountsInEachByItsShare) {
  OnlineWindows w(kSecond, kSecond / 4);
  uint64_t t0 = 1000 * kSecond;
  for (uint64_t ms = 0; ms < 10'000; ms += 10) w.add_call("cuda", 7, t0 + ms * 1'000'000, 20'000);
  for (uint64_t ms = 100; ms <= 10'000; ms += 100) {
    if (ms == 6900 || ms == 7000) continue;  // late: the next sample covers 6.8-7.1 s
    HostSampleRow r = process_sample(7, t0 + ms * 1'000'000, 0, 50'000'000);
    if (ms == 7100) r.interval_ns = 3 * kSecond / 10, r.oncpu_ns = 150'000'000;
    w.add(r);
  }
  detect::FeatureTable t = w.take_complete(t0 + 20 * kSecond);
  ASSERT_GE(t.ts_ns.size(), 2u);
  ASSERT_EQ(t.ts_ns[0], t0 + 6 * kSecond);
  for (Eigen::Index r : {0, 1})
    EXPECT_NEAR(t.values(r, Eigen::Index(feature("cpu_cores"))), std::log1p(0.5), 1e-9)
        << "window " << r;
  auto shares = detect::window_shares(-50, 250, 0, 100);
  ASSERT_EQ(shares.size(), 4u);
  EXPECT_EQ(shares[0].first, -1);
  EXPECT_NEAR(shares[0].second, 1.0 / 6, 1e-12);
  EXPECT_NEAR(shares[1].second, 1.0 / 3, 1e-12);
  EXPECT_NEAR(shares[3].second, 1.0 / 6, 1e-12);
  EXPECT_EQ(shares[3].first, 2);
  shares = detect::window_shares(100, 100, 0, 100);  // no interval: its window, all of it
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_EQ(shares[0], (std::pair<int64_t, double>{1, 1.0}));
}

// The agent's own flight recording takes CPUs from the jobs on a small node: the windows it
// overlaps count as changes (the window and the two after are neither judged nor learnt), and
// a busy time in windows already handed out, or ending before it starts, changes nothing.
TEST(OnlineWindows, WindowsInWhichTheAgentWroteARecordingAreNotJudged) {
  OnlineWindows w(kSecond, kSecond / 4);
  uint64_t t0 = 1000 * kSecond;
  for (uint64_t ms = 0; ms < 14'000; ms += 10) w.add_call("cuda", 7, t0 + ms * 1'000'000, 20'000);
  EXPECT_EQ(w.take_complete(t0 + 6 * kSecond + kSecond / 2).ts_ns.size(), 0u)
      << "window 1003 (the process counts from it) and the two after are not judged";
  w.quiet(t0 + 5 * kSecond, t0 + 5 * kSecond + kSecond / 2);  // handed out already: no effect
  w.quiet(t0 + 12 * kSecond, t0 + 11 * kSecond);              // ends before it starts
  w.quiet(t0 + 8 * kSecond + kSecond / 5, t0 + 9 * kSecond + kSecond / 10);  // 1008-1009
  detect::FeatureTable t = w.take_complete(t0 + 20 * kSecond);
  std::vector<uint64_t> judged;
  for (uint64_t ts : t.ts_ns) judged.push_back(ts / kSecond - 1000);
  EXPECT_EQ(judged, (std::vector<uint64_t>{6, 7, 12, 13}));
}

// A lull (calls fall below a tenth of recent windows') is held back: a job tearing down (no
// calls for seconds, then an exit) is never judged; a pause the calls return from is judged once
// they do, in time order; a lull that lasts while the process lives (a stall) is judged once it
// is kHoldNs (10 windows) old. A window whose calls merely halve is judged at once.
TEST(OnlineWindows, ALullIsHeldUntilTheJobEndsResumesOrStaysStalled) {
  auto run = [](uint64_t lull_from, uint64_t lull_to, uint64_t exit_at, uint64_t half_at) {
    OnlineWindows w(kSecond, kSecond / 4);
    uint64_t t0 = 1000 * kSecond;
    for (uint64_t ms = 0; ms < 40'000; ms += 10) {
      uint64_t s = ms / 1000;
      if (s >= exit_at) break;
      if (s >= lull_from && s < lull_to) continue;
      if (s == half_at && ms % 20) continue;
      w.add_call("torch", 7, t0 + ms * 1'000'000, 20'000);
    }
    for (uint64_t ms = 100; ms < std::min<uint64_t>(exit_at, 40) * 1000; ms += 100)
      w.add(process_sample(7, t0 + ms * 1'000'000, 0, 50'000'000));
    if (exit_at < 40) w.exited(7, t0 + exit_at * kSecond + kSecond / 2);
    std::vector<std::pair<uint64_t, uint64_t>> got;  // (window, when it was handed out)
    for (uint64_t now = 1; now <= 55; ++now)
      for (uint64_t ts : w.take_complete(t0 + now * kSecond + kSecond / 2).ts_ns)
        got.push_back({ts / kSecond - 1000, now});
    return got;
  };
  auto windows = [](const std::vector<std::pair<uint64_t, uint64_t>>& got) {
    std::vector<uint64_t> v;
    for (auto [window, at] : got) v.push_back(window);
    return v;
  };
  auto range = [](uint64_t from, uint64_t to) {
    std::vector<uint64_t> v;
    for (uint64_t i = from; i < to; ++i) v.push_back(i);
    return v;
  };
  // teardown: no calls from window 12, exit in 16: 12-15 never judged (nor 16-18, the change)
  EXPECT_EQ(windows(run(12, 40, 16, 99)), range(6, 12));
  // a pause of windows 12-13: judged when the calls come back, in order, then the rest
  auto pause = run(12, 14, 99, 99);
  EXPECT_EQ(windows(pause), range(6, 40));
  for (auto [window, at] : pause)
    if (window == 12 || window == 13) EXPECT_EQ(at, 15u) << "window " << window;  // with 14
  // a stall from window 12 on, the process alive: each window judged 10 windows later
  auto stall = run(12, 40, 99, 99);
  EXPECT_EQ(windows(stall), range(6, 40));
  for (auto [window, at] : stall)
    if (window >= 12) EXPECT_EQ(at, window + 10u) << "window " << window;
  // half the calls in window 12: judged at once, as every window before it
  for (auto [window, at] : run(99, 99, 99, 12)) EXPECT_EQ(at, window + 1) << "window " << window;
}

// The duty-cycled probes' timeline: every window covered until the first pause; then the
// share of a window the probes were on, spans closed and the one still open.
TEST(CallDutyTimeline, TheShareOfAWindowTheProbesWereOn) {
  CallDutyTimeline d;
  EXPECT_FALSE(d.cycled());
  EXPECT_EQ(d.on_share(5 * kSecond, 6 * kSecond), 1.0);
  d.set(false, 10 * kSecond);
  d.set(false, 11 * kSecond);  // (no change)
  d.set(true, 20 * kSecond + kSecond / 4);
  EXPECT_TRUE(d.cycled());
  EXPECT_EQ(d.on_share(9 * kSecond, 10 * kSecond), 1.0);
  EXPECT_DOUBLE_EQ(d.on_share(9 * kSecond + kSecond / 2, 10 * kSecond + kSecond / 2), 0.5);
  EXPECT_EQ(d.on_share(15 * kSecond, 16 * kSecond), 0.0);
  EXPECT_DOUBLE_EQ(d.on_share(20 * kSecond, 21 * kSecond), 0.75);
  EXPECT_EQ(d.on_share(30 * kSecond, 31 * kSecond), 1.0);  // on since 20.25 s
  d.set(false, 40 * kSecond);
  EXPECT_EQ(d.on_share(40 * kSecond, 41 * kSecond), 0.0);
  EXPECT_DOUBLE_EQ(d.on_share(5 * kSecond, 45 * kSecond), (5 + 19.75) / 40);
}

// The heat of the duty-cycled calls: the most one thread made in one second (by the calls' own
// times), since the last take; a row late for a second already passed is not counted.
TEST(CallHeat, TheMostCallsOneThreadMadeInASecond) {
  CallHeat heat;
  auto torch = [&](uint32_t tid, uint64_t ts) {
    TorchCallRow r;
    r.tid = tid, r.ts_ns = ts;
    heat.add(r);
  };
  for (int i = 0; i < 300; ++i) torch(1, 10 * kSecond + uint64_t(i) * 3'000'000);  // 0.9 s
  for (int i = 0; i < 200; ++i) torch(2, 10 * kSecond + uint64_t(i) * 4'000'000);
  CudaCallRow c;
  c.tid = 2, c.ts_ns = 10 * kSecond + kSecond / 2;
  heat.add(c);
  EXPECT_EQ(heat.take(), 300u);
  EXPECT_EQ(heat.take(), 0u);
  for (int i = 0; i < 50; ++i) torch(1, 11 * kSecond + uint64_t(i));
  torch(1, 10 * kSecond + kSecond * 9 / 10);  // (late)
  EXPECT_EQ(heat.take(), 50u) << "a new second counts from zero";
}

// The duty cycle's decisions. ON/PERIOD cycles from the start, phases aligned on the clock;
// "full" never; "auto" keeps the probes on until a thread made kHotCallsPerSecond in a second,
// then cycles (2s/20s), and goes back to every call after a whole on phase whose hottest thread
// made under half that.
TEST(CallDutyCycle, FixedAutoAndFull) {
  using A = CallDutyCycle::Action;
  auto setting = [](const std::string& text) {
    CallDutySetting s;
    std::string why;
    EXPECT_TRUE(parse_call_duty(text, s, why)) << text << ": " << why;
    return s;
  };
  CallHeat heat;
  CallDutyCycle fixed(setting("1s/4s"), heat);
  EXPECT_EQ(fixed.step(100 * kSecond + kSecond / 2), A::None);
  EXPECT_EQ(fixed.step(101 * kSecond + kSecond / 5), A::Pause);
  EXPECT_EQ(fixed.step(103 * kSecond), A::None);
  EXPECT_EQ(fixed.step(104 * kSecond + 1), A::Resume);
  EXPECT_EQ(fixed.ratio(), 0.25);
  CallDutyCycle full(setting("full"), heat);
  EXPECT_EQ(full.step(101 * kSecond + kSecond / 5), A::None);
  EXPECT_EQ(full.ratio(), 1.0);

  auto hot = [&](uint64_t second, uint32_t calls) {
    for (uint32_t i = 0; i < calls; ++i) {
      TorchCallRow r;
      r.tid = 7, r.ts_ns = second * kSecond + i * (kSecond / calls);
      heat.add(r);
    }
  };
  CallDutyCycle automatic(setting("auto"), heat);
  hot(104, kHotCallsPerSecond - 1);
  EXPECT_EQ(automatic.step(105 * kSecond), A::None) << "not hot yet";
  EXPECT_EQ(automatic.ratio(), 1.0);
  hot(105, kHotCallsPerSecond);
  EXPECT_EQ(automatic.step(105 * kSecond + kSecond / 2), A::None) << "a second since the last look";
  EXPECT_EQ(automatic.step(106 * kSecond + 1), A::Pause) << "hot: cycled, and 106 s is off";
  EXPECT_TRUE(automatic.cycling());
  EXPECT_NEAR(automatic.ratio(), 0.1, 1e-12);
  EXPECT_EQ(automatic.step(119 * kSecond), A::None);
  EXPECT_EQ(automatic.step(120 * kSecond + 1), A::Resume);
  hot(120, kHotCallsPerSecond / 2);
  EXPECT_EQ(automatic.step(122 * kSecond), A::Pause) << "still hot enough to stay cycled";
  EXPECT_EQ(automatic.step(140 * kSecond), A::Resume);
  hot(140, kHotCallsPerSecond / 2 - 1);
  EXPECT_EQ(automatic.step(142 * kSecond), A::None) << "light again: every call";
  EXPECT_FALSE(automatic.cycling());
  EXPECT_EQ(automatic.ratio(), 1.0);

  CallDutySetting bad;
  std::string why;
  for (const char* text : {"2s/1s", "100ms/1s", "auto2", "", "nan/1s"})
    EXPECT_FALSE(parse_call_duty(text, bad, why)) << text;
}

// With --call-duty the torch operators are traced 2 s of every 10 s. A window the probes
// covered half or more of counts its calls at their rate over the covered share (window 1020
// is half covered: 50 calls read 100 a second); the windows between keep the last covered
// window's rates and durations, so that no off phase reads as a lull; the windows before the
// job's first covered one are neither judged nor learnt. A lull seen while the probes are on
// (windows 1030-1031) lasts only as long as they are: the off phase after it keeps the rates of
// the last window in which the job ran.
TEST(OnlineWindows, AnOffPhaseOfTheDutyCycledCallsKeepsTheirLastRates) {
  CallDutyTimeline duty;
  OnlineWindows w(kSecond, kSecond / 4);
  w.use_duty(&duty);
  uint64_t t0 = 1000 * kSecond;
  auto ms_at = [&](double s) { return t0 + uint64_t(s * 1000) * 1'000'000; };
  const std::vector<std::pair<double, double>> on = {
      {0, 2}, {10, 12}, {20.5, 22.5}, {30, 32}, {40, 42}};
  for (auto [from, to] : on) {
    if (from > 0) duty.set(true, ms_at(from));
    duty.set(false, ms_at(to));
  }
  for (uint64_t ms = 0; ms < 40'000; ms += 10) {  // rows in time order, as they come
    bool traced = false;
    for (auto [from, to] : on) traced |= ms >= from * 1000 && ms < to * 1000 && from != 30;
    if (traced) w.add_call("torch", 7, t0 + ms * 1'000'000, 20'000);  // (30-32: a stall)
    if (ms % 100 == 0 && ms > 0) w.add(process_sample(7, t0 + ms * 1'000'000, 0, 50'000'000));
  }
  detect::FeatureTable t = w.take_complete(t0 + 41 * kSecond);
  std::map<uint64_t, Eigen::Index> row;
  for (size_t r = 0; r < t.ts_ns.size(); ++r) row[t.ts_ns[r] / kSecond - 1000] = Eigen::Index(r);
  std::vector<uint64_t> judged;
  for (auto [window, r] : row) judged.push_back(window);
  std::vector<uint64_t> expected;
  for (uint64_t i = 10; i < 40; ++i) expected.push_back(i);
  EXPECT_EQ(judged, expected) << "1003-1005 follow the process's start; 1006-1009 come before "
                                 "its first covered window";
  auto rate = [&](uint64_t window) {
    return t.values(row.at(window), Eigen::Index(feature("torch_calls_per_s")));
  };
  auto duration = [&](uint64_t window) {
    return t.values(row.at(window), Eigen::Index(feature("torch_call_log_duration_us")));
  };
  for (uint64_t window : {10, 11, 12, 15, 19, 20, 21, 22, 23, 29, 32, 35, 39}) {
    EXPECT_NEAR(rate(window), std::log1p(100.0), 1e-9) << "window " << window;
    EXPECT_NEAR(duration(window), std::log(20.0), 1e-9) << "window " << window;
  }
  EXPECT_EQ(rate(30), 0.0);
  EXPECT_EQ(rate(31), 0.0);
  for (uint64_t window : {15, 35})
    EXPECT_NEAR(t.values(row.at(window), Eigen::Index(feature("cpu_cores"))), std::log1p(0.5),
                1e-9);
}

// Deferred refits: due groups are handed out once, scoring goes on meanwhile, and the model
// installed later judges; models go through JSON and resume in a new detector.
TEST(OnlineDetector, RefitsHandedOutAndModelsResumed) {
  detect::OnlineOptions o;
  o.min_samples = 100;
  o.min_samples_by_layer["window"] = 1000;
  o.refit_inline = false;
  detect::OnlineDetector d(o);
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(0.0, 0.05);
  auto batch = [&](uint64_t t, int n, double us) {
    detect::FeatureTable b;
    b.group = "cuda/cudaMemcpy";
    b.layer = "cuda";
    b.name = "cudaMemcpy";
    b.feature_names = {"log_duration_us"};
    b.values.resize(n, 1);
    for (int i = 0; i < n; ++i) {
      b.ts_ns.push_back(t + uint64_t(i) * 1'000'000);
      b.dur_ns.push_back(uint64_t(us * 1e3));
      b.values(i, 0) = std::log(us) + noise(rng);
    }
    return b;
  };
  EXPECT_TRUE(d.observe(batch(0, 150, 100)).empty());
  auto jobs = d.take_due_refits();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].training.group, "cuda/cudaMemcpy");
  EXPECT_EQ(jobs[0].training.values.rows(), 150);
  EXPECT_TRUE(d.take_due_refits().empty()) << "a job out is not handed out again";
  EXPECT_TRUE(d.observe(batch(kSecond, 10, 5000)).empty()) << "no model yet: no verdicts";
  d.install(jobs[0].training.group, detect::fit_group(jobs[0]), jobs[0].at_ns);
  ASSERT_NE(d.model("cuda", "cudaMemcpy"), nullptr);
  auto found = d.observe(batch(2 * kSecond, 5, 5000));
  ASSERT_EQ(found.size(), 5u);
  EXPECT_EQ(found[2].row, 2u);
  EXPECT_EQ(detect::cause_kind(found[0].cause), "slow cuda call");

  detect::DetectorModel saved = detect::detector_from_json(detect::detector_to_json(d.models()));
  saved.groups[0].dispersion = 4;  // as an agent measured it over its history
  detect::OnlineDetector resumed(o);
  resumed.load(saved);
  EXPECT_EQ(resumed.fitted(), 1u);
  EXPECT_EQ(resumed.observe(batch(3 * kSecond, 5, 5000)).size(), 5u) << "judges at once";
  EXPECT_TRUE(resumed.observe(batch(4 * kSecond, 5, 100)).empty());
  // its first refit, on seconds of history (too few to measure a spread), keeps the saved one
  resumed.observe(batch(5 * kSecond, 150, 100));
  auto refits = resumed.take_due_refits();
  ASSERT_EQ(refits.size(), 1u);
  EXPECT_DOUBLE_EQ(refits[0].dispersion, 4.0);
}

// A window model's first fit can give none: the CI's noisy first seconds (a Gloo job beside the
// traced one) starved 5 of its 30 windows, which training leaves out, and 25 were too few. The
// next try came a refit period (60 s) later; now it comes once a quarter more windows are in.
// (Since session 66 starved windows count while three quarters remain: 8 of 30 here.)
TEST(OnlineDetector, AFitThatGaveNoModelIsTriedAgainSoonNotARefitPeriodLater) {
  detect::OnlineOptions o;
  o.min_samples_by_layer["window"] = 30;
  o.refit_inline = false;
  o.refit_every_ns = 60 * kSecond;
  detect::OnlineDetector d(o);
  std::mt19937_64 rng(2);
  std::normal_distribution<double> noise(0.0, 0.02);
  uint64_t t = 1000 * kSecond;
  auto window = [&](bool starved) {
    detect::FeatureTable w;
    w.group = w.layer = w.name = "window";
    w.feature_names = {"cpu_cores", "runq_wait_ms_per_s"};
    w.values.resize(1, 2);
    w.values(0, 0) = (starved ? 0.2 : 1.0) + noise(rng);
    w.values(0, 1) = (starved ? 60.0 : 3.0) + noise(rng);
    w.ts_ns.push_back(t);
    w.dur_ns.push_back(kSecond / 2);
    t += kSecond / 2;
    return w;
  };
  for (int i = 0; i < 30; ++i) d.observe(window(i % 4 == 0));  // 8 starved
  auto jobs = d.take_due_refits();
  ASSERT_EQ(jobs.size(), 1u);
  auto none = detect::fit_group(jobs[0]);
  EXPECT_FALSE(none.has_value()) << "22 windows left are fewer than three quarters of 30";
  d.install("window", std::move(none), jobs[0].at_ns);
  size_t windows = 0, tries = 0;
  while (!d.model("window", "window") && windows < 120) {  // 120: the refit period
    d.observe(window(false));
    ++windows;
    for (auto& j : d.take_due_refits()) ++tries, d.install("window", detect::fit_group(j), j.at_ns);
  }
  EXPECT_LE(windows, 10u) << "a model from the 7th or 8th healthy window on, not after 60 s";
  EXPECT_EQ(tries, 1u) << "not a try per window";
}

// The log line says how unusual a call was, in words: its own burst, or the burst of its
// process that took it along (a slow cudaMemcpy beside slow launches).
TEST(AnomalyReporter, SaysHowUnusualInWords) {
  detect::Anomaly a;
  a.dur_ns = 10'100'000, a.usual_us = 101;
  a.burst = 9, a.burst_expected = 0.012, a.burst_window_ns = 1'700'000'000;
  EXPECT_EQ(unusual_text(a), "100x its usual 0.1 ms; 9 such calls in 1.7 s where 0.012 are usual");
  a.burst_of = "cudaLaunchKernel";
  EXPECT_EQ(unusual_text(a),
            "100x its usual 0.1 ms; with its process's burst of slow cudaLaunchKernel (9 in 1.7 s "
            "where 0.012 are usual)");
  a.burst = 0, a.burst_of.clear(), a.burst_window_ns = 0;
  EXPECT_EQ(unusual_text(a), "100x its usual 0.1 ms, far slower than any call of its history");
}

TEST(CauseKind, DropsTheOperation) {
  EXPECT_EQ(detect::cause_kind("slow cuda call: cudaMalloc"), "slow cuda call");
  EXPECT_EQ(detect::cause_kind("CPU interference"), "CPU interference");
  EXPECT_EQ(detect::cause_kind("unusual window: nic_mb_per_s"), "unusual window");
  EXPECT_EQ(detect::cause_kind("unusual size of cudaMemcpy"), "unusual size");
}

// Every cause probable_cause gives, for each layer and each feature the detectors have (at the
// top, above or below usual), is of a kind in cause_kinds(): the counters the agent exports at
// 0 from its start are all those that can rise.
TEST(CauseKind, EveryCauseIsOfAKnownKind) {
  const auto& kinds = detect::cause_kinds();
  std::set<std::pair<std::string, std::string>> known(kinds.begin(), kinds.end());
  EXPECT_EQ(known.size(), kinds.size()) << "no kind twice";
  const std::vector<std::string> call_features = {"log_duration_us", "log2_bytes",
                                                  "log_straggler_wait_10us"};
  for (const char* layer : {"cuda", "comm", "torch", "python"})
    for (const auto& f : call_features) {
      if (f != "log_duration_us" && std::string(layer) != "cuda" && std::string(layer) != "comm")
        continue;  // only CUDA and NCCL calls move bytes; only collectives wait for peers
      if (f == "log_straggler_wait_10us" && std::string(layer) != "comm") continue;
      std::string kind = detect::cause_kind(detect::probable_cause(layer, "op", {{f, 1.0}}));
      EXPECT_TRUE(known.count({layer, kind})) << layer << " " << f << ": " << kind;
    }
  std::vector<std::string> window_features = {
      "runq_wait_ms_per_s", "involuntary_switches_per_s", "tcp_retransmits_per_s",
      "reclaim_ms_per_s", "page_faults_per_s", "pagein_mb_per_s", "nic_mb_per_s",
      "socket_mb_per_s", "gpu_temp_c", "gpu_throttled", "gpu_power_w", "gpu_sm_clock_mhz",
      "gpu_mem_used_mb", "pcie_mb_per_s", "block_mb_per_s", "comm_calls_per_s",
      "cuda_call_log_duration_us", "torch_calls_per_s", "python_calls_per_s", "gpu_util",
      "gpu_idle_pct", "cpu_cores", "something_else"};
  for (const auto& f : window_features)
    for (bool lowered : {false, true}) {
      std::set<std::string> low;
      if (lowered) low.insert(f);
      std::string kind = detect::cause_kind(detect::probable_cause("window", "window", {{f, 5.0}}, low));
      EXPECT_TRUE(known.count({"window", kind})) << f << (lowered ? " lowered" : "") << ": " << kind;
    }
}

class StateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/eacgm-state-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(StateDir, AnomalyStoreKeepsTheNewestRowsPrivately) {
  std::string path = dir_ + "/anomalies.db";
  {
    AnomalyStore store(path, 5);
    std::vector<StoredAnomaly> rows(4);
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i].ts_ns = i;
      rows[i].layer = rows[i].name = "window";
      rows[i].cause = "CPU interference";
    }
    EXPECT_EQ(store.add(rows), "");
    EXPECT_EQ(store.add(rows), "");
    EXPECT_EQ(store.rows(), 5u);  // the oldest three went
  }
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u) << "anomalies name processes: not for other users";
  AnomalyStore again(path, 5);  // reopened across a restart
  EXPECT_EQ(again.rows(), 5u);
}

// A storm of anomalies: one log line for it (the rate limit), but every one counted on /metrics
// and stored (issue 31: rate-limit the log, count and store everything).
TEST_F(StateDir, ReporterStoresAndCountsEveryAnomalyOfAStorm) {
  MetricsSink metrics("node-a");
  FlightRecorder flight(FlightOptions{});  // off: no recording to name
  AnomalyReporter reporter(metrics, std::make_unique<AnomalyStore>(dir_ + "/anomalies.db"), flight,
                           60'000'000'000ull, 0);
  std::vector<AgentAnomaly> found;
  for (int i = 0; i < 250; ++i) {
    detect::Anomaly a;
    a.ts_ns = 1'000'000'000ull + uint64_t(i) * 1'000'000;
    a.dur_ns = 5'000'000;
    a.layer = "torch";
    a.name = "aten::addmm";
    a.pid = 42;
    a.cause = "slow operator: aten::addmm";
    a.score = -20;
    a.threshold = -8;
    found.push_back({a, "python3"});
  }
  testing::internal::CaptureStderr();
  reporter(found);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_EQ(AnomalyStore(dir_ + "/anomalies.db").rows(), 250u);
  EXPECT_NE(metrics.text().find("eacgm_anomalies_total{cause=\"slow operator\",layer=\"torch\"} 250"),
            std::string::npos)
      << metrics.text();
  // each with when it was found (the reporter's clock, after the calls it judged)
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2((dir_ + "/anomalies.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*) FROM anomalies WHERE found_ns > ts_ns", -1, &q,
                               nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(q, 0), 250);
  sqlite3_finalize(q);
  sqlite3_close(db);
}

// A store an older agent wrote (no found_ns) is reopened with the column added: its rows kept
// (found_ns NULL), new rows with theirs.
TEST_F(StateDir, AnomalyStoreOfAnOlderAgentGainsFoundNs) {
  std::string path = dir_ + "/anomalies.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE anomalies(ts_ns INTEGER NOT NULL, time_ns INTEGER NOT NULL, "
                         "dur_ns INTEGER NOT NULL, layer TEXT NOT NULL, name TEXT NOT NULL, pid "
                         "INTEGER, process TEXT, score REAL, threshold REAL, cause TEXT, features "
                         "TEXT, recording TEXT); INSERT INTO anomalies VALUES(1, 2, 3, 'window', "
                         "'window', NULL, '', 0, 0, 'CPU interference', '[]', NULL)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  AnomalyStore store(path);
  std::vector<StoredAnomaly> rows(1);
  rows[0].ts_ns = 10, rows[0].found_ns = 25, rows[0].layer = rows[0].name = "window";
  EXPECT_EQ(store.add(rows), "");
  EXPECT_EQ(store.rows(), 2u);
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT group_concat(COALESCE(found_ns - ts_ns, -1)) FROM "
                               "(SELECT * FROM anomalies ORDER BY rowid)",
                               -1, &q, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, 0))), "-1,15");
  sqlite3_finalize(q);
  sqlite3_close(db);
}

TEST_F(StateDir, AnomalyStoreRefusesWhatIsNotARegularFile) {
  std::string fifo = dir_ + "/anomalies.db";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  try {
    AnomalyStore store(fifo);
    FAIL() << "a FIFO was taken for the store";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  struct stat st {};
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "left as it was";
}

// Saved models that cannot be read are moved aside and named; the agent learns afresh.
TEST_F(StateDir, UnreadableSavedModelsAreMovedAsideNotLost) {
  std::string path = dir_ + "/models.json";
  std::ofstream(path) << "{\"format\": \"eacgm-detector\", \"window_ns\": ";
  DetectionOptions o;
  o.models_path = path;
  DetectionSink sink(o, [](std::vector<AgentAnomaly>&) {});
  std::string line = sink.load_models();
  EXPECT_NE(line.find("could not read the saved models"), std::string::npos) << line;
  EXPECT_NE(line.find(path + ".bad"), std::string::npos) << line;
  EXPECT_TRUE(std::filesystem::exists(path + ".bad"));
  EXPECT_EQ(sink.save_models(), "");  // nothing fitted: an empty, valid file
  DetectionSink again(o, [](std::vector<AgentAnomaly>&) {});
  EXPECT_NE(again.load_models().find("resumed 0 models"), std::string::npos);
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

// A flight recording holds what was held, as an ordinary recording; older flight recordings go
// beyond the size kept, and nothing else in the directory is touched (not a FIFO named like
// one, not a file named otherwise).
TEST_F(StateDir, FlightRecordingKeepsThePastAndRetainsBySize) {
  std::string old1 = dir_ + "/flight-20200101T000000Z-anomaly.eacgm.db";
  std::string old2 = dir_ + "/flight-20200101T000001Z-anomaly.eacgm.db";
  std::string fifo = dir_ + "/flight-20190101T000000Z-anomaly.eacgm.db";
  std::string other = dir_ + "/notes.db";
  for (const auto& p : {old1, old2, other}) std::ofstream(p) << std::string(600 << 10, 'x');
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  FlightOptions o;
  o.dir = dir_;
  o.keep_bytes = 1 << 20;  // the new recording and at most one 600 KiB file fit
  FlightRecorder f(o);
  f.set_meta("eacgm_version", "test");
  f.set_meta("monotonic_to_realtime_ns", "0");
  ProcessRow p;
  p.pid = 42;
  p.name = "train";
  f.add(p);
  uint64_t now = monotonic_now_ns();
  static const char kOp[] = "cudaMalloc";
  CudaCallRow ancient;  // older than the held past: gone at the next flush
  ancient.ts_ns = now - 120'000'000'000ull;
  ancient.name = kOp;
  f.add(ancient);
  for (int i = 0; i < 10; ++i) {
    CudaCallRow c;
    c.ts_ns = now - 1'000'000'000ull + uint64_t(i) * 1000;
    c.dur_ns = 500;
    c.pid = c.tid = 42;
    c.name = kOp;
    f.add(c);
  }
  f.flush();
  EXPECT_EQ(f.held_rows(), 10u);
  EXPECT_EQ(f.busy(), (std::pair<uint64_t, uint64_t>{0, 0})) << "nothing written yet";
  std::string path = f.request("signal", 0);
  EXPECT_EQ(path.rfind(dir_ + "/flight-", 0), 0u) << path;
  uint64_t before = monotonic_now_ns();
  f.finish();
  uint64_t after = monotonic_now_ns();
  EXPECT_EQ(f.last_error(), "");
  auto [busy_start, busy_end] = f.busy();  // when it wrote: what the detector leaves unjudged
  EXPECT_GE(busy_start, before);
  EXPECT_GE(busy_end, busy_start);
  EXPECT_LE(busy_end, after);
  RecordingReader rec(path);
  int64_t calls = -1;
  rec.query("SELECT count(*) FROM trace WHERE name = 'cudaMalloc' AND pid = 42",
            [&](Statement& s) { calls = s.int_at(0); });
  EXPECT_EQ(calls, 10);
  EXPECT_EQ(rec.meta_or("flight_reason", ""), "signal");
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);
  EXPECT_FALSE(std::filesystem::exists(old1)) << "the oldest flight recording goes";
  EXPECT_TRUE(std::filesystem::exists(old2));
  EXPECT_TRUE(std::filesystem::exists(other));
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// The held rows go to the writer by reference, chunk by chunk, not copied on the pipeline's
// thread: rows over several chunks are all written, rows that came after the snapshot wait for
// the next recording (with the held past before them), and rows older than the held past leave
// across chunks' bounds.
TEST_F(StateDir, FlightRecordingSharesItsChunksAndEvictsAcrossThem) {
  FlightOptions o;
  o.dir = dir_;
  o.seconds_ns = 10'000'000'000ull;
  FlightRecorder f(o);
  f.set_meta("monotonic_to_realtime_ns", "0");
  uint64_t now = monotonic_now_ns();
  static const char kOp[] = "cudaMalloc";
  auto add = [&](uint64_t ts, int n) {
    for (int i = 0; i < n; ++i) {
      CudaCallRow c;
      c.ts_ns = ts + uint64_t(i);
      c.dur_ns = 1;
      c.pid = c.tid = 42;
      c.name = kOp;
      f.add(c);
    }
  };
  add(now - 30'000'000'000ull, 10'000);  // older than the held past: a chunk and a part
  add(now - 1'000'000'000ull, 20'000);
  f.flush();
  EXPECT_EQ(f.held_rows(), 20'000u);
  auto calls_in = [&](const std::string& path) {
    RecordingReader rec(path);
    int64_t calls = -1;
    rec.query("SELECT count(*) FROM trace WHERE name = 'cudaMalloc'",
              [&](Statement& s) { calls = s.int_at(0); });
    return calls;
  };
  std::string first = f.request("signal", 0);
  f.flush();          // the snapshot: the writer thread holds its chunks
  add(now, 5);        // after it: in a new chunk, not the snapshot's last one
  std::string second = f.request("signal", 0);
  f.finish();
  EXPECT_EQ(f.last_error(), "");
  EXPECT_EQ(calls_in(first), 20'000);
  EXPECT_EQ(calls_in(second), 20'005);
  EXPECT_EQ(f.held_rows(), 20'005u);
}

// Beyond --flight-mb the oldest rows go whatever their type (rows are held by type), and the
// chunks emptied by eviction are filled again with the rows that came after, not the old ones.
TEST_F(StateDir, FlightRecordingKeepsTheNewestRowsOfAnyTypeWithinItsMemory) {
  FlightOptions o;
  o.dir = dir_;
  o.seconds_ns = 3'600'000'000'000ull;
  o.max_bytes = 1000 * (sizeof(CudaCallRow) + sizeof(TorchCallRow));
  FlightRecorder f(o);
  f.set_meta("monotonic_to_realtime_ns", "0");
  static const char kCuda[] = "cudaMalloc", kTorch[] = "aten::mm";
  uint64_t t0 = monotonic_now_ns() - 60'000'000'000ull;
  auto add = [&](uint64_t from, int n) {  // a CUDA call, then a torch call, n times, 1 ns apart
    for (int i = 0; i < n; ++i) {
      CudaCallRow c;
      c.ts_ns = from + 2 * uint64_t(i);
      c.dur_ns = 1;
      c.pid = c.tid = 42;
      c.name = kCuda;
      f.add(c);
      TorchCallRow t;
      t.ts_ns = c.ts_ns + 1;
      t.dur_ns = 1;
      t.pid = t.tid = 42;
      t.name = kTorch;
      f.add(t);
    }
  };
  auto held_in = [&](const std::string& path, const char* table) {
    RecordingReader rec(path);
    std::pair<int64_t, int64_t> count_and_first{-1, -1};
    rec.query(fmt::format("SELECT count(*), min(ts_ns) FROM {}", table),
              [&](Statement& s) { count_and_first = {s.int_at(0), s.int_at(1)}; });
    return count_and_first;
  };
  add(t0, 100'000);  // a hundred times the budget: many chunks of each type go
  f.flush();
  EXPECT_EQ(f.held_rows(), 2'000u);
  EXPECT_LE(f.held_bytes(), o.max_bytes);
  std::string first = f.request("signal", 0);
  f.flush();
  uint64_t t1 = t0 + 1'000'000;
  add(t1, 100'000);  // into chunks emptied above (no snapshot holds them once written)
  std::string second = f.request("signal", 0);
  f.finish();
  EXPECT_EQ(f.last_error(), "");
  EXPECT_EQ(held_in(first, "cuda_calls"), (std::pair<int64_t, int64_t>{1000, int64_t(t0 + 2 * 99'000)}));
  EXPECT_EQ(held_in(first, "torch_calls"), (std::pair<int64_t, int64_t>{1000, int64_t(t0 + 2 * 99'000 + 1)}));
  EXPECT_EQ(held_in(second, "cuda_calls"), (std::pair<int64_t, int64_t>{1000, int64_t(t1 + 2 * 99'000)}));
  EXPECT_EQ(held_in(second, "torch_calls"), (std::pair<int64_t, int64_t>{1000, int64_t(t1 + 2 * 99'000 + 1)}));
  EXPECT_EQ(f.held_rows(), 2'000u);
}

TEST(LoopbackAddress, OnlyThisHost) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_TRUE(is_loopback_address("::ffff:127.0.0.1"));
  EXPECT_FALSE(is_loopback_address("10.0.0.1"));
  EXPECT_FALSE(is_loopback_address("::ffff:10.0.0.1"));
  EXPECT_FALSE(is_loopback_address(""));
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

// The agent's job of a process that ran before it started (no fork or exec seen): the parent
// from /proc/PID/stat, whose comm may hold spaces and parentheses.
TEST(JobIdentity, ParentFromProcStat) {
  EXPECT_EQ(parent_pid_from_stat("4242 (python3) S 4200 4242 17 0 -1"), 4200u);
  EXPECT_EQ(parent_pid_from_stat("7 (a) b (c)) R 1 7 7 0"), 1u);
  EXPECT_EQ(parent_pid_from_stat("7 (x) S"), 0u);
  EXPECT_EQ(parent_pid_from_stat("7 (x) S 99999999999 1"), 0u) << "beyond a pid";
  EXPECT_EQ(parent_pid_from_stat(""), 0u);
  EXPECT_EQ(read_parent_pid(uint32_t(getpid())), uint32_t(getppid()));
}

TEST(JobIdentity, FromTheLaunchersEnvironmentAndTheCgroup) {
  std::string env(
      "PATH=/usr/bin\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0"
      "TORCHELASTIC_RUN_ID=gpt-pretrain-42\0MASTER_ADDR=10.0.0.1",
      103);
  std::string cgroup =
      "0::/kubepods.slice/kubepods-burstable.slice/"
      "kubepods-burstable-pod1f2e3d4c_5b6a_4798_8a9b_0c1d2e3f4a5b.slice/"
      "cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n";
  JobIdentity id = job_identity_from(env, cgroup);
  EXPECT_EQ(id.job, "gpt-pretrain-42");
  EXPECT_EQ(id.rank, "3");
  EXPECT_EQ(id.local_rank, "1");
  EXPECT_EQ(id.world_size, "8");
  EXPECT_EQ(id.container, "0123456789ab");
  EXPECT_EQ(id.pod, "1f2e3d4c-5b6a-4798-8a9b-0c1d2e3f4a5b");
  // Slurm's names, a docker container under cgroup v1, a value not fit for a label
  std::string slurm("SLURM_JOB_ID=777\0SLURM_PROCID=12\0SLURM_NTASKS=16\0LOCAL_RANK=a\"b", 63);
  JobIdentity s =
      job_identity_from(slurm,
                        "12:cpu,cpuacct:/docker/"
                        "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210\n");
  EXPECT_EQ(s.job, "777");
  EXPECT_EQ(s.rank, "12");
  EXPECT_EQ(s.world_size, "16");
  EXPECT_EQ(s.local_rank, "") << "a quote is no label value";
  EXPECT_EQ(s.container, "fedcba987654");
  EXPECT_EQ(s.pod, "");
  // a process outside any container, launched by hand
  JobIdentity none = job_identity_from(std::string_view("HOME=/root\0", 11), "0::/user.slice\n");
  EXPECT_EQ(none.labels().size(), 6u);
  for (const auto& [k, v] : none.labels()) EXPECT_EQ(v, "") << k;
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

struct CountingSink : Sink {
  std::vector<uint32_t> call_pids, process_pids, host_ids;
  void add(const CudaCallRow& r) override { call_pids.push_back(r.pid); }
  void add(const ProcessRow& r) override { process_pids.push_back(r.pid); }
  void add(const HostSampleRow& r) override { host_ids.push_back(uint32_t(r.id)); }
};

// --match passes the rows of matching processes only: known by their exec's command line, or
// else asked once per process; a bad pattern is a usage error.
TEST(MatchFilter, OnlyMatchingProcessesReachTheSinks) {
  CountingSink out;
  std::map<uint32_t, std::string> cmdlines = {{10, "python3 train.py --lr 3e-4"},
                                              {11, "python3 serve.py"}};
  size_t asked = 0;
  MatchFilter f({"train\\.py", "^torchrun "}, out, [&](uint32_t pid) {
    ++asked;
    return cmdlines[pid];
  });
  ProcessRow exec;
  exec.pid = 12;
  exec.name = "torchrun";
  exec.command = "torchrun --nproc-per-node 8 pretrain.py";
  f.add(exec);
  for (uint32_t pid : {10u, 11u, 12u, 10u, 11u}) {
    CudaCallRow c;
    c.pid = pid;
    f.add(c);
  }
  EXPECT_EQ(out.call_pids, (std::vector<uint32_t>{10, 12, 10}));
  EXPECT_EQ(out.process_pids, (std::vector<uint32_t>{12}));
  EXPECT_EQ(asked, 2u) << "once per process not seen at exec";
  HostSampleRow h;  // a matching process, one the filter never heard of, and an interface
  h.id = 10;
  f.add(h);
  h.id = 99;
  f.add(h);
  h.scope = HostScope::NetDevice;
  h.id = 2;
  f.add(h);
  EXPECT_EQ(out.host_ids, (std::vector<uint32_t>{10, 2}));
  EXPECT_EQ(asked, 2u) << "host samples of unknown processes ask nothing";
  for (const char* bad : {"(", ""}) {
    try {
      MatchFilter g({bad}, out, [](uint32_t) { return std::string(); });
      FAIL() << "accepted " << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--match"), std::string::npos) << e.what();
    }
  }
}


// Two jobs of the same shape on one node (two ranks each, the same collective on the default
// group): each job's instances hold its own ranks only, and a late rank is found in its job
// alone. The agent matches them once for the metrics and the detector (NodeCollectives).
TEST(NodeCollectives, TwoJobsOfTheSameShapeAreMatchedApart) {
  std::map<uint32_t, std::string> job{{100, "a"}, {101, "a"}, {200, "b"}, {201, "b"}};
  NodeCollectives c([&](uint32_t pid) { return job.at(pid); });
  std::vector<std::pair<std::string, std::vector<uint32_t>>> seen;
  c.on_instance([&](std::string_view op, const CollectiveMatcher::Instance& inst) {
    std::vector<uint32_t> pids;
    for (const RankCall& r : inst.calls) pids.push_back(r.pid);
    seen.emplace_back(std::string(op), pids);
    EXPECT_TRUE(inst.all_ranks);
  });
  constexpr uint64_t ms = 1'000'000, start = 1000 * kSecond;
  auto row = [&](uint32_t pid, int rank, int k, uint64_t late) {
    CommCallRow r;
    r.name = "gloo:all_reduce";
    r.pid = r.tid = pid;
    r.ts_ns = start + uint64_t(k) * 20 * ms + late;
    r.dur_ns = 6 * ms - late;  // every rank's call ends when the last one joined, and 1 ms on
    r.rank = rank, r.nranks = 2, r.comm = pid;  // one process group per process
    return r;
  };
  // rows as calls end, the jobs interleaved; job a's rank 1 is 5 ms late in step 3
  for (int k = 0; k < 6; ++k) {
    uint64_t late = k == 3 ? 5 * ms : 0;
    c.add(row(200, 0, k, 0)), c.add(row(100, 0, k, 0)), c.add(row(201, 1, k, 0));
    c.add(row(101, 1, k, late));
  }
  ASSERT_EQ(seen.size(), 12u);
  for (auto& [op, pids] : seen) {
    EXPECT_EQ(op, "gloo:all_reduce");
    ASSERT_EQ(pids.size(), 2u);
    EXPECT_EQ(job.at(pids[0]), job.at(pids[1])) << pids[0] << " and " << pids[1];
  }
  const PeerWait* waited = c.find(100, start + 3 * 20 * ms);
  ASSERT_NE(waited, nullptr);
  EXPECT_EQ(waited->wait_ns, 5 * ms);
  EXPECT_EQ(waited->last_rank, 1);
  EXPECT_EQ(waited->last_pid, 101u);
  const PeerWait* other = c.find(200, start + 3 * 20 * ms);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->wait_ns, 0u) << "job b had no late rank";
  EXPECT_EQ(c.find(100, start + 3 * 20 * ms + 1), nullptr) << "no call started then";
}

// A call that ran while the agent wrote a flight recording is judged as any other (only the
// windows of the write are not): judged net of its thread's wait for a CPU, no call was flagged
// in the writes of the nine eval scenarios (session 53), and a fault inside a write must not go
// unseen (session 51: net_delay's whole fault fell in one, and nothing was reported).
TEST_F(StateDir, CallsDuringTheAgentsOwnFlightRecordingAreJudged) {
  FlightOptions fo;
  fo.dir = dir_;
  FlightRecorder flight(fo);
  flight.set_meta("eacgm_version", "test");
  flight.set_meta("monotonic_to_realtime_ns", "0");
  flight.request("signal", 0);
  flight.finish();
  auto [busy_start, busy_end] = flight.busy();
  ASSERT_GT(busy_start, 0u);
  QuickSink q;
  auto& found = q.found;
  auto& sink = q.sink;
  sink.use_flight(flight);
  static const char kOp[] = "cudaMalloc";
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint64_t> dur(90'000, 110'000);
  auto call = [&](uint64_t ts, uint64_t d) {
    CudaCallRow c;
    c.ts_ns = ts, c.dur_ns = d, c.pid = c.tid = 42, c.name = kOp;
    sink.add(c);
  };
  const uint64_t start = busy_start - 100 * kSecond;
  q.train([&](int i) { call(start + uint64_t(i) * 20'000'000, dur(rng)); }, 1);  // 40 s, 0.1 ms
  ASSERT_EQ(sink.models(), 1u);
  ASSERT_TRUE(found.empty()) << found.front().cause;
  // 0.5 s calls (5,000 times the usual, far beyond the history's slowest): alone a report
  call(busy_start - 200'000'000, 500'000'000);                  // ended during the write
  call(busy_start + (busy_end - busy_start) / 2, 500'000'000);  // began during it
  sink.flush();
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].ts_ns, busy_start - 200'000'000);
  EXPECT_EQ(found[1].ts_ns, busy_start + (busy_end - busy_start) / 2);
  call(busy_end + 100'000'000, 500'000'000);
  sink.flush();
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[2].ts_ns, busy_end + 100'000'000);
  EXPECT_EQ(detect::cause_kind(found[2].cause), "slow cuda call");
}

// As detect: an operator around a slow call of its thread, reported with it, names the inner
// call (the likelier root) in its cause; the metric's cause kind stays its own.
TEST(DetectionSink, ACallAroundASlowCallOfItsThreadNamesTheInnerOne) {
  QuickSink q;
  auto& found = q.found;
  auto& sink = q.sink;
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint64_t> dur(90'000, 110'000);
  auto step = [&](uint64_t ts, uint64_t malloc_ns) {
    CudaCallRow c;
    c.ts_ns = ts + 50'000, c.dur_ns = malloc_ns, c.pid = c.tid = 42, c.name = "cudaMalloc";
    TorchCallRow t;
    t.ts_ns = ts, t.dur_ns = malloc_ns + 100'000 + dur(rng), t.pid = t.tid = 42;
    t.name = "aten::empty";
    sink.add(c);
    sink.add(t);
  };
  const uint64_t start = monotonic_now_ns() - 100 * kSecond;  // all calls ended long ago
  q.train([&](int i) { step(start + uint64_t(i) * 20'000'000, dur(rng)); }, 2);  // 40 s
  ASSERT_EQ(sink.models(), 2u);
  ASSERT_TRUE(found.empty()) << found.front().cause;
  step(start + 41 * kSecond, 500'000'000);  // 5,000 times the usual: each alone a report
  sink.flush();
  ASSERT_EQ(found.size(), 2u);
  const detect::Anomaly& outer = found[0].layer == "torch" ? found[0] : found[1];
  EXPECT_EQ(outer.cause, "slow operator: aten::empty; inside it: slow cuda call: cudaMalloc");
  EXPECT_EQ(detect::cause_kind(outer.cause), "slow operator");
  const detect::Anomaly& inner = found[0].layer == "torch" ? found[1] : found[0];
  EXPECT_EQ(inner.cause, "slow cuda call: cudaMalloc");
}

// A call the CPU under it stopped for (a host sample of its process with one 480 ms stop ending
// inside its 500 ms) is explained by the stop, as detect explains it, and what the stop slowed
// goes out as one "CPU stall" anomaly, not as a slow operator.
TEST(DetectionSink, WhatACpuStallSlowedIsOneAnomalyNamingIt) {
  QuickSink q;
  auto& found = q.found;
  auto& sink = q.sink;
  const uint64_t start = monotonic_now_ns() - 100 * kSecond;  // all calls ended long ago
  q.train([&](int i) { q.mm(start + uint64_t(i) * 20'000'000, q.usual_mm_ns()); }, 1);
  ASSERT_TRUE(found.empty()) << found.front().cause;
  const uint64_t at = start + 41 * kSecond;
  HostSampleRow h = process_sample(42, at + 500'000'000, 0, 100'000'000);
  h.interval_ns = 600'000'000;
  h.stall_ns = 480'000'000, h.stalls = 1, h.stall_end_ns = at + 490'000'000;
  sink.add(h);
  q.mm(at, 500'000'000);  // 5,000 times the usual: a report of its own
  sink.flush();  // (the calls are 100 s old: the episode's 5 s of data are over at once)
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(detect::cause_kind(found[0].cause), "CPU stall");
  EXPECT_NE(found[0].cause.find("stopped for up to 480.0 ms"), std::string::npos) << found[0].cause;
  EXPECT_NE(found[0].cause.find("1 slow call (aten::mm 1)"), std::string::npos) << found[0].cause;
}

// A stop that cost its job little is no anomaly (stall_episodes.h): a busy process (a core's
// CPU every second) whose CPU stopped 140 ms once under a 150 ms call (this VM's vCPUs stop
// ~100 ms once or twice a minute) has nothing reported; the node's stall counters have it. A
// 650 ms stop 2 s later makes the stops of its minute over 1% of the process's CPU time: one
// anomaly naming it.
TEST(DetectionSink, AStopThatCostItsJobLittleIsNoAnomaly) {
  QuickSink q;
  auto& found = q.found;
  auto& sink = q.sink;
  const uint64_t start = monotonic_now_ns() - 100 * kSecond;  // all calls ended long ago
  const uint64_t tick = kSecond / 10;
  auto busy_until = [&, next = start](uint64_t to) mutable {
    for (; next + tick <= to; next += tick) sink.add(process_sample(42, next + tick, 0, tick));
  };
  q.train([&](int i) {
    q.mm(start + uint64_t(i) * 20'000'000, q.usual_mm_ns());
    busy_until(start + uint64_t(i) * 20'000'000);
  }, 1);
  ASSERT_TRUE(found.empty()) << found.front().cause;
  auto stop = [&](uint64_t at, uint64_t call_ns, uint64_t stall_ns) {
    busy_until(at);
    HostSampleRow h = process_sample(42, at + call_ns, 0, call_ns);
    h.interval_ns = call_ns;
    h.stall_ns = stall_ns, h.stalls = 1, h.stall_end_ns = at + call_ns - 5'000'000;
    sink.add(h);
    busy_until(at + call_ns);
    q.mm(at, call_ns);  // 1,500 times the usual: a report of its own
    sink.flush();
  };
  stop(start + 41 * kSecond, 150'000'000, 140'000'000);
  EXPECT_TRUE(found.empty()) << found.front().cause;
  stop(start + 43 * kSecond, 700'000'000, 650'000'000);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(detect::cause_kind(found[0].cause), "CPU stall");
  EXPECT_NE(found[0].cause.find("stopped for up to 650.0 ms"), std::string::npos) << found[0].cause;
}

// Fits wait for idle CPUs: the refit thread runs at SCHED_IDLE (a fit at nice 10 held a CPU
// training's steps up by tens of ms), and a fit not done refit_hurry_ns after it was asked for
// is hurried (nice 10) until the worker has caught up, then waits for idle CPUs again.
TEST(DetectionSink, FitsWaitForIdleCpusUnlessTheyWaitTooLong) {
  auto train = [](uint64_t hurry_ns) {
    DetectionOptions o = QuickSink::options();
    o.refit_hurry_ns = hurry_ns;
    DetectionSink sink(o, [](std::vector<AgentAnomaly>&) {});
    for (int i = 0; i < 300 && !sink.refit_thread(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const pid_t tid = sink.refit_thread();
    EXPECT_NE(tid, 0);
    EXPECT_EQ(sched_getscheduler(tid), SCHED_IDLE) << "before any fit";
    const uint64_t start = monotonic_now_ns() - 100 * kSecond;
    for (int i = 0; i < 2000; ++i) {
      TorchCallRow t;
      t.ts_ns = start + uint64_t(i) * 20'000'000, t.dur_ns = 100'000 + uint64_t(i % 7) * 1000;
      t.pid = t.tid = 42, t.name = "aten::mm";
      sink.add(t);
      if (i % 100 == 99) sink.flush();
    }
    // (refits as the history doubles may still be queued when the first model is in)
    for (int i = 0; i < 3000 && (sink.models() < 1 || sched_getscheduler(tid) != SCHED_IDLE); ++i) {
      sink.flush();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(sink.models(), 1u);
    EXPECT_EQ(sched_getscheduler(tid), SCHED_IDLE) << "the worker caught up: back to idle CPUs";
    return sink.refit_hurries();
  };
  EXPECT_EQ(train(60 * kSecond), 0u) << "a fit done within the minute is never hurried";
  EXPECT_GE(train(0), 1u) << "a fit asked for is hurried at once where no wait is allowed";
}

// As detect (CallContext): a slow call whose thread waited for a CPU for a quarter of it, and
// far more than the operation's calls usually wait, says it was preempted; one during which
// its process reclaimed memory says so; one the host did nothing to stays slow code.
TEST(DetectionSink, ASlowCallSaysWhatTheHostDidToItAsDetectDoes) {
  QuickSink q;
  auto& found = q.found;
  auto& sink = q.sink;
  std::mt19937 rng(13);
  std::uniform_int_distribution<uint64_t> dur(90'000, 110'000), wait(0, 20'000);
  auto call = [&](uint64_t ts, uint64_t d, int64_t runq) {
    CudaCallRow c;
    c.ts_ns = ts, c.dur_ns = d, c.pid = c.tid = 42, c.name = "cudaMalloc", c.runq_ns = runq;
    sink.add(c);
  };
  const uint64_t start = monotonic_now_ns() - 100 * kSecond;  // all calls ended long ago
  q.train([&](int i) { call(start + uint64_t(i) * 20'000'000, dur(rng), int64_t(wait(rng))); },
          1);  // 40 s
  ASSERT_EQ(sink.models(), 1u);
  ASSERT_TRUE(found.empty()) << found.front().cause;
  // 0.8 s, 0.3 s of it waiting for a CPU (judged net of it: 0.5 s, far beyond the history)
  call(start + 41 * kSecond, 800'000'000, 300'000'000);
  sink.flush();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].cause,
            "slow cuda call: cudaMalloc; preempted: waited 300.0 ms for a CPU (CPU interference)");
  // 0.5 s while the process reclaimed memory for 0.4 s (its host samples, 0.1 s each)
  const uint64_t at = start + 43 * kSecond;
  for (int k = 1; k <= 5; ++k) {
    HostSampleRow h;
    h.ts_ns = at + uint64_t(k) * 100'000'000, h.interval_ns = 100'000'000, h.id = 42;
    h.reclaim_ns = 80'000'000;
    sink.add(h);
  }
  call(at, 500'000'000, 0);
  sink.flush();
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[1].cause, "slow cuda call: cudaMalloc; 400.0 ms reclaiming memory (memory pressure)");
  call(start + 46 * kSecond, 500'000'000, 0);  // nothing from the host: slow code
  sink.flush();
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[2].cause, "slow cuda call: cudaMalloc");
}

// The agent judges a collective as detect does: its duration net of the wait for the last rank,
// and the straggling wait a feature of its own. Here rank 1 joins 0-20 ms late in every healthy
// step, so whole durations spread 0.5-20.5 ms; then in every 10th step the collective itself
// takes 8 ms after both joined, inside that spread but 16 times its own usual 0.5 ms: each such
// step is found as a slow collective (not a straggler), and the healthy steps between are not.
TEST(DetectionSink, CollectivesJudgedNetOfTheirWaitForTheLastRank) {
  DetectionOptions o;
  o.warm_up_ns = 0;
  o.train_span_ns = 5 * kSecond;
  std::vector<detect::Anomaly> found;
  DetectionSink sink(o, [&](std::vector<AgentAnomaly>& a) {
    for (auto& x : a)
      if (x.anomaly.layer == "comm") found.push_back(x.anomaly);
  });
  NodeCollectives collectives([](uint32_t) { return std::string(); });
  sink.use_collectives(collectives);
  constexpr uint64_t ms = 1'000'000, us = 1'000;
  const uint64_t start = monotonic_now_ns() - 200 * kSecond;  // all calls ended long ago
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint64_t> late(0, 20 * ms), own(450 * us, 550 * us);
  std::set<uint64_t> faulty;  // their step's start
  auto step = [&](int k, bool slow) {
    uint64_t t = start + uint64_t(k) * 25 * ms, joined = t + late(rng);
    uint64_t end = joined + (slow ? 8 * ms : own(rng));
    if (slow) faulty.insert(t);
    for (int rank : {0, 1}) {
      CommCallRow r;
      r.name = "gloo:all_reduce";
      r.pid = r.tid = uint32_t(100 + rank);
      r.ts_ns = rank == 0 ? t : joined;
      r.dur_ns = end - r.ts_ns;
      r.rank = rank, r.nranks = 2, r.comm = r.pid;
      collectives.add(r);  // first, as in the agent's fanout
      sink.add(r);
    }
    if (k % 40 == 39) sink.flush();
  };
  int k = 0;
  for (; k < 2000; ++k) step(k, false);
  // (a wait for the refit thread, not a bound: a fit of 4,000 calls takes milliseconds)
  for (int i = 0; i < 3000 && sink.models() == 0; ++i) {
    sink.flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(sink.models(), 1u) << "the collective's model was fitted";
  ASSERT_TRUE(found.empty()) << found.front().cause;
  for (; k < 3000; ++k) step(k, k % 10 == 0);
  sink.flush();
  std::set<uint64_t> flagged_steps;
  size_t stragglers = 0;
  for (const auto& a : found) {
    flagged_steps.insert(start + (a.ts_ns - start) / (25 * ms) * 25 * ms);
    stragglers += a.cause.find("straggl") != std::string::npos;
  }
  size_t hit = 0;
  for (uint64_t t : flagged_steps) hit += faulty.count(t);
  ASSERT_FALSE(found.empty());
  // recall and precision over the steps, as issue 31 promises online (F1 >= 0.9)
  EXPECT_GE(double(hit), 0.9 * double(faulty.size())) << hit << " of " << faulty.size();
  EXPECT_GE(double(hit), 0.9 * double(flagged_steps.size())) << flagged_steps.size() - hit
                                                              << " healthy steps flagged";
  EXPECT_EQ(stragglers, 0u) << "the slow part came after every rank joined: " << found[0].cause;
}
}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

// Each job's windows are judged against its own model: a second job starting beside the first
// (its ranks waiting long for CPUs at nice 19) is no interference in the first, whose own
// processes waited no longer than before (session 39's hour: summed over the node, 11 windows
// of "CPU interference" while the first job's ranks waited as usual). A hog that makes the
// first job's own processes wait is found, and its line names that job's processes.
TEST(DetectionSink, ASecondJobBesideTheFirstIsNoInterferenceInIt) {
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
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  auto process = [&](uint32_t pid, uint32_t ppid) {
    ProcessRow p;
    p.pid = pid, p.ppid = ppid, p.name = "python3", p.start_ns = start;
    sink.add(p);
  };
  // one second of process `pid`: 10 samples and 20 calls; `waits`: run-queue wait in s/s
  auto second = [&](uint32_t pid, int s, double waits, double cores) {
    uint64_t t0 = start + uint64_t(s) * kSecond;
    for (int i = 1; i <= 10; ++i) {
      HostSampleRow r;
      r.ts_ns = t0 + uint64_t(i) * kSecond / 10, r.interval_ns = kSecond / 10, r.id = pid;
      r.runq_wait_ns = uint64_t(waits * jitter(rng) * 1e8);
      r.runq_waits = uint64_t(300 * jitter(rng));
      r.involuntary_switches = r.runq_waits;
      r.oncpu_ns = uint64_t(cores * jitter(rng) * 1e8);
      sink.add(r);
    }
    for (int i = 0; i < 20; ++i) {
      TorchCallRow c;
      c.ts_ns = t0 + uint64_t(i) * kSecond / 20, c.dur_ns = uint64_t(1e6 * jitter(rng));
      c.pid = c.tid = pid, c.name = "aten::mm";
      sink.add(c);
    }
  };
  process(100, 50), process(101, 50);  // the first job: two ranks of one launcher
  int s = 0;
  for (; s < 60; ++s) {
    second(100, s, 1.2, 0.9), second(101, s, 1.2, 0.9);
    sink.flush();
  }
  // (a wait for the refit thread, not a bound)
  for (int i = 0; i < 3000 && sink.models() < 2; ++i) {
    sink.flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(sink.models(), 2u) << "the operation's and the job's window model";
  ASSERT_TRUE(found.empty()) << found.front().anomaly.cause;
  process(200, 60), process(201, 60);  // the second job, waiting for CPUs
  for (; s < 80; ++s) {
    second(100, s, 1.2, 0.9), second(101, s, 1.2, 0.9);
    second(200, s, 1.4, 0.1), second(201, s, 1.4, 0.1);
    sink.flush();
  }
  EXPECT_EQ(sink.window_jobs(), (std::vector<std::string>{"the processes launched by pid 50",
                                                         "the processes launched by pid 60"}));
  EXPECT_TRUE(found.empty()) << found.front().anomaly.cause << " in " << found.front().process;
  for (uint32_t pid : {200u, 201u}) {
    ProcessExitRow e;
    e.pid = pid, e.end_ns = start + uint64_t(s) * kSecond;
    sink.add(e);
  }
  for (; s < 85; ++s) {
    second(100, s, 1.2, 0.9), second(101, s, 1.2, 0.9);
    sink.flush();
  }
  EXPECT_EQ(sink.window_jobs(), std::vector<std::string>{"the processes launched by pid 50"})
      << "an ended job's windows and model go";
  for (; s < 90; ++s) {  // a hog: the first job's own ranks wait three times as long
    second(100, s, 3.6, 0.6), second(101, s, 3.6, 0.6);
    sink.flush();
  }
  ASSERT_FALSE(found.empty()) << "the hog found";
  EXPECT_EQ(detect::cause_kind(found[0].anomaly.cause), "CPU interference");
  EXPECT_EQ(found[0].process, "the processes launched by pid 50 (pids 100, 101)");
  EXPECT_EQ(found[0].anomaly.name, "window");
}

// A job that starts beside a running one slows it while it starts (session 52's hour: 422
// anomalies in 20 s, all of the second job's start): the agent reports the episode once, naming
// the job that started, with the count of what it stands for. Here the first job's aten::mm
// runs 10 times slower for 10 s from the second job's exec, whose first call comes 2 s later.
TEST(DetectionSink, ASecondJobsStartIsOneAnomalyNamingIt) {
  DetectionOptions o;
  o.warm_up_ns = 0;
  o.train_span_ns = 5 * kSecond;
  o.fold_lag_ns = UINT64_MAX;  // judged by the calls' time alone (they are long past)
  std::vector<AgentAnomaly> found;
  DetectionSink sink(o, [&](std::vector<AgentAnomaly>& a) {
    for (auto& x : a) found.push_back(x);
  });
  const uint64_t start = (monotonic_now_ns() - 300 * kSecond) / kSecond * kSecond;
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  auto process = [&](uint32_t pid, uint32_t ppid, int s) {
    ProcessRow p;
    p.pid = pid, p.ppid = ppid, p.name = "python3", p.start_ns = start + uint64_t(s) * kSecond;
    sink.add(p);
  };
  auto second = [&](uint32_t pid, int s, double slowdown) {  // 20 aten::mm calls of 1 ms
    for (int i = 0; i < 20; ++i) {
      TorchCallRow c;
      c.ts_ns = start + uint64_t(s) * kSecond + uint64_t(i) * kSecond / 20;
      c.dur_ns = uint64_t(1e6 * slowdown * jitter(rng));
      c.pid = c.tid = pid, c.name = "aten::mm";
      sink.add(c);
    }
  };
  process(100, 50, 0), process(101, 50, 0);
  int s = 0;
  for (; s < 60; ++s) {
    second(100, s, 1), second(101, s, 1);
    sink.flush();
  }
  for (int i = 0; i < 3000 && sink.models() < 1; ++i) {  // (a wait for the refit thread)
    sink.flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(sink.models(), 1u);
  ASSERT_TRUE(found.empty()) << found.front().anomaly.cause;
  for (; s < 100; ++s) {  // (the episode goes out once the start's 30 s are over)
    if (s == 65) process(200, 60, s), process(201, 60, s);
    double slowdown = s >= 65 && s < 75 ? 10 : 1;
    second(100, s, slowdown), second(101, s, slowdown);
    if (s >= 67) second(200, s, 1), second(201, s, 1);
    sink.flush();
  }
  ASSERT_EQ(found.size(), 1u) << (found.empty() ? "" : found.front().anomaly.cause + "; then " +
                                                          found.back().anomaly.cause);
  const AgentAnomaly& e = found[0];
  EXPECT_EQ(detect::cause_kind(e.anomaly.cause), "CPU interference");
  EXPECT_TRUE(e.anomaly.cause.starts_with(
      "CPU interference: a job started beside it (the processes launched by pid 60 (pids 200, 201)); "))
      << e.anomaly.cause;
  EXPECT_GE(e.folded_calls, 100u) << e.anomaly.cause;
  EXPECT_EQ(e.process.find("the processes launched by pid 50 (pids 100, 101)"), 0u) << e.process;
  EXPECT_GE(e.anomaly.ts_ns, start + 65 * kSecond);
  EXPECT_LE(e.anomaly.ts_ns + e.anomaly.dur_ns, start + 76 * kSecond);
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

// The agent's lone windows (window_stands_alone), on the windows of session 66's online
// cpu_interference runs: the job used 0.5 cores and waited 4 ms a second for a CPU; the hog's
// full window 0.27 cores and 454 ms, the window it grazed for half a second 0.38 and 242 ms.
TEST(AgentWindows, ANeighbourThatTookMuchOfTheJobsCpuStandsAlone) {
  detect::GroupModel m;
  m.features = {"cpu_cores", "runq_wait_ms_per_s", "torch_calls_per_s"};
  Eigen::MatrixXd means(1, 3);
  means << std::log1p(0.5), std::log1p(4.0), std::log1p(30000.0);
  m.model = detect::GaussianMixture(detect::CovarianceType::full, Eigen::VectorXd::Ones(1), means,
                                    {Eigen::MatrixXd::Identity(3, 3)});
  auto window = [&](double cores, double wait_ms) {
    detect::FeatureTable t;
    t.layer = "window";
    t.feature_names = m.features;
    t.log_rates = true;
    t.values.resize(1, 3);
    t.values << std::log1p(cores), std::log1p(wait_ms), std::log1p(30000.0);
    return window_stands_alone(t, 0, m);
  };
  EXPECT_TRUE(window(0.27, 454));
  EXPECT_TRUE(window(0.38, 242));
  // a checkpoint: every thread blocked, none queued
  EXPECT_FALSE(window(0.15, 3));
  // waiting a little more than usual, but under a third of what it wanted
  EXPECT_FALSE(window(0.38, 150));
  // the CPU as usual: its own threads queued behind each other
  EXPECT_FALSE(window(0.5, 400));
  // a job that always queues (more threads than cores): 300 ms usual, 400 now
  means(0, 1) = std::log1p(300.0);
  m.model = detect::GaussianMixture(detect::CovarianceType::full, Eigen::VectorXd::Ones(1), means,
                                    {Eigen::MatrixXd::Identity(3, 3)});
  EXPECT_FALSE(window(0.38, 400));
  // features of another model: nothing said
  m.features = {"cpu_cores", "runq_wait_ms_per_s", "cuda_calls_per_s"};
  EXPECT_FALSE(window(0.27, 454));
}

}  // namespace
}  // namespace eacgm
