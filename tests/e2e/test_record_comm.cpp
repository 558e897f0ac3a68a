// End to end: the comm layer traces the real libnccl.so.2 of the CUDA toolkit (no GPU: every
// call fails, the probes still fire) with exact counts, datatypes, bytes, reductions, peers and
// streams; and, through a fake libnccl that can create communicators, ties collectives to
// their rank and size and computes nccl-tests bandwidths.
#include "e2e_util.h"
#include "probe/comm_ops.h"

namespace e2e {
namespace {

class RecordComm : public RecordingTest {
 protected:
  void SetUp() override {
    RecordingTest::SetUp();
    if (IsSkipped()) return;
    E2E_REQUIRE_CUDA();
    if (!std::filesystem::exists(kWorkloads + "/nccl_calls"))
      GTEST_SKIP() << "libnccl.so.2 is not in " << EACGM_CUDA_HOME << "/lib64";
  }
};

TEST_F(RecordComm, RealNcclCallsWithExactCountsAndBytes) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--layers", "comm", "--",
                kWorkloads + "/nccl_calls"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM comm_calls GROUP BY name"),
            (std::map<std::string, int64_t>{
                {"ncclAllReduce", 3}, {"ncclReduce", 1}, {"ncclBroadcast", 2},
                {"ncclAllGather", 1}, {"ncclReduceScatter", 1}, {"ncclSend", 1}, {"ncclRecv", 1},
                {"ncclGroupStart", 1}, {"ncclGroupEnd", 1}, {"ncclCommInitRank", 1}}));
  // count x datatype size, the reduction and the root or peer, as passed
  EXPECT_EQ(db.pairs("SELECT name || '|' || count || '|' || datatype || '|' || "
                     "COALESCE(redop, '-') || '|' || COALESCE(peer, '-') || '|' || stream, "
                     "sum(bytes) FROM comm_calls WHERE count IS NOT NULL GROUP BY 1"),
            (std::map<std::string, int64_t>{
                {"ncclAllReduce|1000|float32|sum|-|119", 3 * 4000},
                {"ncclReduce|500|float64|max|1|119", 4000},
                {"ncclBroadcast|256|int8|-|0|119", 2 * 256},
                {"ncclAllGather|100|bfloat16|-|-|119", 200},
                {"ncclReduceScatter|64|int64|avg|-|119", 512},
                {"ncclSend|10|uint32|-|3|119", 40},
                {"ncclRecv|20|float16|-|2|119", 40}}));
  // no GPU: NCCL refuses the calls (ncclInvalidArgument for a NULL communicator), and a failed
  // call has no bandwidth
  EXPECT_EQ(db.scalar("SELECT count(*) FROM comm_calls WHERE name LIKE 'nccl%' AND "
                      "name NOT LIKE 'ncclGroupStart' AND ret = 0"),
            0);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM comm_calls WHERE algbw_gbps IS NOT NULL"), 0);
  // communicator creation: the size and rank asked for, even though it failed
  EXPECT_EQ(db.text("SELECT rank || '/' || nranks FROM comm_calls WHERE name = "
                    "'ncclCommInitRank'"),
            "2/4");
  EXPECT_EQ(db.scalar("SELECT count(*) FROM trace WHERE layer = 'comm'"), 13);
  // every call knows its thread's whole wait for a CPU at entry, which never shrinks
  EXPECT_EQ(db.scalar("SELECT count(*) FROM comm_calls WHERE entry_run_delay_ns IS NULL"), 0);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM comm_calls a JOIN comm_calls b ON a.tid = b.tid AND "
                      "b.ts_ns > a.ts_ns AND b.entry_run_delay_ns < a.entry_run_delay_ns"),
            0);
}

