// End to end: eacgm record traces the real libcudart.so.13 and the stub libcuda.so, and the
// recording holds exactly the calls the workloads made.
#include <nlohmann/json.hpp>

#include "e2e_util.h"

namespace e2e {
namespace {

const std::map<std::string, int64_t> kRuntimeCallsPerRun = {
    {"cudaMalloc", 3},         {"cudaMallocHost", 2},        {"cudaMallocManaged", 1},
    {"cudaMallocAsync", 1},    {"cudaFree", 4},              {"cudaFreeHost", 2},
    {"cudaFreeAsync", 1},      {"cudaMemcpy", 3},            {"cudaMemcpyAsync", 1},
    {"cudaMemset", 3},         {"cudaMemsetAsync", 1},       {"cudaLaunchKernel", 7},
    {"cudaLaunchKernelExC", 1}, {"cudaGraphLaunch", 1},      {"cudaStreamSynchronize", 2},
    {"cudaDeviceSynchronize", 1}, {"cudaEventSynchronize", 1}};

std::map<std::string, int64_t> times(std::map<std::string, int64_t> m, int64_t k) {
  for (auto& [name, v] : m) v *= k;
  return m;
}

class RecordCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    E2E_REQUIRE_ROOT();
    E2E_REQUIRE_CUDA();
    dir_ = scratch_dir();
    db_ = dir_ + "/run.eacgm.db";
  }
  std::string dir_, db_;
};

TEST_F(RecordCuda, RuntimeApiCountsBytesKindsAndKernels) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--", kWorkloads + "/cuda_api_calls",
                "--repeat", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
            times(kRuntimeCallsPerRun, 2));
  // every call fails with cudaErrorInsufficientDriver (35): there is no GPU here
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls WHERE ret != 35"), 0);
  EXPECT_EQ(db.pairs("SELECT name, sum(bytes) FROM cuda_calls WHERE bytes IS NOT NULL "
                     "GROUP BY name"),
            (std::map<std::string, int64_t>{{"cudaMalloc", 2 * 3 << 20},
                                            {"cudaMallocHost", 2 * 2 * 4096},
                                            {"cudaMallocManaged", 2 * 8192},
                                            {"cudaMallocAsync", 2 * 2048},
                                            {"cudaMemcpy", 2 * 5000},
                                            {"cudaMemcpyAsync", 2 * 5000},
                                            {"cudaMemset", 2 * 2100},
                                            {"cudaMemsetAsync", 2 * 900}}));
  EXPECT_EQ(db.pairs("SELECT memcpy_kind || ':' || bytes, count(*) FROM cuda_calls "
                     "WHERE memcpy_kind IS NOT NULL GROUP BY 1"),
            (std::map<std::string, int64_t>{{"HostToDevice:1000", 4},
                                            {"DeviceToHost:3000", 2},
                                            {"DeviceToDevice:5000", 2}}));
  // the stream handle passed to every stream-ordered call
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls WHERE stream = 4660 GROUP BY name"),
            (std::map<std::string, int64_t>{{"cudaMallocAsync", 2}, {"cudaFreeAsync", 2},
                                            {"cudaMemcpyAsync", 2}, {"cudaMemsetAsync", 2},
                                            {"cudaLaunchKernelExC", 2}, {"cudaGraphLaunch", 2},
                                            {"cudaStreamSynchronize", 4}}));
  EXPECT_EQ(db.pairs("SELECT name || '|' || kernel || '|' || grid_x || ',' || grid_y || ',' || "
                     "grid_z || '|' || block_x || ',' || block_y || ',' || block_z || '|' || "
                     "shared_mem || '|' || stream, count(*) FROM cuda_calls "
                     "WHERE kernel IS NOT NULL GROUP BY 1"),
            (std::map<std::string, int64_t>{
                {"cudaLaunchKernel|vecAdd(float*, float const*, int)|4,2,1|128,1,1|0|0", 10},
                {"cudaLaunchKernel|void demo::scale<float>(float*, float, int)|3,1,1|64,1,1|256|0",
                 4},
                {"cudaLaunchKernelExC|vecAdd(float*, float const*, int)|7,1,1|32,2,1|128|4660",
                 2}}));
  // the trace view and the metadata agree with the table
  EXPECT_EQ(db.scalar("SELECT count(*) FROM trace WHERE layer = 'cuda'"), 70);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'events'"), "70");
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'dropped_events'"), "0");
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls WHERE dur_ns <= 0 OR ts_ns <= 0"), 0);
  EXPECT_EQ(db.scalar("SELECT count(DISTINCT pid) FROM cuda_calls"), 1);
  EXPECT_EQ(db.text("SELECT name FROM processes ORDER BY rowid DESC LIMIT 1"), "cuda_api_calls");
  // eacgm's own CPU, and the part of it before the recording began (loading its programs)
  auto meta = [&](const std::string& key) {
    return std::stod(db.text("SELECT value FROM meta WHERE key = '" + key + "'"));
  };
  double start = meta("recorder_start_cpu_seconds"), total = meta("recorder_cpu_seconds");
  EXPECT_GT(start, 0);
  EXPECT_LE(start, total);
}

