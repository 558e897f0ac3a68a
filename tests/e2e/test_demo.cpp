// The Quick start's demo (scripts/demo_run.sh, what scripts/demo.sh runs after setting up and
// building): a 2-rank GPT training traced and analysed with no flags must name both injected
// faults where they were injected: the straggling rank at (nearly) each of its late steps, and
// the noisy neighbour's CPU interference while it ran; the CUDA loop's neighbour likewise.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>

#include "chromium.h"
#include "e2e_util.h"

namespace e2e {
namespace {

// Each rank's steps as it measured them (examples/gpt_ddp.py --truth), CLOCK_MONOTONIC ns:
// when its forward and backward began, when it reached the all_reduce, and its wait for a CPU
// in between (computing never blocks: any wait there is contention); and at each step's start,
// all its threads' wait for a CPU so far (what eacgm's windows count).
struct RankSteps {
  std::vector<int64_t> start, arrive, late, run_delay, process_run_delay;
};
using Truth = std::vector<RankSteps>;

Truth read_truth(const std::string& prefix) {
  Truth t;
  for (int rank = 0; rank < 2; ++rank) {
    auto j =
        nlohmann::json::parse(std::ifstream(prefix + "-rank" + std::to_string(rank) + ".json"));
    RankSteps r;
    r.start = j.at("compute_start_ns").get<std::vector<int64_t>>();
    r.arrive = j.at("arrive_ns").get<std::vector<int64_t>>();
    r.late = j.at("late").get<std::vector<int64_t>>();
    r.run_delay = j.at("run_delay_ns").get<std::vector<int64_t>>();
    r.process_run_delay = j.at("process_run_delay_ns").get<std::vector<int64_t>>();
    t.push_back(std::move(r));
  }
  return t;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1))];
}

// The job's wait for a CPU (both ranks, all their threads) in [from, to), in seconds per second:
// each rank's running total read at its steps' starts, taken linearly between them. -1 where a
// rank has no step before `from` or after `to`.
double job_wait_rate(const Truth& t, int64_t from, int64_t to) {
  double waited = 0;
  for (const auto& r : t) {
    auto at = [&](int64_t ts) -> double {
      auto it = std::upper_bound(r.start.begin(), r.start.end(), ts);
      if (it == r.start.begin() || it == r.start.end()) return -1;
      size_t k = size_t(it - r.start.begin());
      double f = double(ts - r.start[k - 1]) / double(std::max<int64_t>(1, r.start[k] - r.start[k - 1]));
      return double(r.process_run_delay[k - 1]) +
             f * double(r.process_run_delay[k] - r.process_run_delay[k - 1]);
    };
    double a = at(from), b = at(to);
    if (a < 0 || b < 0) return -1;
    waited += std::max(0.0, b - a);
  }
  return waited / double(std::max<int64_t>(1, to - from));
}

// The 95th percentile of job_wait_rate over the windows of `window_ns` that tile the first half
// of the job's steps (what detect learns from).
double train_job_wait_p95(const Truth& t, int64_t window_ns) {
  std::vector<double> rates;
  int64_t first = t[0].start.front(), half = first + (t[0].start.back() - first) / 2;
  for (int64_t w = first; w + window_ns <= half; w += window_ns)
    if (double r = job_wait_rate(t, w, w + window_ns); r >= 0) rates.push_back(r);
  return quantile(rates, 0.95);
}

// How late `rank` reached the all_reduce after the other rank, at the step with an arrival
// nearest `ts_ns` (an anomaly's time: the start of one rank's call), in ms.
double lateness_ms(const Truth& t, int rank, int64_t ts_ns) {
  size_t n = std::min(t[0].arrive.size(), t[1].arrive.size()), best = 0;
  int64_t best_gap = INT64_MAX;
  for (size_t k = 0; k < n; ++k) {
    int64_t gap = std::min(std::llabs(t[0].arrive[k] - ts_ns), std::llabs(t[1].arrive[k] - ts_ns));
    if (gap < best_gap) best_gap = gap, best = k;
  }
  return n ? double(t[rank].arrive[best] - t[1 - rank].arrive[best]) / 1e6 : 0;
}

// The most `rank` was late at the steps whose collective it or the other rank reached within
// [from_ns, to_ns) (a window's steps), in ms; -inf where none.
double most_late_ms(const Truth& t, int rank, int64_t from_ns, int64_t to_ns) {
  size_t n = std::min(t[0].arrive.size(), t[1].arrive.size());
  double most = -std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < n; ++k) {
    int64_t first = std::min(t[0].arrive[k], t[1].arrive[k]);
    int64_t last = std::max(t[0].arrive[k], t[1].arrive[k]);
    if (last >= from_ns && first < to_ns)
      most = std::max(most, double(t[rank].arrive[k] - t[1 - rank].arrive[k]) / 1e6);
  }
  return most;
}

