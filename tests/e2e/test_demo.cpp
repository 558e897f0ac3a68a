// The Quick start's demo (scripts/demo_run.sh, what scripts/demo.sh runs after setting up and
// building): a 2-rank GPT training traced and analysed with no flags must name both injected
// faults where they were injected: the straggling rank at (nearly) each of its late steps, and
// the noisy neighbour's CPU interference while it ran; the CUDA loop's neighbour likewise.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "chromium.h"
#include "e2e_util.h"

namespace e2e {
namespace {

TEST_F(RecordingTest, DemoNamesTheStragglerAndTheNoisyNeighbour) {
  if (run({"/usr/bin/python3", "-c", "import torch"}).exit_code != 0)
    GTEST_SKIP() << "python3-torch is not installed (scripts/setup.sh installs it)";
  auto demo = run({std::string(EACGM_SOURCE_DIR) + "/scripts/demo_run.sh", dir_},
                  {std::string("EACGM=") + kEacgm, std::string("DEMO_TRAIN=") + EACGM_DEMO_TRAIN},
                  110);
  ASSERT_EQ(demo.exit_code, 0) << demo.err << demo.out;
  printf("%s", demo.out.substr(0, demo.out.find("\nrecording ")).c_str());
  // rank 1 said how many of its steps it made late; detect names it at (nearly) each of them
  std::smatch late;
  ASSERT_TRUE(std::regex_search(demo.out, late, std::regex(R"(rank 1: \d+ steps .*, (\d+) steps late)")))
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
  // The neighbour: from when rank 0 signalled it, for 3 s. detect names it in the windows it
  // took the CPUs (the window model: at least half of them, and at most two such windows
  // elsewhere) and in the operators it preempted (their cause ends "(CPU interference)").
  std::smatch at;
  ASSERT_TRUE(std::regex_search(demo.out, at, std::regex(R"(noisy neighbour signalled at (\d+))")))
      << demo.out;
  int64_t from = std::stoll(at[1]), to = from + 3'500'000'000;
  std::string during = "ts_ns + dur_ns >= " + std::to_string(from) + " AND ts_ns <= " +
                       std::to_string(to);
  int64_t named = part("cause LIKE '%CPU interference%' AND " + during);
  int64_t named_elsewhere = part("cause LIKE '%CPU interference%' AND NOT (" + during + ")");
  int64_t windows = part("layer = 'window' AND cause = 'CPU interference' AND " + during);
  int64_t windows_elsewhere =
      part("layer = 'window' AND cause = 'CPU interference' AND NOT (" + during + ")");
  std::smatch window_s;
  ASSERT_TRUE(std::regex_search(demo.out, window_s, std::regex(R"(windows of ([0-9.]+) s)")))
      << demo.out;
  double neighbour_windows = 3.0 / std::stod(window_s[1]);
  printf("late steps %lld: straggler anomalies %lld (other ranks %lld); CPU interference named "
         "%lld times during the neighbour (%lld windows), %lld elsewhere\n",
         (long long)late_steps, (long long)straggler, (long long)other_ranks, (long long)named,
         (long long)windows, (long long)named_elsewhere);
  EXPECT_GE(double(straggler), 0.8 * double(late_steps)) << demo.out;
  EXPECT_LE(straggler, late_steps + 2) << demo.out;
  EXPECT_LE(other_ranks, 2) << demo.out;
  EXPECT_GE(named, 1) << demo.out;
  EXPECT_GE(double(windows), 0.5 * neighbour_windows) << demo.out;
  EXPECT_LE(windows_elsewhere, 2) << demo.out;
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
