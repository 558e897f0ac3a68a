// A job's start beside others as one anomaly (agent/job_starts.h).
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>

#include <string>
#include <tuple>
#include <vector>

#include "agent/interference_episodes.h"
#include "agent/job_starts.h"
#include "agent/stall_episodes.h"

namespace eacgm {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

AgentAnomaly slow_call(const std::string& job, uint64_t ts, const std::string& name = "aten::mm") {
  AgentAnomaly x;
  x.job = job;
  x.process = "python3";
  x.anomaly.layer = "torch";
  x.anomaly.name = name;
  x.anomaly.ts_ns = ts;
  x.anomaly.dur_ns = 3'000'000;
  x.anomaly.score = -40, x.anomaly.threshold = -12;
  x.anomaly.cause = "slow operator: " + name + "; preempted: waited 2.1 ms for a CPU (CPU interference)";
  return x;
}

AgentAnomaly window(const std::string& job, uint64_t ts, const std::string& cause) {
  AgentAnomaly x;
  x.job = job;
  x.anomaly.layer = x.anomaly.name = "window";
  x.anomaly.ts_ns = ts;
  x.anomaly.dur_ns = kSecond;
  x.anomaly.cause = cause;
  return x;
}

std::string words(const std::string& job) { return job + " (pids 1, 2)"; }

struct Folder {
  JobStarts starts;
  std::vector<AgentAnomaly> out;
  // fold `found` at data time `now` (the clock the same)
  void fold(std::vector<AgentAnomaly> found, uint64_t now) {
    starts.fold(found, now, now, words);
    for (auto& x : found) out.push_back(std::move(x));
  }
  // whether exactly one anomaly went out, on its own (no episode); then forgets it
  bool one_alone() {
    bool alone = out.size() == 1 && out[0].folded_calls == 0 && out[0].folded_windows == 0;
    out.clear();
    return alone;
  }
};

// Session 52's hour: a second job's start gave one 20 s episode of 422 anomalies in the first
// job (slow aten::mm/addmm/linear, "slow operators" windows), and nothing else in the hour. The
// episode is one anomaly naming the job that started, with the count of what it stands for
// (a window of storage I/O too: a job starting reads its libraries, session 54's hour); a late
// rank or the network in the same seconds are reported as ever.
TEST(JobStarts, ASecondJobsStartIsOneAnomalyNamingIt) {
  Folder f;
  f.starts.seen("job a", 0);
  f.starts.seen("job b", 100 * kSecond);  // 100 s later: beside it
  std::vector<AgentAnomaly> found;
  for (int i = 0; i < 40; ++i)  // from 2 s before its start (a burst takes earlier calls along)
    found.push_back(slow_call("job a", 98 * kSecond + uint64_t(i) * kSecond / 4,
                              i % 4 == 0 ? "aten::addmm" : "aten::mm"));
  found.push_back(window("job a", 101 * kSecond, "slow operators: torch calls 1,200/s (usual 2,500/s)"));
  AgentAnomaly late = slow_call("job a", 105 * kSecond, "gloo:all_reduce");
  late.anomaly.layer = "comm";
  late.anomaly.late_pid = 7;
  late.anomaly.cause = "straggling rank: gloo:all_reduce waited for a peer; rank 1 joined 30 ms late (straggler)";
  found.push_back(late);
  found.push_back(window("job a", 106 * kSecond, "storage I/O: disk 90 MB/s (usual 1 MB/s)"));
  AgentAnomaly lossy = slow_call("job a", 106 * kSecond, "gloo:all_reduce");
  lossy.anomaly.layer = "comm";
  lossy.anomaly.cause = "slow collective: gloo:all_reduce; 12 retransmits (network packet loss)";
  found.push_back(lossy);
  f.fold(found, 108 * kSecond);
  ASSERT_EQ(f.out.size(), 2u) << "what a job's start cannot cause goes out at once";
  EXPECT_EQ(f.out[0].anomaly.late_pid, 7u);
  EXPECT_EQ(f.out[1].anomaly.cause.find("network packet loss") != std::string::npos, true);
  EXPECT_EQ(f.starts.open_episodes(), 1u);
  f.out.clear();
  f.fold({slow_call("job a", 109 * kSecond), slow_call("job b", 112 * kSecond)}, 113 * kSecond);
  f.fold({}, 122 * kSecond);
  EXPECT_TRUE(f.out.empty()) << "under 10 s since the last: the episode goes on";
  f.fold({}, 124 * kSecond);
  EXPECT_TRUE(f.out.empty()) << "the start's 30 s are not over: the episode goes on";
  f.fold({}, 131 * kSecond);
  ASSERT_EQ(f.out.size(), 1u);
  const AgentAnomaly& e = f.out[0];
  EXPECT_EQ(detect::cause_kind(e.anomaly.cause), "CPU interference");
  EXPECT_EQ(e.anomaly.cause,
            "CPU interference: a job started beside it (job b (pids 1, 2)); 42 slow calls "
            "(aten::mm 32, aten::addmm 10) and 2 windows (slow operators 1, storage I/O 1) over "
            "14.0 s");
  EXPECT_EQ(e.folded_calls, 42u);
  EXPECT_EQ(e.folded_windows, 2u);
  EXPECT_EQ(e.anomaly.layer, "window");
  EXPECT_EQ(e.anomaly.ts_ns, 98 * kSecond);
  EXPECT_EQ(e.process, "job a (pids 1, 2) and job b (pids 1, 2)");
  EXPECT_EQ(f.starts.open_episodes(), 0u);
  f.out.clear();
  f.fold({slow_call("job a", 200 * kSecond)}, 201 * kSecond);
  EXPECT_TRUE(f.one_alone()) << "long after the start: on its own, at once";
}

// Session 55's ten minutes: one start as two anomalies 16 s apart, its first episode gone out
// after 10 s without another, the start's first steps' slow collectives a second one, the job
// named by what was left of it ("python3 (pid 7954)", its rank 0 gone). An episode lasts the
// start's 30 s and keeps the fullest words it had for a job.
TEST(JobStarts, AStartsEpisodeLastsItsThirtySecondsAndKeepsTheJobsFullName) {
  JobStarts starts;
  std::vector<AgentAnomaly> out;
  std::string b = "the processes launched by pid 7952 (pids 7953, 7954)";
  auto who = [&](const std::string& job) { return job == "job b" ? b : job; };
  auto fold = [&](std::vector<AgentAnomaly> found, uint64_t now) {
    starts.fold(found, now, now, who);
    for (auto& x : found) out.push_back(std::move(x));
  };
  starts.seen("job a", 0);
  starts.seen("job b", 240 * kSecond);
  fold({window("job a", 241 * kSecond, "slow operators: torch calls 1,200/s (usual 2,500/s)"),
        window("job a", 242 * kSecond, "unusual window")},
       243 * kSecond);
  fold({}, 254 * kSecond);
  EXPECT_TRUE(out.empty()) << "10 s quiet, but within the start's 30 s";
  b = "python3 (pid 7954)";
  std::vector<AgentAnomaly> calls;
  for (int i = 0; i < 6; ++i)
    calls.push_back(slow_call("job a", 257 * kSecond + uint64_t(i) * kSecond / 10, "gloo:all_reduce"));
  fold(calls, 258 * kSecond);
  fold({}, 269 * kSecond);
  EXPECT_TRUE(out.empty()) << "over 10 s quiet, but the start is 29 s old";
  fold({}, 271 * kSecond);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].folded_calls, 6u);
  EXPECT_EQ(out[0].folded_windows, 2u);
  EXPECT_NE(out[0].anomaly.cause.find("(the processes launched by pid 7952 (pids 7953, 7954))"),
            std::string::npos)
      << out[0].anomaly.cause;
  EXPECT_EQ(starts.open_episodes(), 0u);
}