// What stood out from the job's normal by its own measure. Normal is the first half of the
// steps (what detect learns from): rank 1's lateness at the all_reduce in its healthy steps,
// and each rank's share of time waiting for a CPU per step.
struct Standout {
  // rank 1's healthy lateness in training: its 99th percentile and its most (printed); the
  // lateness a late step needs to stand out
  double natural_p99_ms = 0, natural_max_ms = 0, late_bound_ms = 0;
  // the share of its computing time a rank waited for a CPU: per step (the 95th percentile of
  // training's steps), and over all the steps of training and of the neighbour's 3 s
  double train_wait_p95 = 0, train_wait = 0, neighbour_wait = 0;
  int late_standout = 0;
  std::vector<int64_t> standout_arrivals;  // rank 0's arrival at each late step that stood out
  std::vector<double> hidden_ms;           // the lateness of the late steps that did not
  // the neighbour made the job wait for a CPU clearly more than it did in training
  bool neighbour_stood_out() const {
    return neighbour_wait > std::max(2 * train_wait, train_wait + 0.2);
  }
};

Standout standout(const Truth& t, int64_t neighbour_from, int64_t neighbour_to) {
  Standout s;
  size_t n = std::min(t[0].arrive.size(), t[1].arrive.size()), half = n / 2;
  std::vector<double> natural, train_wait;
  int64_t train_delay = 0, train_time = 0, neighbour_delay = 0, neighbour_time = 0;
  for (size_t k = 0; k < n; ++k) {
    double late_ms = double(t[1].arrive[k] - t[0].arrive[k]) / 1e6;
    if (k < half && !t[1].late[k]) natural.push_back(std::fabs(late_ms));
    for (const auto& r : t) {
      int64_t computing = std::max<int64_t>(1, r.arrive[k] - r.start[k]);
      if (k < half) {
        train_wait.push_back(double(r.run_delay[k]) / double(computing));
        train_delay += r.run_delay[k], train_time += computing;
      }
      if (r.start[k] >= neighbour_from && r.arrive[k] <= neighbour_to)
        neighbour_delay += r.run_delay[k], neighbour_time += computing;
    }
  }
  s.natural_p99_ms = quantile(natural, 0.99);
  s.natural_max_ms = quantile(natural, 1);
  s.late_bound_ms = std::max(2 * s.natural_p99_ms, s.natural_p99_ms + 10);
  for (size_t k = 0; k < n; ++k) {
    double late_ms = double(t[1].arrive[k] - t[0].arrive[k]) / 1e6;
    if (!t[1].late[k]) continue;
    if (late_ms > s.late_bound_ms) {
      ++s.late_standout;
      s.standout_arrivals.push_back(t[0].arrive[k]);
    } else {
      s.hidden_ms.push_back(late_ms);
    }
  }
  s.train_wait_p95 = quantile(train_wait, 0.95);
  s.train_wait = double(train_delay) / double(std::max<int64_t>(1, train_time));
  s.neighbour_wait = double(neighbour_delay) / double(std::max<int64_t>(1, neighbour_time));
  return s;
}