TEST_F(RecordCuda, DriverApiThroughStubLibcuda) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--", kWorkloads + "/cuda_driver_calls"},
               {"LD_LIBRARY_PATH=" + kWorkloads + "/stub"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
            (std::map<std::string, int64_t>{
                {"cuMemAlloc_v2", 2}, {"cuMemFree_v2", 1}, {"cuMemcpyHtoD_v2", 3},
                {"cuMemcpyDtoH_v2", 1}, {"cuMemcpyDtoD_v2", 1}, {"cuMemcpyHtoDAsync_v2", 1},
                {"cuMemcpyDtoHAsync_v2", 1}, {"cuMemcpyDtoDAsync_v2", 1}, {"cuLaunchKernel", 4},
                {"cuLaunchKernelEx", 1}, {"cuStreamSynchronize", 1}, {"cuCtxSynchronize", 1}}));
  EXPECT_EQ(db.pairs("SELECT name || '|' || memcpy_kind || '|' || COALESCE(stream, '-'), "
                     "sum(bytes) FROM cuda_calls WHERE memcpy_kind IS NOT NULL GROUP BY 1"),
            (std::map<std::string, int64_t>{{"cuMemcpyHtoD_v2|HostToDevice|-", 333},
                                            {"cuMemcpyDtoH_v2|DeviceToHost|-", 222},
                                            {"cuMemcpyDtoD_v2|DeviceToDevice|-", 333},
                                            {"cuMemcpyHtoDAsync_v2|HostToDevice|22136", 444},
                                            {"cuMemcpyDtoHAsync_v2|DeviceToHost|22136", 555},
                                            {"cuMemcpyDtoDAsync_v2|DeviceToDevice|22136", 666}}));
  EXPECT_EQ(db.scalar("SELECT sum(bytes) FROM cuda_calls WHERE name = 'cuMemAlloc_v2'"), 24690);
  EXPECT_EQ(db.pairs("SELECT name || '|' || grid_x || ',' || grid_y || ',' || grid_z || '|' || "
                     "block_x || ',' || block_y || ',' || block_z || '|' || shared_mem || '|' || "
                     "stream || '|' || address, count(*) FROM cuda_calls WHERE grid_x IS NOT NULL "
                     "GROUP BY 1"),
            (std::map<std::string, int64_t>{{"cuLaunchKernel|10,20,30|1,2,3|512|22136|39612", 4},
                                            {"cuLaunchKernelEx|5,6,7|8,9,10|1024|22136|39612", 1}}));
}

TEST_F(RecordCuda, DriverLaunchesAreNamedByTheirLookups) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--", kWorkloads + "/cuda_driver_names"},
               {"LD_LIBRARY_PATH=" + kWorkloads + "/fakecuda"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name || '|' || COALESCE(kernel, '-'), count(*) FROM cuda_calls "
                     "GROUP BY 1"),
            (std::map<std::string, int64_t>{
                {"cuModuleGetFunction|triton_poi_fused_add_0", 1},
                {"cuModuleGetFunction|-", 1},  // the failed lookup of "missing"
                {"cuLibraryGetKernel|void reduce<float>(float*, int)", 1},
                {"cuKernelGetFunction|void reduce<float>(float*, int)", 1},
                {"cuLaunchKernel|triton_poi_fused_add_0", 3},
                {"cuLaunchKernel|void reduce<float>(float*, int)", 2},
                {"cuLaunchKernelEx|void reduce<float>(float*, int)", 1},
                {"cuLaunchKernel|unknown CUfunction 0xdead0", 1},
                {"cuLaunchKernel|unknown CUfunction 0xbeef00", 1}}));
  // the lookup rows carry the handle the launches use
  EXPECT_EQ(db.scalar("SELECT count(DISTINCT address) FROM cuda_calls "
                      "WHERE kernel = 'triton_poi_fused_add_0'"),
            1);
}