// At the agent's start every job is new: none started beside another until one had been seen
// for min_age_ns (30 s).
TEST(JobStarts, JobsSeenTogetherAtTheAgentsStartAreNoEpisode) {
  Folder f;
  f.starts.seen("job a", 10 * kSecond);
  f.starts.seen("job b", 20 * kSecond);
  f.fold({slow_call("job a", 21 * kSecond)}, 22 * kSecond);
  EXPECT_TRUE(f.one_alone());
  EXPECT_EQ(f.starts.open_episodes(), 0u);
}

// A job is seen by its first traced call, seconds after its process began: a slow call of a
// neighbour while a process of no job yet is starting waits for it (up to hold_ns of the
// clock) and joins the episode when it becomes a job; one whose candidate exits, or whose
// time is up, goes out on its own, and a process 20 s old is no candidate.
TEST(JobStarts, ANeighboursSlowCallWaitsForAStartingProcessToBecomeAJob) {
  Folder f;
  f.starts.seen("job a", 0);
  f.starts.candidate(300, 300 * kSecond);
  f.fold({slow_call("job a", 301 * kSecond)}, 302 * kSecond);
  EXPECT_TRUE(f.out.empty());
  EXPECT_EQ(f.starts.held(), 1u);
  f.starts.gone(300);
  f.starts.seen("job c", 300 * kSecond);
  f.fold({}, 303 * kSecond);
  EXPECT_EQ(f.starts.held(), 0u);
  EXPECT_EQ(f.starts.open_episodes(), 1u);
  f.fold({}, 331 * kSecond);
  ASSERT_EQ(f.out.size(), 1u);
  EXPECT_EQ(f.out[0].folded_calls, 1u);
  f.out.clear();

  f.starts.candidate(400, 400 * kSecond);
  f.fold({slow_call("job a", 401 * kSecond)}, 401 * kSecond);
  EXPECT_TRUE(f.out.empty());
  f.starts.gone(400);  // it exited: no job will claim it
  f.fold({}, 401 * kSecond);
  EXPECT_TRUE(f.one_alone());

  f.starts.candidate(500, 500 * kSecond);
  f.fold({slow_call("job a", 501 * kSecond)}, 501 * kSecond);
  EXPECT_TRUE(f.out.empty());
  f.fold({}, 515 * kSecond);
  EXPECT_TRUE(f.out.empty()) << "held up to 15 s: a starved job's first call may take 10";
  f.fold({}, 516 * kSecond);  // hold_ns (15 s) later on the clock: out, the candidate alive
  EXPECT_TRUE(f.one_alone());

  // a process 20 s old in no job is starting none (a shell, a CPU hog): nothing waits for it
  f.starts.candidate(600, 600 * kSecond);
  f.fold({slow_call("job a", 621 * kSecond)}, 621 * kSecond);
  EXPECT_TRUE(f.one_alone());
  EXPECT_EQ(f.starts.candidates(), 0u);
}