TEST_F(RecordingTest, DemoNamesTheStragglerAndTheNoisyNeighbour) {
  if (run({"/usr/bin/python3", "-c", "import torch"}).exit_code != 0)
    GTEST_SKIP() << "python3-torch is not installed (scripts/setup.sh installs it)";
  auto demo =
      run({std::string(EACGM_SOURCE_DIR) + "/scripts/demo_run.sh", dir_},
          {std::string("EACGM=") + kEacgm, std::string("DEMO_TRAIN=") + EACGM_DEMO_TRAIN}, 110);
  ASSERT_EQ(demo.exit_code, 0) << demo.err << demo.out;
  printf("%s", demo.out.substr(0, demo.out.find("\nrecording ")).c_str());
  // rank 1 said how many of its steps it made late; detect names it at (nearly) each of those
  // that stood out from the job's own jitter
  std::smatch late;
  ASSERT_TRUE(
      std::regex_search(demo.out, late, std::regex(R"(rank 1: \d+ steps .*, (\d+) steps late)")))
      << demo.out;
  int64_t late_steps = std::stoll(late[1]);
  // enough late steps for the share below to mean something; how many fit in the straggling
  // stretch (14% of the run) depends on the machine's speed: 45-70 here idle, fewer under load
  ASSERT_GE(late_steps, 10);
  const std::string db_path = dir_ + "/demo.eacgm.db";
  Db db(db_path);
  auto part = [&](const std::string& where) {
    return db.scalar("SELECT count(*) FROM anomalies WHERE " + where);
  };
  int64_t straggler =
      part("cause LIKE '%rank 1 (pid % joined % late (straggler)%' AND name = 'gloo:all_reduce'");
  int64_t other_ranks = part("cause LIKE '%(straggler)%' AND cause NOT LIKE '%rank 1 (pid%'");
  // The neighbour: from when rank 0 signalled it, for 3 s. Where it stood out from the job's
  // normal (below), detect names it in the windows it took the CPUs (the window model: at least
  // half of them) and in the operators it preempted (their cause ends "(CPU interference)").
  std::smatch at;
  ASSERT_TRUE(std::regex_search(demo.out, at, std::regex(R"(noisy neighbour signalled at (\d+))")))
      << demo.out;
  int64_t from = std::stoll(at[1]), to = from + 3'500'000'000;
  std::string during =
      "ts_ns + dur_ns >= " + std::to_string(from) + " AND ts_ns <= " + std::to_string(to);
  int64_t named = part("cause LIKE '%CPU interference%' AND " + during);
  int64_t named_elsewhere = part("cause LIKE '%CPU interference%' AND NOT (" + during + ")");
  int64_t windows = part("layer = 'window' AND cause = 'CPU interference' AND " + during);
  int64_t windows_elsewhere =
      part("layer = 'window' AND cause = 'CPU interference' AND NOT (" + during + ")");
  std::smatch window_s;
  ASSERT_TRUE(std::regex_search(demo.out, window_s, std::regex(R"(windows of ([0-9.]+) s)")))
      << demo.out;
  double neighbour_windows = 3.0 / std::stod(window_s[1]);
  printf(
      "late steps %lld: straggler anomalies %lld (other ranks %lld); CPU interference named "
      "%lld times during the neighbour (%lld windows), %lld elsewhere\n",
      (long long)late_steps, (long long)straggler, (long long)other_ranks, (long long)named,
      (long long)windows, (long long)named_elsewhere);
  // What the ranks measured of their own steps (gpt_ddp.py --truth): whether a fault stood out
  // from the job's own normal is the workload's to say, not one run's counts. On an idle
  // machine both do; beside a busy neighbour the job's own jitter can hide them, and a model
  // that then says nothing is right.
  Truth t = read_truth(dir_ + "/.truth");
  Standout s = standout(t, from, from + 3'000'000'000);
  printf(
      "the ranks' own measure: healthy lateness p99 %.1f ms (most %.1f ms), %d of %lld late "
      "steps stood out (over %.1f ms; the others %s ms late); waiting for a CPU %.2f of their "
      "computing in training (%.2f in its 95th percentile step), %.2f while the neighbour ran\n",
      s.natural_p99_ms, s.natural_max_ms, s.late_standout, (long long)late_steps,
      s.late_bound_ms, fmt::format("{:.1f}", fmt::join(s.hidden_ms, ", ")).c_str(), s.train_wait,
      s.train_wait_p95, s.neighbour_wait);
  // the late steps that stood out and have no straggler anomaly at rank 0's call
  std::vector<int64_t> flagged_at;
  db.each("SELECT ts_ns FROM anomalies WHERE cause LIKE '%rank 1 (pid % late (straggler)%'",
          [&](sqlite3_stmt* st) { flagged_at.push_back(sqlite3_column_int64(st, 0)); });
  // (A known gap, session 24: under this VM's CPU contention a broad component of the
  // all_reduce model can span both the late rank's near-zero waits and the early rank's, and
  // score a 50-60 ms straggle above the threshold; this list shows such misses.)
  std::string missed;
  for (int64_t arrive : s.standout_arrivals)
    if (std::none_of(flagged_at.begin(), flagged_at.end(),
                     [&](int64_t ts) { return std::llabs(ts - arrive) < 5'000'000; }))
      missed += fmt::format(" {:.1f}", lateness_ms(t, 1, arrive));
  printf("late steps that stood out with no straggler anomaly, ms late:%s\n",
         missed.empty() ? " none" : missed.c_str());
  // Every rank named a straggler was late by the ranks' own clocks: at the collective the
  // anomaly is at, it reached the all_reduce at least half the named lateness after the other;
  // for a window that names one (the most it was late there), at one of the steps in it.
  // (Beside a busy loop rank 0 is often the one late, truly: it shares the loop's CPU.)
  int64_t unconfirmed = 0;
  std::string unconfirmed_causes;
  db.each("SELECT ts_ns, dur_ns, layer, cause FROM anomalies WHERE cause LIKE '%(straggler)%'",
          [&](sqlite3_stmt* st) {
            int64_t ts = sqlite3_column_int64(st, 0), dur = sqlite3_column_int64(st, 1);
            bool window = std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 2))) ==
                          "window";
            std::string cause = reinterpret_cast<const char*>(sqlite3_column_text(st, 3));
            std::smatch named;
            if (!std::regex_search(cause, named,
                                   std::regex(R"(rank (\d) \(pid \d+\) joined ([0-9.]+) ms late)")))
              return;
            int rank = std::stoi(named[1]);
            double late_ms = window ? most_late_ms(t, rank, ts, ts + dur) : lateness_ms(t, rank, ts);
            if (late_ms < 0.5 * std::stod(named[2])) {
              ++unconfirmed;
              unconfirmed_causes +=
                  fmt::format("\n  {:.1f} ms by the ranks' clocks: {}", late_ms, cause);
            }
          });
  printf("straggler anomalies the ranks' clocks do not confirm: %lld%s\n", (long long)unconfirmed,
         unconfirmed_causes.c_str());
  EXPECT_LE(unconfirmed, 2) << unconfirmed_causes;
  if (s.late_standout >= 5) EXPECT_GE(double(straggler), 0.8 * s.late_standout) << demo.out;
  if (s.neighbour_stood_out()) {
    EXPECT_GE(named, 1) << demo.out;
    EXPECT_GE(double(windows), 0.5 * neighbour_windows) << demo.out;
  }
  // a window named CPU interference elsewhere is a false alarm only where the job measured no
  // more wait for a CPU than in training: by its own count of all its threads' waits (what the
  // window measures; a rank's main thread alone may wait no more while gloo's threads do)
  int64_t false_windows = 0;
  double job_p95 = 0;
  std::string false_detail;
  db.each(
      "SELECT ts_ns, dur_ns FROM anomalies WHERE layer = 'window' AND cause = 'CPU "
      "interference' AND NOT (" +
          during + ")",
      [&](sqlite3_stmt* st) {
        int64_t ts = sqlite3_column_int64(st, 0), dur = sqlite3_column_int64(st, 1);
        if (job_p95 == 0) job_p95 = train_job_wait_p95(t, dur);
        double rate = job_wait_rate(t, ts, ts + dur);
        bool unusual = rate > job_p95;
        false_windows += !unusual;
        false_detail += fmt::format(" {:.2f}", rate);
      });
  printf(
      "windows named CPU interference elsewhere: %lld, of which the job measured no unusual "
      "wait: %lld (its threads' wait there, s/s:%s; training's 95th percentile %.2f)\n",
      (long long)windows_elsewhere, (long long)false_windows, false_detail.c_str(), job_p95);
  EXPECT_LE(false_windows, 2) << demo.out;
  EXPECT_NE(demo.out.find("joined"), std::string::npos);
  EXPECT_GT(std::filesystem::file_size(dir_ + "/demo.pftrace"), 100'000u);
  EXPECT_NE(demo.out.find("demo: done. Where to look:"), std::string::npos);
  // the page of charts, where the demo says it is, drawn: the straggler's heat map, the
  // anomalies as crosses where the table puts them
  EXPECT_NE(demo.out.find(dir_ + "/demo.html"), std::string::npos) << demo.out;
  if (chromium_missing().empty())
    expect_drawn(render(dir_ + "/demo.html", "demo"),
                 {"layer-comm", "layer-torch", "heat-0", "straggle-0", "host_cpu", "timeline"});
  if (EACGM_HAVE_CUDA && std::filesystem::exists(EACGM_DEMO_TRAIN)) {
    if (chromium_missing().empty())
      expect_drawn(render(dir_ + "/demo-cuda.html", "demo-cuda"),
                   {"layer-cuda", "hist-cuda", "host_cpu", "host_runq", "timeline"});
    Db cuda(dir_ + "/demo-cuda.eacgm.db");
    EXPECT_GE(cuda.scalar("SELECT count(*) FROM anomalies WHERE cause LIKE '%CPU interference%'"),
              1)
        << demo.out;
  }
}

}  // namespace
}  // namespace e2e
