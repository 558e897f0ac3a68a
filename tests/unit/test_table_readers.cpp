// store/table_readers.h: every row the writer takes reads back as it was written, with each
// "unknown" (-1, 0, empty, absent) as it was, and a recording without a column added since
// (an older eacgm's) reads that column as unknown.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "store/reader.h"
#include "store/recording.h"
#include "store/table_readers.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

class TableReaders : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("eacgm_readers_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "run.eacgm.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  void sql(const char* text) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, text, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }
  fs::path dir_;
  std::string path_;
};

TEST_F(TableReaders, CallsReadBackAsWrittenWithTheirUnknowns) {
  CudaCallRow launch, malloc_call;
  launch.ts_ns = 2000, launch.dur_ns = 30, launch.pid = 7, launch.tid = 8;
  launch.name = "cudaLaunchKernel", launch.ret = 0, launch.is_launch = true;
  launch.grid[0] = 4, launch.grid[1] = 2, launch.grid[2] = 1;
  launch.block[0] = 256, launch.block[1] = 1, launch.block[2] = 1;
  launch.shared_mem = 1024, launch.kernel = "axpy(float*)", launch.has_stream = true;
  launch.stream = 0, launch.address = 0xabc, launch.py_stack = 3, launch.runq_ns = 0;
  malloc_call.ts_ns = 1000, malloc_call.dur_ns = 50, malloc_call.pid = 7, malloc_call.tid = 9;
  malloc_call.name = "cudaMalloc", malloc_call.ret = 2, malloc_call.bytes = 4096;
  CommCallRow all_reduce;
  all_reduce.ts_ns = 3000, all_reduce.dur_ns = 900, all_reduce.pid = 7, all_reduce.tid = 8;
  all_reduce.name = "gloo:all_reduce", all_reduce.count = 10, all_reduce.datatype = "float";
  all_reduce.bytes = 40, all_reduce.redop = "sum", all_reduce.comm = 0x55, all_reduce.rank = 1;
  all_reduce.nranks = 2, all_reduce.algbw_gbps = 1.5, all_reduce.entry_run_delay_ns = 77;
  all_reduce.comm_id = 99, all_reduce.seq = 12, all_reduce.runq_ns = 5;
  CommCallRow bare;  // every optional field unknown
  bare.ts_ns = 4000, bare.dur_ns = 1, bare.pid = 7, bare.tid = 8, bare.name = "ncclGroupEnd";
  TorchCallRow outer, inner;
  outer.ts_ns = inner.ts_ns = 5000, outer.dur_ns = 100, inner.dur_ns = 40;
  outer.name = "aten::linear", inner.name = "aten::addmm", inner.py_stack = 3;
  {
    RecordingWriter w(path_, false);
    w.add(launch), w.add(malloc_call), w.add(all_reduce), w.add(bare), w.add(inner), w.add(outer);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path_);
  std::vector<std::string> cuda;
  each_cuda_call(rec, [&](const CudaCallRow& r) {
    cuda.emplace_back(r.name);
    if (r.name == "cudaMalloc") {
      EXPECT_EQ(r.ts_ns, 1000u);
      EXPECT_EQ(r.tid, 9u);
      EXPECT_EQ(r.ret, 2);
      EXPECT_EQ(r.bytes, 4096);
      EXPECT_FALSE(r.is_launch);
      EXPECT_FALSE(r.has_stream);
      EXPECT_TRUE(r.kernel.empty());
      EXPECT_EQ(r.py_stack, 0);
      EXPECT_EQ(r.runq_ns, -1);
    } else {
      EXPECT_TRUE(r.is_launch);
      EXPECT_EQ(r.grid[0], 4u);
      EXPECT_EQ(r.grid[1], 2u);
      EXPECT_EQ(r.block[0], 256u);
      EXPECT_EQ(r.shared_mem, 1024u);
      EXPECT_EQ(r.kernel, "axpy(float*)");
      EXPECT_TRUE(r.has_stream);
      EXPECT_EQ(r.stream, 0u);  // the default stream, known
      EXPECT_EQ(r.address, 0xabcu);
      EXPECT_EQ(r.bytes, -1);
      EXPECT_EQ(r.py_stack, 3);
      EXPECT_EQ(r.runq_ns, 0);  // known: no wait
    }
  });
  EXPECT_EQ(cuda, (std::vector<std::string>{"cudaMalloc", "cudaLaunchKernel"}));  // time order
  std::vector<CommCallRow> comm;
  std::vector<std::string> names;
  each_comm_call(rec, [&](const CommCallRow& r) {
    comm.push_back(r);
    names.emplace_back(r.name);  // (the row's text lives during the callback only)
  });
  ASSERT_EQ(comm.size(), 2u);
  EXPECT_EQ(comm[0].count, 10);
  EXPECT_EQ(comm[0].bytes, 40);
  EXPECT_EQ(comm[0].comm, 0x55u);
  EXPECT_EQ(comm[0].rank, 1);
  EXPECT_EQ(comm[0].nranks, 2);
  EXPECT_EQ(comm[0].peer, -1);
  EXPECT_DOUBLE_EQ(comm[0].algbw_gbps, 1.5);
  EXPECT_EQ(comm[0].busbw_gbps, -1);
  EXPECT_EQ(comm[0].entry_run_delay_ns, 77);
  EXPECT_EQ(comm[0].comm_id, 99u);
  EXPECT_EQ(comm[0].seq, 12);
  EXPECT_EQ(comm[0].runq_ns, 5);
  EXPECT_EQ(names[1], "ncclGroupEnd");
  EXPECT_EQ(comm[1].count, -1);
  EXPECT_EQ(comm[1].rank, -1);
  EXPECT_EQ(comm[1].seq, -1);
  EXPECT_EQ(comm[1].entry_run_delay_ns, -1);
  EXPECT_FALSE(comm[1].has_stream);
  std::vector<std::string> torch;
  each_torch_call(rec, [&](const TorchCallRow& r) { torch.emplace_back(r.name); });
  EXPECT_EQ(torch, (std::vector<std::string>{"aten::linear", "aten::addmm"}));  // caller first
  // the trace view and one layer's table: every call, with its layer
  size_t traced = 0, errors = 0;
  each_traced_call(rec, [&](const TracedCall& c) { ++traced, errors += c.ret != 0; });
  EXPECT_EQ(traced, 6u);
  EXPECT_EQ(errors, 1u);
  size_t in_comm = 0;
  each_call_in_layer(rec, "comm", [&](const TracedCall& c) { in_comm += c.layer == "comm"; });
  EXPECT_EQ(in_comm, 2u);
  each_call_in_layer(rec, "comm_calls; DROP TABLE cuda_calls", [&](const TracedCall&) {
    ADD_FAILURE() << "a layer that is none read";
  });
  auto [first, last] = recorded_extent(rec);
  EXPECT_EQ(first, 1000);
  EXPECT_EQ(last, 5100);
}