TEST_F(RecordComm, CollectivesKnowTheirCommunicatorsRankAndSize) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--layers", "comm", "--",
                kWorkloads + "/nccl_comm_tracking"},
               {"LD_LIBRARY_PATH=" + kWorkloads + "/fakenccl"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name || '|' || COALESCE(rank, '-') || '/' || COALESCE(nranks, '-'), "
                     "count(*) FROM comm_calls GROUP BY 1"),
            (std::map<std::string, int64_t>{{"ncclCommInitRank|1/4", 1},
                                            {"ncclAllReduce|1/4", 2},
                                            {"ncclAllGather|1/4", 1},
                                            {"ncclCommSplit|-/-", 1},
                                            {"ncclAllReduce|-/-", 2}}));
  // nccl-tests: allreduce busbw = algbw x 2(n-1)/n; allgather size = n x sendcount bytes and
  // busbw = algbw x (n-1)/n (bytes per ns = GB/s)
  db.each("SELECT name, bytes, dur_ns, algbw_gbps, busbw_gbps FROM comm_calls WHERE rank = 1 "
          "AND name != 'ncclCommInitRank'",
          [&](sqlite3_stmt* s) {
            std::string name = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
            double bytes = sqlite3_column_double(s, 1), dur = sqlite3_column_double(s, 2);
            double algbw = sqlite3_column_double(s, 3), busbw = sqlite3_column_double(s, 4);
            EXPECT_GT(dur, 2e6) << name;  // the fake takes 2 ms
            if (name == "ncclAllReduce") {
              EXPECT_EQ(bytes, 1 << 20);
              EXPECT_NEAR(algbw, bytes / dur, 1e-9);
              EXPECT_NEAR(busbw, algbw * 2 * 3 / 4, 1e-9);
            } else {
              EXPECT_EQ(bytes, 1 << 18);
              EXPECT_NEAR(algbw, 4 * bytes / dur, 1e-9);
              EXPECT_NEAR(busbw, algbw * 3 / 4, 1e-9);
            }
          });
  // a communicator eacgm did not see created: no rank, size or bus bandwidth
  EXPECT_EQ(db.scalar("SELECT count(*) FROM comm_calls WHERE name = 'ncclAllReduce' AND "
                      "nranks IS NULL AND busbw_gbps IS NULL"),
            2);
  // the split's new communicator is the handle its collective used
  EXPECT_EQ(db.scalar("SELECT count(*) FROM comm_calls a JOIN comm_calls s ON a.comm = s.comm "
                      "WHERE s.name = 'ncclCommSplit' AND a.name = 'ncclAllReduce'"),
            1);
  // every call on the world communicator carries its identity: the hash of the unique id's
  // first 24 bytes (byte i = 1 + 7 i), what every rank of it would record; the split's is
  // derived from it and its color (0); the communicator not seen created has none
  uint8_t id[24];
  for (size_t i = 0; i < sizeof id; ++i) id[i] = uint8_t(1 + 7 * i);
  int64_t world = int64_t(eacgm::nccl_comm_identity(id, sizeof id));
  int64_t half = int64_t(eacgm::nccl_split_identity(uint64_t(world), 0));
  EXPECT_EQ(db.pairs("SELECT name || ' ' || COALESCE(comm_id, 'none'), count(*) FROM comm_calls "
                     "GROUP BY 1"),
            (std::map<std::string, int64_t>{{"ncclCommInitRank " + std::to_string(world), 1},
                                            {"ncclAllReduce " + std::to_string(world), 2},
                                            {"ncclAllGather " + std::to_string(world), 1},
                                            {"ncclCommSplit " + std::to_string(half), 1},
                                            {"ncclAllReduce " + std::to_string(half), 1},
                                            {"ncclAllReduce none", 1}}));
  // another job's unique id: another identity
  std::string other = dir_ + "/other.eacgm.db";
  ASSERT_EQ(run({kEacgm, "record", "-q", "-o", other, "--layers", "comm", "--",
                 kWorkloads + "/nccl_comm_tracking", "2"},
                {"LD_LIBRARY_PATH=" + kWorkloads + "/fakenccl"})
                .exit_code,
            0);
  for (size_t i = 0; i < sizeof id; ++i) id[i] = uint8_t(2 + 7 * i);
  EXPECT_EQ(Db(other).scalar("SELECT comm_id FROM comm_calls WHERE name = 'ncclCommInitRank'"),
            int64_t(eacgm::nccl_comm_identity(id, sizeof id)));
  EXPECT_NE(int64_t(eacgm::nccl_comm_identity(id, sizeof id)), world);
}

}  // namespace
}  // namespace e2e
