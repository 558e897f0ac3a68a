// End to end: the Perfetto and Chrome exports and the report describe the recorded calls.
#include <nlohmann/json.hpp>

#include "e2e_util.h"

namespace e2e {
namespace {

class Outputs : public ::testing::Test {
 protected:
  void SetUp() override {
    E2E_REQUIRE_ROOT();
    E2E_REQUIRE_CUDA();
    dir_ = scratch_dir();
    db_ = dir_ + "/run.eacgm.db";
    pftrace_ = dir_ + "/run.pftrace";
    auto r = run({kEacgm, "record", "-o", db_, "--perfetto", pftrace_, "--",
                  kWorkloads + "/cuda_api_calls"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    record_out_ = r.out;
  }
  // The recording's off-CPU waits of a sampling period or more, each a slice of the timeline
  // beside the 35 calls (the program blocks that long only now and then: a page-in, a busy
  // machine).
  size_t whole_offcpu_waits() {
    return size_t(Db(db_).scalar("SELECT count(*) FROM offcpu_samples WHERE weight_ns = dur_ns "
                                 "AND dur_ns >= 0"));
  }
  std::string dir_, db_, pftrace_, record_out_;
};

size_t count_of(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + 1))
    ++n;
  return n;
}

TEST_F(Outputs, PerfettoTraceHasOneSlicePerCall) {
  ASSERT_TRUE(std::filesystem::exists(pftrace_));
  auto r = run({"/bin/sh", "-c",
                std::string(EACGM_PROTOC) + " --decode_raw < '" + pftrace_ + "'"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // TrackEvent (TracePacket field 11) type (field 9): 1 = SLICE_BEGIN, 2 = SLICE_END
  EXPECT_EQ(count_of(r.out, "  9: 1\n"), 35u + whole_offcpu_waits());
  EXPECT_EQ(count_of(r.out, "  9: 2\n"), 35u + whole_offcpu_waits());
  EXPECT_NE(r.out.find("vecAdd(float*, float const*, int)"), std::string::npos);
  EXPECT_NE(r.out.find("cudaMemcpyAsync"), std::string::npos);
}

TEST_F(Outputs, ChromeJsonHasOneCompleteEventPerCall) {
  std::string json_path = dir_ + "/run.json";
  auto r = run({kEacgm, "export", db_, "--chrome", json_path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(json_path);
  nlohmann::json j = nlohmann::json::parse(in);
  size_t complete = 0, offcpu = 0, launches_with_kernel = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "off-cpu") {
      ++offcpu;
      continue;
    }
    ++complete;
    EXPECT_EQ(e["cat"], "cuda");
    if (e["name"] == "cudaLaunchKernel" && e["args"].contains("kernel")) ++launches_with_kernel;
  }
  EXPECT_EQ(complete, 35u);
  EXPECT_EQ(offcpu, whole_offcpu_waits());
  EXPECT_EQ(launches_with_kernel, 7u);
  // exporting again over the file needs --force
  auto again = run({kEacgm, "export", db_, "--chrome", json_path});
  EXPECT_EQ(again.exit_code, 2);
}

TEST_F(Outputs, ReportCountsAndPercentiles) {
  auto r = run({kEacgm, "report", "--json", db_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  std::map<std::string, uint64_t> counts;
  for (const auto& op : j["operations"]) {
    counts[op["name"]] = op["count"];
    EXPECT_LE(op["p50_ns"].get<uint64_t>(), op["p99_ns"].get<uint64_t>());
    EXPECT_LE(op["p99_ns"].get<uint64_t>(), op["max_ns"].get<uint64_t>());
  }
  EXPECT_EQ(counts["cudaMalloc"], 3u);
  EXPECT_EQ(counts["cudaLaunchKernel"], 7u);
  ASSERT_EQ(j["top_kernels"].size(), 2u);
  EXPECT_EQ(j["top_kernels"][0]["kernel"], "vecAdd(float*, float const*, int)");
  EXPECT_EQ(j["top_kernels"][0]["launches"], 6);  // 5 plain launches and one ExC
  auto text = run({kEacgm, "report", db_});
  EXPECT_NE(text.out.find("host-side"), std::string::npos);
  EXPECT_NE(record_out_.find("perfetto trace:"), std::string::npos);
}

}  // namespace
}  // namespace e2e
