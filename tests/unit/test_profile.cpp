// The CPU profile as report and export read it: Python and native frames put together per
// sample, and the functions' self and total counts.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "export/pprof.h"
#include "report/profile.h"
#include "report/report.h"
#include "store/reader.h"
#include "store/recording.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> names(const CpuProfile& p, const std::vector<uint32_t>& stack) {
  std::vector<std::string> out;
  for (uint32_t f : stack) out.push_back(p.frames()[f].name);
  return out;
}

TEST(CpuProfile, PythonAndNativeFramesTogetherAndFunctionsCounted) {
  std::string path =
      (fs::temp_directory_path() / ("eacgm_profile_" + std::to_string(getpid()) + ".db")).string();
  {
    RecordingWriter w(path, true);
    w.set_meta("sample_hz", "99");
    // 1: C code called from Python, the walk reaching the eval loop
    for (auto [d, name, module] : {std::tuple{0u, "spin", "libhot.so"}, {1u, "ffi_call", "libffi.so"},
                                   {2u, "_PyEval_EvalFrameDefault", "libpython.so"},
                                   {3u, "Py_RunMain", "libpython.so"}})
      w.add(NativeFrameRow{1, d, name, module});
    // 2: the walk broken by code without frame pointers: it stops at the first unknown frame
    for (auto [d, name, module] : {std::tuple{0u, "_PyObject_Free", "libpython.so"},
                                   {1u, "unknown+0x7f00", ""}, {2u, "x_add", "libpython.so"}})
      w.add(NativeFrameRow{2, d, name, module});
    // 3: the eval loop itself
    w.add(NativeFrameRow{3, 0, "_PyEval_EvalFrameDefault", "libpython.so"});
    // 4: a thread without Python: every frame
    for (auto [d, name, module] : {std::tuple{0u, "worker", "libgloo.so"}, {1u, "unknown+0x10", ""},
                                   {2u, "start_thread", "libc.so.6"}})
      w.add(NativeFrameRow{4, d, name, module});
    w.add(PythonStackFrameRow{1, 0, "m.call_c", "m.py", 9});
    w.add(PythonStackFrameRow{1, 1, "m.main", "m.py", 20});
    w.add(PythonStackFrameRow{2, 0, "m.rec", "m.py", 3});  // recursion: once per sample in total
    w.add(PythonStackFrameRow{2, 1, "m.rec", "m.py", 4});
    w.add(PythonStackFrameRow{2, 2, "m.main", "m.py", 21});
    uint64_t t = 1000;
    auto sample = [&](int64_t native, int64_t py, int n) {
      for (int i = 0; i < n; ++i) w.add(StackSampleRow{t++, 7, 8, native, py});
    };
    sample(1, 1, 3);
    sample(2, 2, 2);
    sample(3, 2, 4);
    sample(4, 0, 1);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  CpuProfile p(rec);
  ASSERT_EQ(p.samples().size(), 10u);
  EXPECT_EQ(p.hz(), 99u);
  EXPECT_EQ(names(p, p.stacks()[p.samples()[0].stack]),
            (std::vector<std::string>{"spin", "ffi_call", "m.call_c", "m.main"}));
  EXPECT_EQ(names(p, p.stacks()[p.samples()[3].stack]),
            (std::vector<std::string>{"_PyObject_Free", "m.rec", "m.rec", "m.main"}));
  EXPECT_EQ(names(p, p.stacks()[p.samples()[5].stack]),
            (std::vector<std::string>{"m.rec", "m.rec", "m.main"}));
  EXPECT_EQ(names(p, p.stacks()[p.samples()[9].stack]),
            (std::vector<std::string>{"worker", "unknown+0x10", "start_thread"}));
  std::map<std::string, std::pair<uint64_t, uint64_t>> fn;
  for (const auto& f : p.functions()) fn[f.name] = {f.self, f.total};
  EXPECT_EQ(fn["spin"], std::make_pair(uint64_t(3), uint64_t(3)));
  EXPECT_EQ(fn["m.rec"], std::make_pair(uint64_t(4), uint64_t(6)));
  EXPECT_EQ(fn["m.main"], std::make_pair(uint64_t(0), uint64_t(9)));
  EXPECT_EQ(fn.count("Py_RunMain"), 0u);  // under the eval loop: the interpreter's own
  EXPECT_EQ(fn.count("x_add"), 0u);       // beyond the broken walk
  EXPECT_EQ(p.functions().front().name, "m.rec");  // the most self first
  // a bounded list keeps the most total too: m.main has no self time but is in every Python
  // sample (a report listing by self alone lost a caller of C this way)
  auto top = p.top_functions(1);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].name, "m.rec");
  EXPECT_EQ(top[1].name, "m.main");
  EXPECT_EQ(p.top_functions(100).size(), p.functions().size());

  // pprof: gzip that zlib reads back, a profile.proto that starts with its sample types
  std::string raw = pprof_profile(p, nullptr, 1'700'000'000'000'000'000, 2'000'000'000);
  std::string gz = gzip(raw);
  ASSERT_GT(gz.size(), 18u);
  EXPECT_EQ(uint8_t(gz[0]), 0x1f);
  EXPECT_EQ(uint8_t(gz[1]), 0x8b);
  std::string back(raw.size(), '\0');
  z_stream z{};
  ASSERT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  z.next_in = reinterpret_cast<Bytef*>(gz.data());
  z.avail_in = uInt(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(back.data());
  z.avail_out = uInt(back.size());
  EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  inflateEnd(&z);
  EXPECT_EQ(back, raw);
  EXPECT_EQ(raw[0], char(1 << 3 | 2));  // field 1 (sample_type), length-delimited
  fs::remove(path);
}

// The off-CPU profile: samples weigh the time they stand for, functions sum weights; a damaged
// weight (negative, or beyond an hour) cannot overflow the sums; the CPU profile of the same
// recording is untouched by it.
TEST(CpuProfile, OffCpuSamplesWeighTheirTime) {
  std::string path =
      (fs::temp_directory_path() / ("eacgm_offcpu_" + std::to_string(getpid()) + ".db")).string();
  {
    RecordingWriter w(path, true);
    w.set_meta("sample_hz", "100");
    w.add(NativeFrameRow{1, 0, "clock_nanosleep", "libc.so.6"});
    w.add(NativeFrameRow{1, 1, "_PyEval_EvalFrameDefault", "libpython.so"});
    w.add(NativeFrameRow{2, 0, "futex_wait", "libc.so.6"});
    w.add(PythonStackFrameRow{1, 0, "m.nap", "m.py", 3});
    w.add(PythonStackFrameRow{1, 1, "m.main", "m.py", 9});
    // a 250 ms sleep kept whole, three short waits of a period each, a lock wait of 40 ms
    w.add(OffCpuSampleRow{1000, 250'000'000, 250'000'000, 7, 8, 1, 1});
    for (uint64_t t : {2000, 3000, 4000})
      w.add(OffCpuSampleRow{t, 1'000'000, 10'000'000, 7, 8, 1, 1});
    w.add(OffCpuSampleRow{5000, 40'000'000, 40'000'000, 7, 9, 2, 0});
    w.add(StackSampleRow{6000, 7, 8, 2, 0});
    w.add(ThreadRow{7, 9, "pool-worker"});
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  {
    // damage: a negative weight is left out, a huge one counts an hour
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "INSERT INTO offcpu_samples VALUES(7000, 1, -5, 7, 9, 2, NULL);"
                           "INSERT INTO offcpu_samples VALUES(8000, 1, 9223372036854775807, 7, 9, "
                           "2, NULL);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  RecordingReader rec(path);
  CpuProfile off(rec, ProfileKind::OffCpu);
  ASSERT_EQ(off.samples().size(), 6u);  // the negative one left out
  const uint64_t hour = 3'600'000'000'000;
  EXPECT_EQ(off.total_weight(), 250'000'000u + 30'000'000u + 40'000'000u + hour);
  std::map<std::string, std::pair<uint64_t, uint64_t>> fn;
  for (const auto& f : off.functions()) fn[f.name] = {f.self, f.total};
  EXPECT_EQ(fn["clock_nanosleep"], std::make_pair(uint64_t(280'000'000), uint64_t(280'000'000)));
  EXPECT_EQ(fn["m.main"], std::make_pair(uint64_t(0), uint64_t(280'000'000)));
  EXPECT_EQ(fn["futex_wait"], std::make_pair(40'000'000 + hour, 40'000'000 + hour));
  EXPECT_EQ(off.functions().front().name, "futex_wait");
  // by thread: the lock waiter (with the damaged hour) first, then the sleeper, each where its
  // heaviest stack blocked
  auto threads = off.threads();
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].tid, 9u);
  EXPECT_EQ(threads[0].name, "pool-worker");
  EXPECT_EQ(threads[0].weight, 40'000'000 + hour);
  EXPECT_EQ(threads[0].native, "futex_wait");
  EXPECT_EQ(threads[0].python, "");
  EXPECT_EQ(threads[1].tid, 8u);
  EXPECT_EQ(threads[1].name, "");
  EXPECT_EQ(threads[1].weight, 280'000'000u);
  EXPECT_EQ(threads[1].python, "m.nap");
  EXPECT_EQ(threads[1].native, "clock_nanosleep");
  CpuProfile cpu(rec);
  ASSERT_EQ(cpu.samples().size(), 1u);
  EXPECT_EQ(cpu.total_weight(), 1u);

  // pprof: a third sample type, the waits in samples of their own, cpu the default type
  std::string raw = pprof_profile(cpu, &off, 0, 0);
  EXPECT_NE(raw.find("off_cpu"), std::string::npos);
  std::string cpu_only = pprof_profile(cpu, nullptr, 0, 0);
  EXPECT_EQ(cpu_only.find("off_cpu"), std::string::npos);
  fs::remove(path);
}

// report's off-CPU section by thread: with the CPU profile at hand, threads that ran come first
// and the idle ones (a pool's workers waiting for work) are summed in one line.
TEST(CpuProfile, OffCpuByThreadPutsTheThreadsThatRanFirst) {
  std::string path =
      (fs::temp_directory_path() / ("eacgm_bythread_" + std::to_string(getpid()) + ".db")).string();
  {
    RecordingWriter w(path, true);
    w.set_meta("sample_hz", "100");
    w.add(NativeFrameRow{1, 0, "futex_wait", "libc.so.6"});
    w.add(NativeFrameRow{2, 0, "__poll", "libc.so.6"});
    w.add(NativeFrameRow{3, 0, "sgemm", "libblas.so"});
    w.add(PythonStackFrameRow{1, 0, "m.step", "m.py", 3});
    w.add(OffCpuSampleRow{1000, 1'000'000'000, 1'000'000'000, 7, 10, 1, 0});  // idle: never ran
    w.add(OffCpuSampleRow{2000, 100'000'000, 100'000'000, 7, 11, 1, 1});      // the step's wait
    w.add(OffCpuSampleRow{3000, 2'000'000'000, 2'000'000'000, 7, 12, 2, 0});  // idle: ran 10 ms
    for (uint64_t t = 0; t < 50; ++t) w.add(StackSampleRow{4000 + t, 7, 11, 3, 1});
    w.add(StackSampleRow{5000, 7, 12, 2, 0});
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  CpuProfile cpu(rec), off(rec, ProfileKind::OffCpu);
  auto text = [&](const CpuProfile* on_cpu) {
    char* buf = nullptr;
    size_t size = 0;
    FILE* f = open_memstream(&buf, &size);
    print_cpu_profile(off, f, 15, on_cpu);
    fclose(f);
    std::string out(buf, size);
    free(buf);
    return out;
  };
  std::string with = text(&cpu), without = text(nullptr);
  size_t step = with.find("tid 11");
  size_t idle = with.find(
      "2 idle threads (on the CPU under 5% of the time blocked): in __poll, "
      "futex_wait");
  ASSERT_NE(step, std::string::npos) << with;
  ASSERT_NE(idle, std::string::npos) << with;
  EXPECT_LT(step, idle) << with;
  EXPECT_NE(with.find("ran 0.50 s  pid 7 tid 11"), std::string::npos) << with;
  EXPECT_NE(with.find("m.step > futex_wait"), std::string::npos) << with;
  EXPECT_NE(with.find("3.000 s  2 idle threads"), std::string::npos) << with;
  EXPECT_EQ(with.find("tid 12"), std::string::npos) << with;  // summed, not listed
  // without the CPU profile: every thread by time blocked, the longest first
  EXPECT_EQ(without.find("idle"), std::string::npos) << without;
  EXPECT_LT(without.find("tid 12"), without.find("tid 10")) << without;
  EXPECT_LT(without.find("tid 10"), without.find("tid 11")) << without;
  fs::remove(path);
}

// report --json: the off-CPU threads that also ran are all listed, however many idle ones
// block longer (a node's helper threads); of the idle ones, the 32 heaviest.
TEST(CpuProfile, JsonListsEveryThreadThatRanAndTheHeaviestIdleOnes) {
  std::string path =
      (fs::temp_directory_path() / ("eacgm_jsonthreads_" + std::to_string(getpid()) + ".db"))
          .string();
  {
    RecordingWriter w(path, true);
    w.set_meta("sample_hz", "100");
    w.add(NativeFrameRow{1, 0, "futex_wait", "libc.so.6"});
    for (uint32_t tid = 1; tid <= 40; ++tid)
      w.add(OffCpuSampleRow{tid, 1'000'000'000, 1'000'000'000 + tid, 7, tid, 1, 0});
    w.add(OffCpuSampleRow{100, 100'000'000, 100'000'000, 7, 100, 1, 0});
    for (uint64_t t = 0; t < 50; ++t) w.add(StackSampleRow{1000 + t, 7, 100, 1, 0});
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  char* buf = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&buf, &size);
  print_report(path, true, f);
  fclose(f);
  auto j = nlohmann::json::parse(std::string(buf, size));
  free(buf);
  const auto& off = j.at("offcpu_profile").at("threads");
  ASSERT_EQ(off.size(), 33u) << off.dump();
  size_t idle = 0;
  bool ran = false;
  for (const auto& t : off) {
    if (t.at("idle").get<bool>()) ++idle;
    if (t.at("tid") == 100) {
      ran = true;
      EXPECT_EQ(t.at("idle"), false);
      EXPECT_EQ(t.at("cpu_samples"), 50);
    }
  }
  EXPECT_EQ(idle, 32u);
  EXPECT_TRUE(ran) << off.dump();
  EXPECT_EQ(off.at(0).at("tid"), 40) << "the heaviest first";
  EXPECT_EQ(j.at("cpu_profile").at("threads").size(), 1u);
  fs::remove(path);
}

// The line `record` prints at its end names the hottest functions; one without a symbol (a
// stripped binary's) is only an address there unless its file is said too.
TEST(CpuProfile, TheSummaryNamesTheFileOfAFunctionWithoutASymbol) {
  std::string path =
      (fs::temp_directory_path() / ("eacgm_summary_" + std::to_string(getpid()) + ".db")).string();
  {
    RecordingWriter w(path, true);
    w.set_meta("sample_hz", "99");
    w.add(NativeFrameRow{1, 0, "sgemm_kernel", "libopenblas.so"});
    w.add(NativeFrameRow{2, 0, "fn@0x4fee40", "python3.11"});
    w.add(NativeFrameRow{3, 0, "unknown+0x1234", "libstripped.so"});
    uint64_t t = 1000;
    for (auto [stack, n] : {std::pair{1, 5}, {2, 3}, {3, 2}})
      for (int i = 0; i < n; ++i) w.add(StackSampleRow{t++, 7, 8, stack, 0});
    ASSERT_EQ(w.close(), "");
  }
  char* buf = nullptr;
  size_t len = 0;
  FILE* out = open_memstream(&buf, &len);
  ASSERT_NE(out, nullptr);
  print_summary(path, out);
  fclose(out);
  std::string text(buf, len);
  free(buf);
  EXPECT_NE(text.find("most time in sgemm_kernel 50%, fn@0x4fee40 in python3.11 30%, "
                      "unknown+0x1234 in libstripped.so 20%"),
            std::string::npos)
      << text;
  fs::remove(path);
}

TEST(CpuProfile, ARecordingWithoutOneIsEmpty) {
  std::string path =
      (fs::temp_directory_path() / ("eacgm_noprofile_" + std::to_string(getpid()) + ".db")).string();
  {
    RecordingWriter w(path, true);
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  CpuProfile p(rec);
  EXPECT_TRUE(p.empty());
  EXPECT_TRUE(p.functions().empty());
  fs::remove(path);
}

}  // namespace
}  // namespace eacgm