TEST_F(RecordCuda, NestedCallsAndCallsLeftByLongjmp) {
  // 3 rounds of nested calls, then 20 calls that never return (longjmp out of them: more than the 8
  // levels of nesting the BPF side keeps), then 5 more rounds that must all be recorded
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--", kWorkloads + "/cuda_nesting", "3", "20",
                "5"},
               {"LD_LIBRARY_PATH=" + kWorkloads + "/fakecuda"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
            (std::map<std::string, int64_t>{
                {"cuCtxSynchronize", 8}, {"cuMemFree_v2", 8}, {"cuStreamSynchronize", 16}}));
  // each inner call lies inside its outer call, for tail calls (cuCtxSynchronize) and plain
  // nested calls (cuMemFree_v2) alike
  EXPECT_EQ(db.pairs("SELECT o.name, count(*) FROM cuda_calls o JOIN cuda_calls i ON "
                     "i.tid = o.tid AND i.name = 'cuStreamSynchronize' AND o.name != i.name "
                     "AND i.ts_ns >= o.ts_ns AND i.ts_ns + i.dur_ns <= o.ts_ns + o.dur_ns "
                     "GROUP BY o.name"),
            (std::map<std::string, int64_t>{{"cuCtxSynchronize", 8}, {"cuMemFree_v2", 8}}));
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'nesting_overflows'"), "0");
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'dropped_events'"), "0");
}

