// eacgm merge on a real job: two ranks of a Gloo training, each traced by its own `eacgm
// record` in a UTS namespace of its own (two "hosts"), one recording's wall clock made 30 ms
// wrong as NTP can leave it; the merged recording lines the collectives up again and detect
// names the straggling rank with its host.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "e2e_util.h"
#include "report/collectives.h"
#include "store/reader.h"

namespace e2e {
namespace {

const std::string kPython = "/usr/bin/python3";

class MergeHosts : public RecordingTest {
 protected:
  void SetUp() override {
    RecordingTest::SetUp();
    if (IsSkipped()) return;
    if (run({kPython, "-c", "import torch"}).exit_code != 0)
      GTEST_SKIP() << "python3-torch is not installed for " << kPython
                   << " (scripts/setup.sh installs it)";
  }
};

TEST_F(MergeHosts, TwoHostsOfOneGlooJobBecomeOneTimeline) {
  const std::string w = EACGM_WORKLOAD_SOURCES;
  const std::string truth = dir_ + "/truth.json";
  // 1200 steps; rank 1 arrives 30 ms late in 60% of the last 36 (plain detect learns from each
  // operation's first half of calls)
  auto job = run({kPython, w + "/launch_ranks.py", "2",
                  std::string(EACGM_SOURCE_DIR) + "/eval/workloads/gloo_straggler.py", "1200",
                  truth, "0.97", "1.0", "0.6", "30"},
                 {"LAUNCH_WRAP=" + std::string(kEacgm) + " record -q --layers comm,host -o " +
                      dir_ + "/node{rank}.eacgm.db --",
                  "LAUNCH_HOSTNAMES=node-a,node-b", "TORCHELASTIC_RUN_ID=merge-e2e"},
                 180);
  ASSERT_EQ(job.exit_code, 0) << job.err << job.out;
  const std::string a = dir_ + "/node0.eacgm.db", b = dir_ + "/node1.eacgm.db";
  int64_t calls_a = Db(a).scalar("SELECT count(*) FROM comm_calls");
  int64_t calls_b = Db(b).scalar("SELECT count(*) FROM comm_calls");
  ASSERT_EQ(calls_a, 1200);  // one all_reduce per step and rank
  EXPECT_EQ(calls_b, 1200);
  EXPECT_EQ(Db(a).text("SELECT value FROM meta WHERE key = 'hostname'"), "node-a");
  EXPECT_EQ(Db(b).text("SELECT value FROM meta WHERE key = 'hostname'"), "node-b");
  // node-b's wall clock 30 ms ahead: its recording places itself 30 ms late
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(b.c_str(), &db), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db,
                           "UPDATE meta SET value = CAST(value AS INTEGER) + 30000000 WHERE key = "
                           "'monotonic_to_realtime_ns'",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }

  const std::string job_db = dir_ + "/job.eacgm.db";
  auto m = run({kEacgm, "merge", a, b, "-o", job_db});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  printf("%s", m.err.c_str());
  EXPECT_NE(m.err.find("node-b (" + b + "): "), std::string::npos) << m.err;
  // the two recordings' wall-clock offsets were measured a few us apart: +30.0 ms, about
  EXPECT_TRUE(
      std::regex_search(m.err, std::regex(R"(wall clocks \+(29\.99\d|30\.00\d) ms, refined)")))
      << m.err;

  Db db(job_db);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM comm_calls"), calls_a + calls_b);
  EXPECT_EQ(db.pairs("SELECT host || ' ' || rank || ' ' || job_id, count(DISTINCT pid) FROM "
                     "processes WHERE rank IS NOT NULL AND name LIKE 'python%' GROUP BY 1"),
            (std::map<std::string, int64_t>{{"node-a 0 merge-e2e", 1}, {"node-b 1 merge-e2e", 1}}));
  // both ranks ran on this machine's one clock: what merge applies to node-b must undo the
  // 30 ms of wall-clock error to within 0.2 ms
  std::string offsets = db.text("SELECT value FROM meta WHERE key = 'clock_offsets_ns'");
  auto at = offsets.find("node-b=");
  ASSERT_NE(at, std::string::npos) << offsets;
  double applied = std::stod(offsets.substr(at + 7));
  printf("applied to node-b: %.3f ms (truth 0), residual %s ns\n", applied / 1e6,
         db.text("SELECT value FROM meta WHERE key = 'clock_residual_ns'").c_str());
  EXPECT_LT(std::fabs(applied), 200'000) << offsets;

  // every collective of the two ranks matched across the hosts, and the straggler named
  eacgm::RecordingReader rec(job_db);
  eacgm::Collectives collectives(rec);
  EXPECT_EQ(int64_t(collectives.matched_instances()),
            db.scalar("SELECT count(*) / 2 FROM comm_calls WHERE name LIKE 'gloo:%' AND name "
                      "NOT IN ('gloo:send', 'gloo:recv')"));
  // detect on the merged recording: rank 1's delays (all after the training half) are found
  // as stragglers on node-b
  auto d = run({kEacgm, "detect", job_db});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("on host node-b) joined"), std::string::npos) << d.out;
  size_t delays = nlohmann::json::parse(std::ifstream(truth))["intervals"].size();
  ASSERT_GT(delays, 8u);
  int64_t found = db.scalar(
      "SELECT count(*) FROM anomalies WHERE cause LIKE '%rank 1 (pid % on "
      "host node-b) joined % late (straggler)%'");
  printf("%zu delays injected, %lld found as rank 1 on node-b straggling\n", delays,
         (long long)found);
  EXPECT_GE(double(found), 0.8 * double(delays)) << d.out;
  EXPECT_LE(found, int64_t(delays) + 2) << d.out;
}

}  // namespace
}  // namespace e2e
