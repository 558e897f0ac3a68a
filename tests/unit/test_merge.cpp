// eacgm merge: the clock refinement on collectives, and the merged recording (pids, hosts,
// times, stacks) with the refusals a user meets.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "store/merge.h"
#include "store/reader.h"
#include "store/recording.h"
#include "store/rows.h"
#include "store/sqlite_util.h"
#include "util/error.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

// ends of `n` instances of a collective, 10 ms apart, as seen on a clock `skew` behind, with
// up to `jitter` of noise
std::vector<int64_t> ends(size_t n, int64_t skew, int64_t jitter, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> noise(-jitter, jitter);
  std::vector<int64_t> out;
  for (size_t k = 0; k < n; ++k)
    out.push_back(1'000'000'000 + int64_t(k) * 10'000'000 - skew + (jitter ? noise(rng) : 0));
  return out;
}

TEST(RefineClocks, RecoversAnOffsetFromTheCompletionsOfSharedCollectives) {
  // rank 0 on input 0; rank 1 on input 1, whose wall clock put it 30 ms off
  std::vector<CollectiveStream> s = {
      {0, "gloo:all_reduce", 0, 2, ends(50, 0, 20'000, 1)},
      {1, "gloo:all_reduce", 1, 2, ends(50, 30'000'000, 20'000, 2)},
  };
  auto fix = refine_clocks(s, 2);
  ASSERT_EQ(fix.size(), 2u);
  EXPECT_EQ(fix[0].offset_ns, 0);
  EXPECT_NEAR(double(fix[1].offset_ns), 30e6, 40e3);
  EXPECT_EQ(fix[1].instances, 50u);
  EXPECT_GE(fix[1].residual_ns, 0);
  EXPECT_LE(fix[1].residual_ns, 40'000);
}

TEST(RefineClocks, PlacesInputsThroughOneAnotherAndSkipsWhatCannotBeMatched) {
  // input 2 shares a communicator with input 1 only; input 3's group lacks a rank
  std::vector<CollectiveStream> s = {
      {0, "gloo:all_reduce", 0, 2, ends(20, 0, 0, 0)},
      {1, "gloo:all_reduce", 1, 2, ends(20, -5'000'000, 0, 0)},
      {1, "gloo:broadcast", 0, 2, ends(30, -5'000'000, 0, 0)},
      {2, "gloo:broadcast", 1, 2, ends(30, 7'000'000, 0, 0)},
      {3, "gloo:all_gather", 0, 3, ends(10, 1'000'000, 0, 0)},
      {0, "gloo:all_gather", 1, 3, ends(10, 0, 0, 0)},
  };
  auto fix = refine_clocks(s, 4);
  EXPECT_EQ(fix[1].offset_ns, -5'000'000);
  EXPECT_EQ(fix[2].offset_ns, 7'000'000);
  EXPECT_EQ(fix[2].instances, 30u);
  EXPECT_EQ(fix[2].residual_ns, 0);
  EXPECT_EQ(fix[3].instances, 0u);  // no rank 2 of the all_gather: not matched
  EXPECT_EQ(fix[3].offset_ns, 0);
}

// a stream whose calls began `wait` before they ended, on the same clock as its ends
CollectiveStream with_starts(CollectiveStream s, const std::vector<int64_t>& waits) {
  for (size_t k = 0; k < s.ends_ns.size(); ++k)
    s.starts_ns.push_back(s.ends_ns[k] - waits[k % waits.size()]);
  return s;
}

TEST(RefineClocks, CausalityBoundsBeatCompletionsThatLeaveTheCollectiveApart) {
  // two ranks per host on one true clock, host b's wall clock 30 ms ahead; every instance's
  // completions scatter by a scheduling slice (+-500 us, in two modes; busier host b's ranks
  // mostly late, a's mostly early: the completions' median distance is about 1 ms off), and
  // which rank begins last alternates: the middle of the causality bounds is the truth
  std::vector<CollectiveStream> s;
  const size_t n = 400;
  for (int64_t rank = 0; rank < 4; ++rank) {
    size_t input = rank < 2 ? 0 : 1;
    int64_t skew = input ? -30'000'000 : 0;
    std::vector<int64_t> e = ends(n, skew, 0, 0);
    for (size_t k = 0; k < n; ++k) {
      bool usual = (k * 7 + size_t(rank) * 3) % 4 != 0;  // 3 instances in 4
      e[k] += (usual == bool(input)) ? 500'000 : -500'000;
    }
    CollectiveStream cs{input, "gloo:all_reduce", rank, 4, e, {}};
    // rank (k % 4) begins last, 100 us before the first completion can happen
    for (size_t k = 0; k < n; ++k)
      cs.starts_ns.push_back(1'000'000'000 + int64_t(k) * 10'000'000 - skew - 600'000 -
                             (size_t(rank) == k % 4 ? 0 : 3'000'000));
    s.push_back(cs);
  }
  auto fix = refine_clocks(s, 2);
  EXPECT_NEAR(double(fix[1].offset_ns), -30e6, 10e3) << fix[1].bound_ns;
  EXPECT_GE(fix[1].bound_ns, 0);
  EXPECT_LE(fix[1].bound_ns, 500'000);
  EXPECT_EQ(fix[1].instances, 2 * n);
}

TEST(RefineClocks, ContradictingStartsFallBackToTheCompletions) {
  // starts after ends (instances that were not the same collective): no bound, the median
  auto a = with_starts({0, "gloo:all_reduce", 0, 2, ends(50, 0, 0, 0), {}}, {-5'000'000});
  auto b = with_starts({1, "gloo:all_reduce", 1, 2, ends(50, 2'000'000, 0, 0), {}}, {-5'000'000});
  auto fix = refine_clocks({a, b}, 2);
  EXPECT_EQ(fix[1].offset_ns, 2'000'000);
  EXPECT_EQ(fix[1].bound_ns, -1);
}

TEST(RefineClocks, UnequalCountsOrNoStreamsLeaveClocksAlone) {
  std::vector<CollectiveStream> s = {
      {0, "gloo:all_reduce", 0, 2, ends(20, 0, 0, 0)},
      {1, "gloo:all_reduce", 1, 2, ends(19, 3'000'000, 0, 0)},
  };
  auto fix = refine_clocks(s, 2);
  EXPECT_EQ(fix[1].instances, 0u);
  EXPECT_EQ(fix[1].offset_ns, 0);
  EXPECT_EQ(refine_clocks({}, 3).size(), 3u);
  EXPECT_TRUE(refine_clocks({}, 0).empty());
}

class Merge : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("eacgm_merge_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // one rank's recording: a process (pid 100 on every host), a CUDA call with a Python stack,
  // and `n` all_reduces completing at the given ends (its own monotonic clock)
  std::string rank(const std::string& name, const std::string& host, int64_t rank_no,
                   int64_t to_real, const std::string& job, int64_t skew) {
    std::string path = (dir_ / name).string();
    RecordingWriter w(path, false);
    w.set_meta("eacgm_version", "test");
    w.set_meta("hostname", host);
    w.set_meta("monotonic_to_realtime_ns", std::to_string(to_real));
    w.set_meta("start_monotonic_ns", "1000");
    w.set_meta("end_monotonic_ns", "5000000000");
    w.set_meta("events", "4");
    w.set_meta("layers", rank_no ? "comm,host" : "comm,cuda");
    ProcessRow p;
    p.pid = 100;
    p.ppid = 1;
    p.name = "python3";
    p.command = "python3 train.py";
    p.start_ns = 1000;
    p.job_id = job;
    p.rank = rank_no, p.local_rank = 0, p.world_size = 2;
    w.add(p);
    w.add(PythonStackFrameRow{1, 0, "train.step", "train.py", 7});
    CudaCallRow c;
    c.ts_ns = 2'000'000;
    c.dur_ns = 10;
    c.pid = 100, c.tid = 100;
    c.name = "cudaMalloc";
    c.py_stack = 1;
    w.add(c);
    w.add(NativeFrameRow{1, 0, "matmul", "libfoo.so"});
    w.add(StackSampleRow{2'500'000, 100, 100, 1, 1});
    for (int64_t e : ends(3, skew, 0, 0)) {
      CommCallRow r;
      r.ts_ns = uint64_t(e - 1000);
      r.dur_ns = 1000;
      r.pid = 100, r.tid = 101;
      r.name = "gloo:all_reduce";
      r.comm = 0x55;
      r.rank = rank_no, r.nranks = 2;
      w.add(r);
    }
    EXPECT_EQ(w.close(), "");
    return path;
  }
  fs::path dir_;
};

TEST_F(Merge, OneRecordingWithHostsRenumberedPidsAndOneClock) {
  // host b's wall clock says it is 25 ms ahead of where it is; its monotonic clock is 1 s
  // behind host a's
  std::string a = rank("a.db", "node-a", 0, 1'700'000'000'000'000'000, "job7", 0);
  std::string b = rank("b.db", "node-b", 1, 1'700'000'001'025'000'000, "job7", 1'000'000'000);
  std::string out = (dir_ / "job.db").string();
  MergeResult r = merge_recordings({a, b}, out, {});
  ASSERT_EQ(r.hosts.size(), 2u);
  EXPECT_EQ(r.hosts[1].wall_offset_ns, 1'025'000'000);
  EXPECT_EQ(r.hosts[1].fix.offset_ns, -25'000'000);
  EXPECT_EQ(r.hosts[1].fix.instances, 3u);
  EXPECT_EQ(r.hosts[1].pid_base, 10'000'000);
  struct stat st {};
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(fs::exists(out + ".merging"));

  RecordingReader rec(out);
  EXPECT_EQ(rec.meta_or("hostname", ""), "node-a,node-b");
  EXPECT_EQ(rec.meta_or("events", ""), "8");
  EXPECT_EQ(rec.meta_or("layers", ""), "comm,cuda,host");
  EXPECT_EQ(rec.meta_or("job_id", ""), "job7");
  EXPECT_EQ(rec.meta_or("clock_offsets_ns", ""), "node-a=0,node-b=1000000000");
  std::vector<std::string> procs;
  rec.query(
      "SELECT pid, host, host_pid, rank, job_id FROM processes ORDER BY pid", [&](Statement& s) {
        procs.push_back(fmt::format("{} {} {} {} {}", s.int_at(0), s.text_at(1),
                                    s.null_at(2) ? -1 : s.int_at(2), s.int_at(3), s.text_at(4)));
      });
  EXPECT_EQ(procs,
            (std::vector<std::string>{"100 node-a -1 0 job7", "10000100 node-b 100 1 job7"}));
  // the all_reduces now complete together; host b's CUDA call moved with its clock
  std::vector<int64_t> done;
  rec.query("SELECT ts_ns + dur_ns FROM comm_calls WHERE pid = 10000100 ORDER BY ts_ns",
            [&](Statement& s) { done.push_back(s.int_at(0)); });
  EXPECT_EQ(done, ends(3, 0, 0, 0));
  int64_t cuda_b = -1, stack_b = -1;
  rec.query("SELECT ts_ns, py_stack FROM cuda_calls WHERE pid = 10000100",
            [&](Statement& s) { cuda_b = s.int_at(0), stack_b = s.int_at(1); });
  EXPECT_EQ(cuda_b, 2'000'000 + 1'000'000'000);
  EXPECT_EQ(stack_b, 2);  // the second recording's stacks come after the first's
  int64_t stacks = 0;
  rec.query("SELECT count(*) FROM python_stacks", [&](Statement& s) { stacks = s.int_at(0); });
  EXPECT_EQ(stacks, 2);
  // the CPU profile's samples move with their host's clock, their stacks renumbered
  std::vector<std::string> samples;
  rec.query("SELECT s.pid, s.ts_ns, s.native_stack, s.py_stack, n.name, p.name FROM "
            "stack_samples s JOIN native_stacks n ON n.id = s.native_stack JOIN python_stacks p "
            "ON p.id = s.py_stack ORDER BY s.pid",
            [&](Statement& s) {
              samples.push_back(fmt::format("{} {} {} {} {} {}", s.int_at(0), s.int_at(1),
                                            s.int_at(2), s.int_at(3), s.text_at(4),
                                            s.text_at(5)));
            });
  EXPECT_EQ(samples, (std::vector<std::string>{"100 2500000 1 1 matmul train.step",
                                               "10000100 1002500000 2 2 matmul train.step"}));
}

TEST_F(Merge, RefusesWhatItCannotDoSafely) {
  std::string a = rank("a.db", "n", 0, 0, "job1", 0);
  std::string b = rank("b.db", "n", 1, 0, "job2", 0);
  std::string out = (dir_ / "job.db").string();
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { merge_recordings({a}, out, {}); }).find("two or more"),
            std::string::npos);
  EXPECT_NE(message([&] {
              merge_recordings({a, a}, out, {});
            }).find("given twice"),
            std::string::npos);
  EXPECT_NE(message([&] { merge_recordings({a, b}, "", {}); }).find("name the merged"),
            std::string::npos);
  EXPECT_NE(message([&] {
              merge_recordings({a, b}, out, {});
            }).find("different jobs"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_NE(message([&] {
              merge_recordings({a, b}, a, {.force = true, .any_job = true});
            }).find("one of the inputs"),
            std::string::npos);
  // --any-job merges them; hosts of the same name stay apart
  MergeResult r = merge_recordings({a, b}, out, {.force = false, .any_job = true});
  EXPECT_EQ(r.hosts[1].host, "n#2");
  EXPECT_NE(message([&] {
              merge_recordings({a, b}, out, {.any_job = true});
            }).find("--force"),
            std::string::npos);
  EXPECT_EQ(message([&] {
              merge_recordings({a, b}, out, {.force = true, .any_job = true});
            }),
            "no error");
  // never replaces what it did not write
  std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(message([&] {
              merge_recordings({a, b}, fifo, {.force = true, .any_job = true});
            }).find("not a regular file"),
            std::string::npos);
  EXPECT_TRUE(fs::is_fifo(fifo));
  std::string text = (dir_ / "notes.txt").string();
  std::ofstream(text) << "not a recording";
  EXPECT_NE(message([&] {
              merge_recordings({a, text}, out, {.force = true});
            }).find("not an eacgm recording"),
            std::string::npos);
}

}  // namespace
}  // namespace eacgm