TEST_F(RecordCuda, PerEventUprobesWhereTheKernelHasNoMultiLinks) {
  // EACGM_NO_UPROBE_MULTI=1: a perf-event uprobe per point, what a kernel before 6.6 gets (where
  // the kernel has multi links those programs are not even loaded); the same calls recorded,
  // with entry, return and exit-instruction probes, nested calls and calls left by longjmp
  auto r = run({kEacgm, "record", "-q", "--layers", "cuda", "-o", db_, "--",
                kWorkloads + "/cuda_api_calls", "--repeat", "2"},
               {"EACGM_NO_UPROBE_MULTI=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
            times(kRuntimeCallsPerRun, 2));
  EXPECT_EQ(db.scalar("SELECT sum(bytes) FROM cuda_calls WHERE name = 'cudaMalloc'"), 2 * 3 << 20);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls WHERE dur_ns <= 0 OR ret != 35"), 0);

  std::string db2 = dir_ + "/nesting.eacgm.db";
  r = run({kEacgm, "record", "-q", "--layers", "cuda", "-o", db2, "--",
           kWorkloads + "/cuda_nesting", "3", "20", "5"},
          {"EACGM_NO_UPROBE_MULTI=1", "LD_LIBRARY_PATH=" + kWorkloads + "/fakecuda"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db nesting(db2);
  EXPECT_EQ(nesting.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
            (std::map<std::string, int64_t>{
                {"cuCtxSynchronize", 8}, {"cuMemFree_v2", 8}, {"cuStreamSynchronize", 16}}));
  EXPECT_EQ(nesting.text("SELECT value FROM meta WHERE key = 'dropped_events'"), "0");

  // and the perf-event entry program's Python stack walk (the one that costs the verifier most)
  std::string db3 = dir_ + "/python.eacgm.db";
  r = run({kEacgm, "record", "-q", "--layers", "cuda,python", "-o", db3, "--", "/usr/bin/python3",
           std::string(EACGM_PY_WORKLOADS) + "/cuda_stack.py",
           std::string(EACGM_CUDA_HOME) + "/lib64/libcudart.so.13"},
          {"EACGM_NO_UPROBE_MULTI=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  Db python(db3);
  EXPECT_EQ(python.pairs("SELECT s.depth || ' ' || s.name, s.line FROM cuda_calls c JOIN "
                         "python_stacks s ON s.id = c.py_stack WHERE c.name = 'cudaMalloc'"),
            (std::map<std::string, int64_t>{{"0 cuda_stack.allocate", 11},
                                            {"1 cuda_stack.layer", 15},
                                            {"2 cuda_stack.Trainer.step", 20},
                                            {"3 cuda_stack.<module>", 23}}));
}

TEST_F(RecordCuda, ExitStatusOfTheCommandIsKept) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--", kWorkloads + "/cuda_api_calls",
                "--exit-code", "7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  Db db(db_);
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'exit_status'"), "7");
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls"), 35);
  EXPECT_EQ(db.scalar("SELECT exit_code FROM processes ORDER BY rowid DESC LIMIT 1"), 7);
}

TEST_F(RecordCuda, LibraryLoadedWithDlopenAfterStart) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--", kWorkloads + "/cuda_dlopen", "50",
                "20"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
            (std::map<std::string, int64_t>{{"cudaMalloc", 50}, {"cudaFree", 20}}));
  EXPECT_EQ(db.scalar("SELECT sum(bytes) FROM cuda_calls WHERE name = 'cudaMalloc'"), 50 * 4096);
}

TEST_F(RecordCuda, WithoutTheLoaderHookALibraryLoadedLaterIsFoundByTheRescan) {
  // where the dynamic loader's hook cannot be attached, new libraries are looked for every 2 s
  auto r = run({kEacgm, "record", "-o", db_, "--", kWorkloads + "/cuda_dlopen", "50", "20", "3"},
               {"EACGM_NO_LOADER_HOOK=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("the dynamic loader's hook could not be attached (EACGM_NO_LOADER_HOOK "
                       "is set): libraries a process loads later are found within 2 s"),
            std::string::npos)
      << r.err;
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
            (std::map<std::string, int64_t>{{"cudaMalloc", 50}, {"cudaFree", 20}}));
}

TEST_F(RecordCuda, ForkedAndExecedDescendantsAreTraced) {
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--", kWorkloads + "/fork_exec_parent",
                kWorkloads + "/cuda_api_calls"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  // two children and one grandchild ran the workload: each pid made the full set of calls
  EXPECT_EQ(db.scalar("SELECT count(DISTINCT pid) FROM cuda_calls"), 3);
  db.each("SELECT pid FROM cuda_calls GROUP BY pid", [&](sqlite3_stmt* s) {
    int64_t pid = sqlite3_column_int64(s, 0);
    EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls WHERE pid = " +
                       std::to_string(pid) + " GROUP BY name"),
              kRuntimeCallsPerRun)
        << "pid " << pid;
  });
  // the process tree: launcher, 3 workers after exec, the intermediate process
  EXPECT_EQ(db.scalar("SELECT count(*) FROM processes WHERE name = 'cuda_api_calls'"), 3);
  EXPECT_EQ(db.scalar("SELECT count(DISTINCT pid) FROM processes"), 5);
  // the workers live a few milliseconds: their kernels are named from what the kernel side
  // read at exec, even when they are gone before their /proc maps could be read
  EXPECT_EQ(db.pairs("SELECT kernel, count(*) FROM cuda_calls WHERE grid_x IS NOT NULL "
                     "GROUP BY kernel"),
            (std::map<std::string, int64_t>{{"vecAdd(float*, float const*, int)", 3 * 6},
                                            {"void demo::scale<float>(float*, float, int)", 3 * 2}}));
}

TEST_F(RecordCuda, ShortLivedWorkersExecdByRelativePathGetKernelNames) {
  // the launcher moves into the workloads folder, execs ./cuda_api_calls from there, and
  // outlives its workers (as launchers do): a relative exec path is resolved through the cwd of
  // the worker or of a running ancestor
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--", kWorkloads + "/fork_exec_parent",
                "./cuda_api_calls", kWorkloads, "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Db db(db_);
  EXPECT_EQ(db.scalar("SELECT count(DISTINCT pid) FROM cuda_calls"), 3);
  EXPECT_EQ(db.pairs("SELECT kernel, count(*) FROM cuda_calls WHERE grid_x IS NOT NULL "
                     "GROUP BY kernel"),
            (std::map<std::string, int64_t>{{"vecAdd(float*, float const*, int)", 3 * 6},
                                            {"void demo::scale<float>(float*, float, int)", 3 * 2}}));
}

