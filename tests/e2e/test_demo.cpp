// The Quick start's demo (scripts/demo_run.sh, what scripts/demo.sh runs after setting up and
// building): a 2-rank GPT training traced and analysed with no flags must name both injected
// faults, the straggling rank at the all_reduce and the noisy neighbour's CPU interference, in
// the parts of the run where they were injected; the CUDA loop's neighbour likewise.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

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
  ASSERT_GT(late_steps, 30);
  const std::string db_path = dir_ + "/demo.eacgm.db";
  Db db(db_path);
  int64_t start = db.scalar("SELECT value FROM meta WHERE key = 'start_monotonic_ns'");
  int64_t end = db.scalar("SELECT value FROM meta WHERE key = 'end_monotonic_ns'");
  auto part = [&](const std::string& where) {
    return db.scalar("SELECT count(*) FROM anomalies WHERE " + where);
  };
  int64_t straggler =
      part("cause LIKE '%rank 1 (pid % joined % late (straggler)%' AND name = 'gloo:all_reduce'");
  int64_t other_ranks = part("cause LIKE '%(straggler)%' AND cause NOT LIKE '%rank 1 (pid%'");
  int64_t interference = part("layer = 'window' AND cause = 'CPU interference'");
  // the neighbour came at 80% of the training, after the straggling (62-76%): in the last
  // third of the recording, which also holds the import and start-up of torch
  int64_t interference_late =
      part("layer = 'window' AND cause = 'CPU interference' AND ts_ns >= " +
           std::to_string(start + (end - start) * 2 / 3));
  printf("late steps %lld: straggler anomalies %lld (other ranks %lld); CPU interference windows "
         "%lld (%lld in the last third)\n",
         (long long)late_steps, (long long)straggler, (long long)other_ranks,
         (long long)interference, (long long)interference_late);
  EXPECT_GE(double(straggler), 0.8 * double(late_steps)) << demo.out;
  EXPECT_LE(straggler, late_steps + 2) << demo.out;
  EXPECT_LE(other_ranks, 2) << demo.out;
  EXPECT_GE(interference_late, 3) << demo.out;
  EXPECT_GE(double(interference_late), 0.8 * double(interference)) << demo.out;
  EXPECT_NE(demo.out.find("joined"), std::string::npos);
  EXPECT_GT(std::filesystem::file_size(dir_ + "/demo.pftrace"), 100'000u);
  EXPECT_NE(demo.out.find("demo: done. Where to look:"), std::string::npos);
  if (EACGM_HAVE_CUDA && std::filesystem::exists(EACGM_DEMO_TRAIN)) {
    Db cuda(dir_ + "/demo-cuda.eacgm.db");
    EXPECT_GE(cuda.scalar("SELECT count(*) FROM anomalies WHERE layer = 'window' AND cause = "
                          "'CPU interference'"),
              1)
        << demo.out;
  }
}

}  // namespace
}  // namespace e2e