// A neighbour that keeps slowing the others is one anomaly a minute (max_ns), not one for all
// time, and the agent's end reports what is open.
TEST(JobStarts, ALastingNeighbourIsOneAnomalyAMinuteAndTheEndReportsWhatIsOpen) {
  Folder f;
  f.starts.seen("job a", 0);
  f.starts.seen("job b", 100 * kSecond);
  for (uint64_t t = 101; t <= 230; t += 2) f.fold({slow_call("job a", t * kSecond)}, t * kSecond);
  ASSERT_EQ(f.out.size(), 2u);  // at 161 s and 221 s
  EXPECT_EQ(f.out[0].folded_calls, 31u);  // 101-161 s
  EXPECT_EQ(f.out[1].folded_calls, 30u);  // 163-221 s
  std::vector<AgentAnomaly> last;
  f.starts.finish(last, words);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].folded_calls, 4u);  // 223-229 s
  EXPECT_EQ(f.starts.open_episodes(), 0u);
}

// Session 63's GPT training: one 98 ms stop of a vCPU gave slow aten::addmm and the
// aten::linear around it and a "slow operators" window, each explained by the stall
// (Anomaly::stalled_ns). They are one anomaly naming the stop, once 5 s of data passed without
// another; what no stall explains goes out as ever, and a stop 20 s later is an anomaly of its own.
TEST(StallEpisodes, WhatOneStopSlowedIsOneAnomalyNamingIt) {
  StallEpisodes stalls;
  std::vector<AgentAnomaly> out;
  auto fold = [&](std::vector<AgentAnomaly> found, uint64_t now) {
    stalls.fold(found, now);
    for (auto& x : found) out.push_back(std::move(x));
  };
  auto stalled = [](AgentAnomaly x, double ms) {
    x.anomaly.stalled_ns = ms * 1e6;
    x.anomaly.pid = 7;
    return x;
  };
  AgentAnomaly addmm = stalled(slow_call("job a", 100 * kSecond, "aten::addmm"), 98.3);
  AgentAnomaly linear = stalled(slow_call("job a", 100 * kSecond, "aten::linear"), 98.3);
  AgentAnomaly slow = stalled(window("job a", 100 * kSecond, "slow operators"), 98.3);
  slow.process = "job a (pids 7, 8)";
  // a window that names a resource keeps it: the stop is part of what it says
  AgentAnomaly interference =
      stalled(window("job a", 100 * kSecond, "CPU interference; its CPUs stopped for 98.3 ms "
                                             "(CPU stall)"), 98.3);
  fold({addmm, linear, slow_call("job a", 100 * kSecond), interference}, 100 * kSecond);
  ASSERT_EQ(out.size(), 2u) << "the call no stall explains, and the interference, at once";
  EXPECT_EQ(out[0].anomaly.name, "aten::mm");
  EXPECT_EQ(detect::cause_kind(out[1].anomaly.cause), "CPU interference");
  out.erase(out.begin() + 1);
  fold({slow}, 101 * kSecond);
  fold({}, 104 * kSecond);
  ASSERT_EQ(out.size(), 1u) << "open: under 5 s since its last";
  fold({}, 107 * kSecond);
  ASSERT_EQ(out.size(), 2u);
  const AgentAnomaly& e = out[1];
  EXPECT_EQ(e.folded_calls, 2u);
  EXPECT_EQ(e.folded_windows, 1u);
  EXPECT_EQ(e.anomaly.layer, "window");
  EXPECT_EQ(e.job, "job a");
  EXPECT_EQ(detect::cause_kind(e.anomaly.cause), "CPU stall");
  EXPECT_EQ(e.anomaly.cause,
            "CPU stall: the CPU stopped for up to 98.3 ms under python3 (pid 7); 2 slow calls "
            "(aten::addmm 1, aten::linear 1) and 1 window (slow operators 1) over 1.0 s");
  // a later stop: its own; another job's at the same time: its own too
  fold({stalled(slow_call("job a", 120 * kSecond), 40),
        stalled(slow_call("job b", 120 * kSecond), 12)}, 120 * kSecond);
  ASSERT_EQ(out.size(), 2u);
  std::vector<AgentAnomaly> last;
  stalls.finish(last);
  ASSERT_EQ(last.size(), 2u);
  std::sort(last.begin(), last.end(), [](const auto& x, const auto& y) { return x.job < y.job; });
  EXPECT_EQ(last[1].job, "job b");
  last.pop_back();
  EXPECT_EQ(last[0].folded_calls, 1u);
  EXPECT_NE(last[0].anomaly.cause.find("up to 40.0 ms"), std::string::npos) << last[0].anomaly.cause;
  stalls.finish(last);
  EXPECT_EQ(last.size(), 1u) << "nothing open after the end";
}

