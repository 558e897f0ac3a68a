// Windows that name only a symptom go out only in runs that last (agent/symptom_runs.h).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "agent/symptom_runs.h"

namespace eacgm {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

AgentAnomaly window(const std::string& job, uint64_t second, const std::string& cause) {
  AgentAnomaly x;
  x.job = job;
  x.anomaly.layer = x.anomaly.name = "window";
  x.anomaly.ts_ns = second * kSecond;
  x.anomaly.dur_ns = kSecond;
  x.anomaly.cause = cause;
  return x;
}

AgentAnomaly slow_call(const std::string& job, uint64_t second) {
  AgentAnomaly x;
  x.job = job;
  x.anomaly.layer = "torch";
  x.anomaly.name = "aten::gelu";
  x.anomaly.ts_ns = second * kSecond + 5'000'000;
  x.anomaly.dur_ns = 5'000'000;
  x.anomaly.cause = "slow operator: aten::gelu";
  return x;
}

// Feeds one judged window a flush, as the agent's windows come: `anomalous` the causes of the
// job's windows from `from` on ("" for a normal window), and returns what went out.
std::vector<AgentAnomaly> feed(SymptomRuns& runs, const std::string& job, uint64_t from,
                               const std::vector<std::string>& causes) {
  std::vector<AgentAnomaly> out;
  for (size_t i = 0; i < causes.size(); ++i) {
    std::vector<AgentAnomaly> found;
    if (!causes[i].empty()) found.push_back(window(job, from + i, causes[i]));
    runs.fold(found, {{job, {(from + i) * kSecond}}});
    for (auto& x : found) out.push_back(std::move(x));
  }
  return out;
}

TEST(SymptomRuns, WhatNamesOnlyASymptom) {
  EXPECT_TRUE(names_only_a_symptom(window("a", 1, "slow operators")));
  EXPECT_TRUE(names_only_a_symptom(window("a", 1, "slow Python code")));
  EXPECT_TRUE(names_only_a_symptom(window("a", 1, "unusual window: NIC traffic lower than usual")));
  EXPECT_FALSE(names_only_a_symptom(window("a", 1, "CPU interference")));
  EXPECT_FALSE(names_only_a_symptom(window("a", 1, "memory pressure")));
  // a late rank or a stopped CPU to blame
  EXPECT_FALSE(names_only_a_symptom(
      window("a", 1, "slow collectives: rank 1 (pid 7) joined 30.0 ms late (straggler)")));
  AgentAnomaly stalled = window("a", 1, "slow operators");
  stalled.anomaly.stalled_ns = 98e6;
  EXPECT_FALSE(names_only_a_symptom(stalled));
  EXPECT_FALSE(names_only_a_symptom(slow_call("a", 1)));
  EXPECT_FALSE(names_only_a_symptom(window("a", 1, "GPU idle")));  // measured on the GPU
}

// Session 65's torch_latency run: three "slow operators" windows, the job 1.6x slower while the
// host slowed its vCPU, then normal windows: nothing goes out, and the run is counted.
TEST(SymptomRuns, AFewSecondsSlowerWithNothingToBlameIsDropped) {
  SymptomRuns runs;
  auto out = feed(runs, "job", 100, {"slow operators", "slow operators", "slow operators", "", ""});
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(runs.dropped_runs(), 1u);
  EXPECT_EQ(runs.dropped_windows(), 3u);
  EXPECT_EQ(runs.held(), 0u);
}

// A job slower for good is reported once its run lasts: the held windows together, in order,
// then each later one as it comes.
TEST(SymptomRuns, ALastingSlowdownGoesOutOnceItLasts) {
  SymptomRuns runs({.min_ns = 15 * kSecond});
  std::vector<std::string> causes(14, "slow operators");
  EXPECT_TRUE(feed(runs, "job", 200, causes).empty());
  EXPECT_EQ(runs.held(), 14u);
  auto out = feed(runs, "job", 214, {"slow operators"});
  ASSERT_EQ(out.size(), 15u);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].anomaly.ts_ns, (200 + i) * kSecond);
  out = feed(runs, "job", 215, {"unusual window: CPU use lower than usual"});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(runs.dropped_runs(), 0u);
  // the run over, the next one counts from its own start again
  EXPECT_TRUE(feed(runs, "job", 216, {"", "slow operators", "slow operators"}).empty());
  EXPECT_EQ(runs.held(), 2u);
  runs.finish();
  EXPECT_EQ(runs.dropped_windows(), 2u);
}