TEST_F(RecordCuda, AttachToRunningProcessWithPid) {
  std::string go = dir_ + "/go";
  Process target({kWorkloads + "/cuda_api_calls", "--wait-for", go});
  Process rec({kEacgm, "record", "-o", db_, "-p", std::to_string(target.pid())});
  ASSERT_TRUE(rec.wait_for_stderr("eacgm: recording", 30)) << rec.err();
  { std::ofstream(go).put('1'); }
  ASSERT_EQ(target.wait(30), 0);
  ASSERT_EQ(rec.wait(30), 0) << rec.err();  // stops by itself once the target is gone
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"), kRuntimeCallsPerRun);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls WHERE pid != " +
                      std::to_string(target.pid())),
            0);
}

TEST_F(RecordCuda, CtrlCLeavesACompleteRecording) {
  Process rec({kEacgm, "record", "-o", db_, "--", kWorkloads + "/cuda_api_calls",
               "--loop-seconds", "60"},
              {}, /*own_group=*/true);
  ASSERT_TRUE(rec.wait_for_stderr("eacgm: recording", 30)) << rec.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kill(-rec.pid(), SIGINT);  // what a terminal's Ctrl-C does: the whole foreground group
  int code = rec.wait(30);
  EXPECT_EQ(code, 130) << rec.err();  // the command died of SIGINT, as a shell reports it
  Db db(db_);
  EXPECT_EQ(db.text("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'stopped_by_signal'"), "2");
  int64_t calls = db.scalar("SELECT count(*) FROM cuda_calls WHERE name = 'cudaMalloc'");
  EXPECT_GT(calls, 100);  // ~1.5 s of a loop with a 100 us sleep
  EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'events'"), std::to_string(calls));
  EXPECT_FALSE(std::filesystem::exists(db_ + "-wal"));  // folded back into one file
}

// The evaluation's CUDA latency injector (workloads/cuda_delay.c, LD_PRELOAD): the delays it
// reports as ground truth lie inside the real libcudart calls eacgm recorded, one slow call per
// delay, and the workload's calls are all still there.
TEST_F(RecordCuda, PreloadedDelaysLandInsideTheRecordedRuntimeCalls) {
  std::string truth = dir_ + "/truth.json";
  auto r = run({kEacgm, "record", "-q", "-o", db_, "--layers", "cuda", "--", "env",
                "LD_PRELOAD=" + kWorkloads + "/libcuda_delay.so",
                "EACGM_DELAY_CALLS=cudaMemcpy,cudaLaunchKernel", "EACGM_DELAY_MS=5",
                "EACGM_DELAY_FRACTION=0.25", "EACGM_DELAY_TRUTH=" + truth,
                kWorkloads + "/cuda_api_calls", "--repeat", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(truth);
  ASSERT_TRUE(in) << "the shim wrote no ground truth: " << r.err;
  auto t = nlohmann::json::parse(in);
  EXPECT_EQ(t["missed"], 0);
  auto intervals = t["intervals"];
  // 8 x (3 memcpy + 7 launches) calls, a quarter chosen: some of each, far from all
  ASSERT_GE(intervals.size(), 8u);
  ASSERT_LE(intervals.size(), 40u);
  Db db(db_);
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls GROUP BY name"),
            times(kRuntimeCallsPerRun, 8));
  std::map<std::string, int64_t> slow;
  for (size_t i = 0; i < intervals.size(); ++i) {
    int64_t from = intervals[i][0], to = intervals[i][1];
    std::string call = t["calls"][i];
    ++slow[call];
    EXPECT_GE(to - from, 5'000'000);
    // the recorded call of that name that holds the delay
    EXPECT_EQ(db.scalar("SELECT count(*) FROM cuda_calls WHERE name = '" + call +
                        "' AND ts_ns <= " + std::to_string(from) + " AND ts_ns + dur_ns >= " +
                        std::to_string(to)),
              1)
        << call << " delayed over [" << from << ", " << to << "]";
  }
  EXPECT_GT(slow["cudaMemcpy"], 0);
  EXPECT_GT(slow["cudaLaunchKernel"], 0);  // <<<...>>> launches too, through __cudaLaunchKernel
  EXPECT_EQ(db.pairs("SELECT name, count(*) FROM cuda_calls WHERE dur_ns >= 5000000 GROUP BY name"),
            slow);
}

}  // namespace
}  // namespace e2e