// An episode goes out only where its job lost a material share of its time to stops (the
// agent's rule: 1% of its processes' CPU time in the minute before the episode's end); the
// others are dropped, and counted.
TEST(StallEpisodes, AnEpisodeThatCostItsJobLittleIsDroppedAndCounted) {
  StallEpisodes stalls;
  std::vector<std::tuple<std::string, uint32_t, uint64_t>> asked;
  stalls.set_material([&](const std::string& job, uint32_t pid, uint64_t end_ns) {
    asked.emplace_back(job, pid, end_ns);
    return job == "job b";
  });
  auto stalled = [](AgentAnomaly x, uint32_t pid) {
    x.anomaly.stalled_ns = 98e6;
    x.anomaly.pid = pid;
    return x;
  };
  std::vector<AgentAnomaly> found = {stalled(slow_call("job a", 100 * kSecond, "aten::addmm"), 7),
                                     stalled(slow_call("job a", 100 * kSecond, "aten::linear"), 7),
                                     stalled(slow_call("job b", 100 * kSecond), 9)};
  stalls.fold(found, 100 * kSecond);
  EXPECT_TRUE(found.empty());
  stalls.fold(found, 110 * kSecond);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].job, "job b");
  EXPECT_EQ(detect::cause_kind(found[0].anomaly.cause), "CPU stall");
  EXPECT_EQ(stalls.dropped(), 1u);
  EXPECT_EQ(stalls.dropped_anomalies(), 2u);
  // asked as each member joined (job a twice, job b once) and at job a's close
  ASSERT_EQ(asked.size(), 4u);
  for (const auto& q : asked)
    if (std::get<0>(q) == "job a")
      EXPECT_EQ(q, std::make_tuple(std::string("job a"), 7u, 100 * kSecond + 3'000'000));
  EXPECT_EQ(std::count_if(asked.begin(), asked.end(),
                          [](const auto& q) { return std::get<0>(q) == "job b"; }),
            1);
}