// A window naming a cause goes out at once, with the symptom windows right before it (its
// onset); the symptom windows after it are a run of their own (the job recovering).
TEST(SymptomRuns, ACauseTakesItsOnsetAlongButNotItsAfterEffect) {
  SymptomRuns runs;
  auto out = feed(runs, "job", 300,
                  {"slow operators", "memory pressure", "memory pressure", "slow operators",
                   "slow operators", ""});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].anomaly.cause, "slow operators");
  EXPECT_EQ(out[0].anomaly.ts_ns, 300 * kSecond);
  EXPECT_EQ(out[1].anomaly.cause, "memory pressure");
  EXPECT_EQ(out[2].anomaly.cause, "memory pressure");
  EXPECT_EQ(runs.dropped_windows(), 2u);
}

// Runs are per job, calls pass untouched, and a job that ended drops what it held.
TEST(SymptomRuns, JobsApartAndCallsUntouched) {
  SymptomRuns runs({.min_ns = 3 * kSecond});
  std::vector<AgentAnomaly> found = {window("a", 10, "slow operators"), slow_call("a", 10),
                                     window("b", 10, "slow operators"),
                                     window("b", 11, "CPU interference")};
  runs.fold(found, {{"a", {10 * kSecond}}, {"b", {10 * kSecond, 11 * kSecond}}});
  ASSERT_EQ(found.size(), 3u);  // a's call, b's onset and its cause
  EXPECT_EQ(found[0].anomaly.layer, "torch");
  EXPECT_EQ(found[1].job, "b");
  EXPECT_EQ(found[2].anomaly.cause, "CPU interference");
  EXPECT_EQ(runs.held(), 1u);  // a's window: its next one not judged yet
  found = {window("a", 11, "slow operators"), window("a", 12, "slow operators")};
  runs.fold(found, {{"a", {11 * kSecond, 12 * kSecond}}});
  EXPECT_EQ(found.size(), 3u);  // three seconds of it: out
  found = {window("a", 13, "slow operators")};
  runs.fold(found, {});
  EXPECT_EQ(found.size(), 1u);
  runs.ended("a");
  EXPECT_EQ(runs.dropped_runs(), 0u);
  // a gap breaks a run: a window judged normal between two symptom windows
  found = {window("c", 1, "slow operators")};
  runs.fold(found, {{"c", {1 * kSecond}}});
  found = {window("c", 3, "slow operators")};
  runs.fold(found, {{"c", {2 * kSecond, 3 * kSecond}}});
  EXPECT_TRUE(found.empty());
  EXPECT_EQ(runs.dropped_runs(), 1u);
  runs.ended("c");
  EXPECT_EQ(runs.dropped_runs(), 2u);
  EXPECT_EQ(runs.held(), 0u);
}

// Windows not judged (the agent's flight recording write, a lull held back, a window the
// detector holds for the next) do not end a run: a 20 s slowdown with a 3 s gap in its middle is
// one run and goes out, and a run that went out keeps going out after such a gap; a gap longer
// than max_gap_ns ends it.
TEST(SymptomRuns, WindowsNotJudgedDoNotEndARun) {
  SymptomRuns runs({.min_ns = 15 * kSecond, .max_gap_ns = 5 * kSecond});
  std::vector<AgentAnomaly> out;
  auto second = [&](uint64_t s, bool judged, const std::string& cause) {
    std::vector<AgentAnomaly> found;
    if (!cause.empty()) found.push_back(window("job", s, cause));
    std::map<std::string, std::vector<uint64_t>> j;
    if (judged) j["job"] = {s * kSecond};
    runs.fold(found, j);
    for (auto& x : found) out.push_back(std::move(x));
  };
  for (uint64_t s = 100; s < 110; ++s) second(s, true, "slow operators");
  for (uint64_t s = 110; s < 113; ++s) second(s, false, "");  // the flight recording's write
  for (uint64_t s = 113; s < 118; ++s) second(s, true, "slow operators");
  EXPECT_EQ(out.size(), 15u) << "10 + 5 windows spanning 18 s: out together";
  for (uint64_t s = 118; s < 121; ++s) second(s, false, "");
  second(121, true, "slow operators");
  EXPECT_EQ(out.size(), 16u) << "still the run that went out";
  for (uint64_t s = 122; s < 130; ++s) second(s, false, "");
  second(130, true, "slow operators");
  EXPECT_EQ(out.size(), 16u) << "after 8 s not judged: a new run";
  EXPECT_EQ(runs.held(), 1u);
  second(131, true, "");
  EXPECT_EQ(runs.held(), 0u);
  EXPECT_EQ(runs.dropped_windows(), 1u);
}

// A window that stood alone (a neighbour took the job's CPU) goes out whatever its cause reads.
TEST(SymptomRuns, AWindowThatStoodAloneIsNotHeld) {
  SymptomRuns runs;
  std::vector<AgentAnomaly> found = {window("job", 5, "slow operators")};
  found[0].stands_alone = true;
  runs.fold(found, {{"job", {5 * kSecond}}});
  EXPECT_EQ(found.size(), 1u);
}

}  // namespace
}  // namespace eacgm