TEST_F(TableReaders, ARecordingWithoutALaterColumnReadsItAsUnknown) {
  CommCallRow c;
  c.ts_ns = 10, c.dur_ns = 5, c.pid = 1, c.tid = 1, c.name = "gloo:all_reduce";
  c.rank = 0, c.nranks = 2, c.seq = 4, c.comm_id = 8, c.entry_run_delay_ns = 3;
  {
    RecordingWriter w(path_, false);
    w.add(c);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  // as a recording of an eacgm before these columns
  sql("DROP VIEW trace; ALTER TABLE comm_calls DROP COLUMN comm_seq; "
      "ALTER TABLE comm_calls DROP COLUMN comm_id; "
      "ALTER TABLE comm_calls DROP COLUMN entry_run_delay_ns;");
  RecordingReader rec(path_);
  size_t n = 0;
  each_comm_call(rec, [&](const CommCallRow& r) {
    ++n;
    EXPECT_EQ(r.rank, 0);
    EXPECT_EQ(r.nranks, 2);
    EXPECT_EQ(r.seq, -1);
    EXPECT_EQ(r.comm_id, 0u);
    EXPECT_EQ(r.entry_run_delay_ns, -1);
  });
  EXPECT_EQ(n, 1u);
}

TEST_F(TableReaders, SamplesAndAnomaliesReadBackAsWritten) {
  HostSampleRow proc, disk;
  proc.ts_ns = 200, proc.interval_ns = 100, proc.scope = HostScope::Process, proc.id = 42;
  proc.name = "python3", proc.oncpu_ns = 90, proc.runq_wait_ns = 7, proc.runq_waits = 2;
  proc.reclaim_ns = 11, proc.pagein_bytes = 12, proc.tx_bytes = 13;
  disk.ts_ns = 100, disk.interval_ns = 100, disk.scope = HostScope::Disk, disk.id = 8;
  disk.name = "vda", disk.read_bytes = 4096, disk.io_ops = 1;
  GpuSample g;
  g.ts_ns = 300, g.gpu = 0, g.sm_util_pct = 55, g.power_w = 120.5, g.throttle_reasons = 4;
  GpuProcessSample p;
  p.ts_ns = 300, p.gpu = 0, p.pid = 42, p.used_memory_bytes = 1 << 20;
  {
    RecordingWriter w(path_, false);
    w.add(proc), w.add(disk), w.add(g), w.add(p);
    w.add(GpuDevice{0, "NVIDIA H200", "GPU-1", ""});
    w.add(GpuXidEvent{400, 0, 79});
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path_);
  std::vector<HostSampleRow> host;
  each_host_sample(rec, [&](const HostSampleRow& r) { host.push_back(r); });
  ASSERT_EQ(host.size(), 2u);
  EXPECT_EQ(host[0].scope, HostScope::Disk);  // time order
  EXPECT_EQ(host[0].read_bytes, 4096u);
  EXPECT_EQ(host[1].scope, HostScope::Process);
  EXPECT_EQ(host[1].name, "python3");
  EXPECT_EQ(host[1].oncpu_ns, 90u);
  EXPECT_EQ(host[1].runq_waits, 2u);
  EXPECT_EQ(host[1].reclaim_ns, 11u);
  EXPECT_EQ(host[1].pagein_bytes, 12u);
  EXPECT_EQ(host[1].tx_bytes, 13u);
  host.clear();
  each_host_sample(rec, [&](const HostSampleRow& r) { host.push_back(r); }, SampleOrder::by_subject);
  EXPECT_EQ(host[0].scope, HostScope::Disk);  // "disk" before "process"
  EXPECT_TRUE(host_samples_have(rec, "reclaim_ns"));
  EXPECT_FALSE(host_samples_have(rec, "no_such_column"));
  size_t gpus = 0;
  each_gpu_sample(rec, [&](const GpuSample& s) {
    ++gpus;
    EXPECT_EQ(s.sm_util_pct, 55u);
    EXPECT_DOUBLE_EQ(s.power_w.value_or(0), 120.5);
    EXPECT_EQ(s.throttle_reasons, 4u);
    EXPECT_FALSE(s.mem_util_pct);  // not measured: absent
  });
  EXPECT_EQ(gpus, 1u);
  each_gpu_process_sample(rec, [&](const GpuProcessSample& s) {
    EXPECT_EQ(s.pid, 42u);
    EXPECT_EQ(s.used_memory_bytes, uint64_t(1) << 20);
    EXPECT_FALSE(s.sm_util_pct);
  });
  std::vector<std::string> devices;
  each_gpu_device(rec, [&](const GpuDevice& d) { devices.push_back(d.name); });
  EXPECT_EQ(devices, std::vector<std::string>{"NVIDIA H200"});
  std::vector<uint64_t> xids;
  each_gpu_xid(rec, [&](const GpuXidEvent& x) { xids.push_back(x.xid); });
  EXPECT_EQ(xids, std::vector<uint64_t>{79});
  // no anomalies table yet: none, and counts of none
  EXPECT_EQ(anomaly_count(rec), 0u);
  EXPECT_TRUE(strongest_anomalies(rec, 5).empty());
}

}  // namespace
}  // namespace eacgm