// Session 67's half hour: something took the CPUs from a healthy job for 28 s, and each of the
// 200 operators it preempted was an anomaly. The episode's first goes out at once (a CPU hog is
// reported within a second), the rest as one anomaly once 10 s passed without another; a call
// the host does not explain by a wait for a CPU, a window, a stalled call and another job's
// episode are not folded into it.
TEST(InterferenceEpisodes, ANeighboursEpisodeIsItsFirstCallAndOneAnomalyForTheRest) {
  InterferenceEpisodes episodes;
  std::vector<AgentAnomaly> out;
  auto fold = [&](std::vector<AgentAnomaly> found, uint64_t now) {
    episodes.fold(found, now);
    for (auto& x : found) out.push_back(std::move(x));
  };
  auto preempted = [](const std::string& job, uint64_t ts, const std::string& name, double ms) {
    AgentAnomaly x = slow_call(job, ts, name);
    x.anomaly.pid = 7;
    x.anomaly.runq_ns = int64_t(ms * 1e6);
    return x;
  };
  fold({preempted("job a", 100 * kSecond, "aten::mm", 2.1)}, 100 * kSecond);
  ASSERT_EQ(out.size(), 1u) << "the first at once";
  EXPECT_EQ(out[0].anomaly.name, "aten::mm");
  EXPECT_EQ(out[0].folded_calls, 0u);
  out.clear();
  AgentAnomaly own = slow_call("job a", 106 * kSecond);
  own.anomaly.cause = "slow operator: aten::mm";
  AgentAnomaly stalled = preempted("job a", 106 * kSecond, "aten::bmm", 1);
  stalled.anomaly.stalled_ns = 90e6;
  fold({preempted("job a", 101 * kSecond, "aten::mm", 8.1),
        preempted("job a", 105 * kSecond, "aten::addmm", 3), own, stalled,
        window("job a", 106 * kSecond, "CPU interference"),
        preempted("job b", 107 * kSecond, "aten::gelu", 4)},
       107 * kSecond);
  ASSERT_EQ(out.size(), 4u) << "the slow code, the stalled call, the window, job b's first";
  EXPECT_EQ(out[0].anomaly.cause, "slow operator: aten::mm");
  EXPECT_EQ(out[1].anomaly.name, "aten::bmm");
  EXPECT_EQ(out[2].anomaly.layer, "window");
  EXPECT_EQ(out[3].job, "job b");
  out.clear();
  fold({preempted("job a", 110 * kSecond, "aten::linear", 5)}, 112 * kSecond);
  fold({}, 120 * kSecond);
  EXPECT_TRUE(out.empty()) << "open: job a's last ended under 10 s ago";
  fold({}, 121 * kSecond);
  ASSERT_EQ(out.size(), 1u) << "job a's three followers (job b's episode had none)";
  const AgentAnomaly& e = out[0];
  EXPECT_EQ(e.folded_calls, 3u);
  EXPECT_EQ(e.anomaly.layer, "torch") << "counted as its members were";
  EXPECT_EQ(e.anomaly.name, "aten::addmm");
  EXPECT_EQ(e.job, "job a");
  EXPECT_EQ(e.anomaly.pid, 7u);
  EXPECT_EQ(e.anomaly.ts_ns, 101 * kSecond);
  EXPECT_EQ(e.anomaly.dur_ns, 9 * kSecond + 3'000'000);
  EXPECT_EQ(detect::cause_kind(e.anomaly.cause), "slow operator");
  EXPECT_EQ(e.anomaly.cause,
            "slow operator: after the first, 3 slow calls (aten::addmm 1, aten::linear 1, "
            "aten::mm 1) over 9.0 s in python3 (pid 7); preempted: their threads waited up to "
            "8.1 ms for a CPU (CPU interference)");
  EXPECT_EQ(episodes.open_episodes(), 0u) << "both over";
  out.clear();
  // a later one: an episode of its own, its first at once; the same job's CUDA calls are
  // another episode, and a call judged late, from long before the episode, is not part of it;
  // the followers of two ranks name both
  AgentAnomaly cuda = preempted("job a", 141 * kSecond, "cudaMalloc", 2);
  cuda.anomaly.layer = "cuda";
  cuda.anomaly.cause = "slow cuda call: cudaMalloc; preempted: waited 2.0 ms for a CPU (CPU "
                       "interference)";
  AgentAnomaly rank1 = preempted("job a", 143 * kSecond, "aten::mm", 3);
  rank1.anomaly.pid = 8;
  fold({rank1, preempted("job a", 140 * kSecond, "aten::mm", 2), cuda}, 143 * kSecond);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].anomaly.ts_ns, 140 * kSecond) << "in time order: the episode's first";
  EXPECT_EQ(out[1].anomaly.layer, "cuda") << "the CUDA episode's first";
  out.clear();
  fold({preempted("job a", 144 * kSecond, "aten::mm", 1),
        preempted("job a", 125 * kSecond, "aten::gelu", 2)},
       160 * kSecond);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].anomaly.name, "aten::gelu") << "from before the episode: alone";
  EXPECT_EQ(out[0].folded_calls, 0u);
  EXPECT_EQ(out[1].folded_calls, 2u);
  EXPECT_NE(out[1].anomaly.cause.find("in python3 (pids 7, 8);"), std::string::npos)
      << out[1].anomaly.cause;
  EXPECT_EQ(episodes.open_episodes(), 0u);
}

// The followers' taker (CallContext::explain's ", mostly behind NAME (...)") is the episode's
// where it was named for half of them or more, by its name: a build's pids and counts differ
// from call to call, and the last call's words are the folded one's.
TEST(InterferenceEpisodes, TheFoldedCallsNameTheirTaker) {
  for (int named : {2, 1}) {
    InterferenceEpisodes episodes;
    std::vector<AgentAnomaly> found;
    for (int i = 0; i < 4; ++i) {
      found.push_back(slow_call("job a", (100 + i) * kSecond));
      if (i > 0 && i <= named)
        found.back().anomaly.cause += fmt::format(
            ", mostly behind cc1plus ({} processes, pid {} the most); inside it: slow operator: "
            "aten::addmm",
            i + 1, 40 + i);
      if (i == 3) found.back().anomaly.cause += ", mostly behind sh (pid 9)";
    }
    episodes.fold(found, 103 * kSecond);
    ASSERT_EQ(found.size(), 1u);
    std::vector<AgentAnomaly> rest;
    episodes.finish(rest);
    ASSERT_EQ(rest.size(), 1u);
    const std::string& cause = rest[0].anomaly.cause;
    if (named == 2)
      EXPECT_TRUE(cause.ends_with("for a CPU (CPU interference), mostly behind cc1plus (3 "
                                  "processes, pid 42 the most)"))
          << cause;
    else
      EXPECT_TRUE(cause.ends_with("for a CPU (CPU interference)")) << "1 of 3 only: " << cause;
  }
}

// A neighbour that keeps taking the CPUs: its followers go out once a minute, and the agent's
// end reports what is open.
TEST(InterferenceEpisodes, ALastingNeighboursFollowersGoOutOnceAMinute) {
  InterferenceEpisodes episodes;
  std::vector<AgentAnomaly> out;
  for (uint64_t t = 100; t <= 250; t += 5) {
    std::vector<AgentAnomaly> found{slow_call("job a", t * kSecond)};
    episodes.fold(found, t * kSecond);
    for (auto& x : found) out.push_back(std::move(x));
  }
  // the first (100 s), then the followers counted from 105 s out at 165 s, those from 170 s
  // at 230 s
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].folded_calls, 0u);
  EXPECT_EQ(out[1].folded_calls, 13u);  // 105..165
  EXPECT_EQ(out[2].folded_calls, 13u);  // 170..230
  std::vector<AgentAnomaly> last;
  episodes.finish(last);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].folded_calls, 4u);  // 235..250
  episodes.finish(last);
  EXPECT_EQ(last.size(), 1u) << "nothing open after the end";
}

TEST(JobStarts, APythonProcessOrALauncherMayStartAJobAShellLoopNot) {
  EXPECT_TRUE(may_start_job("python3", "/usr/bin/python3 train.py"));
  EXPECT_TRUE(may_start_job("python3.11", "python3.11 -m torch.distributed.run"));
  EXPECT_TRUE(may_start_job("bash", "bash /root/.pyenv/shims/python3 train.py"));
  EXPECT_TRUE(may_start_job("torchrun", "/usr/bin/torchrun --nproc-per-node 8 train.py"));
  EXPECT_FALSE(may_start_job("sh", "/bin/sh -c while :; do :; done"));
  EXPECT_FALSE(may_start_job("demo_train", "build/demo_train 30"));
}

}  // namespace
}  // namespace eacgm
