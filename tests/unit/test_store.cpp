// The recording store: what the writer writes, the reader reads back; and the path checks and
// errors a user meets before a recording starts.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <thread>

#include "report/report.h"
#include "store/anomalies.h"
#include "store/reader.h"
#include "store/recording.h"
#include "store/rows.h"
#include "store/sqlite_util.h"
#include "store/table_readers.h"
#include "util/error.h"
#include "util/output_file.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

// A result row's first `columns` values as "v|v|NULL|...|".
std::string row_text(const Statement& s, int columns) {
  std::string row;
  for (int c = 0; c < columns; ++c)
    row += (s.null_at(c) ? std::string("NULL") : std::string(s.text_at(c))) + "|";
  return row;
}

class Store : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("eacgm_store_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "run.eacgm.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static CudaCallRow copy_call(uint64_t ts, int64_t bytes) {
    CudaCallRow r;
    r.ts_ns = ts;
    r.dur_ns = 250;
    r.pid = 10, r.tid = 11;
    r.name = "cudaMemcpyAsync";
    r.ret = 0;
    r.bytes = bytes;
    r.memcpy_kind = "HostToDevice";
    r.has_stream = true;
    r.stream = 0x1234;
    return r;
  }

  fs::path dir_;
  std::string path_;
};

TEST(AnomalySubject, AWindowIsAboutAllLayersACallAboutItsOperation) {
  EXPECT_EQ(anomaly_subject("window", "window"), "(all layers)");
  EXPECT_EQ(anomaly_subject("cuda", "cudaMemcpy"), "cudaMemcpy");
}

// Statement::run resets only the parameters the last run bound (not every one, as
// sqlite3_clear_bindings did): whatever a run does not bind is NULL all the same, on either
// side of the 64 parameters one word of its bits holds.
TEST(Statement, AParameterNotBoundSinceTheLastRunIsNull) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  std::string columns, params;
  for (int c = 1; c <= 70; ++c) {
    columns += (c > 1 ? ", c" : "c") + std::to_string(c);
    params += (c > 1 ? ", ?" : "?") + std::to_string(c);
  }
  ASSERT_EQ(exec_sql(db, ("CREATE TABLE t(" + columns + ")").c_str()), "");
  std::vector<std::string> rows;
  {
    Statement insert(db, "INSERT INTO t VALUES(" + params + ")");
    insert.bind(1, int64_t(1)), insert.bind(2, "two"), insert.bind_double(64, 6.5);
    EXPECT_EQ(insert.run(), SQLITE_DONE);
    insert.bind(1, int64_t(2));  // 2 and 64 left out: NULL
    EXPECT_EQ(insert.run(), SQLITE_DONE);
    insert.bind(1, int64_t(3)), insert.bind(70, int64_t(70));  // in the second word of bits
    EXPECT_EQ(insert.run(), SQLITE_DONE);
    insert.bind(1, int64_t(4)), insert.bind(2, "again");
    EXPECT_EQ(insert.run(), SQLITE_DONE);
    insert.bind(1, int64_t(5)), insert.bind(2, "x"), insert.bind_null(2);
    EXPECT_EQ(insert.run(), SQLITE_DONE);
    for (int c = 1; c <= 70; ++c) insert.bind(c, int64_t(c == 1 ? 6 : c));
    EXPECT_EQ(insert.run(), SQLITE_DONE);
    insert.bind(1, int64_t(7)), insert.bind(64, int64_t(1));  // 2 and 70 left out
    EXPECT_EQ(insert.run(), SQLITE_DONE);
    Statement read(db, "SELECT c1, c2, c64, c70 FROM t ORDER BY c1");
    while (read.step()) rows.push_back(row_text(read, 4));
  }
  sqlite3_close(db);
  EXPECT_EQ(rows, (std::vector<std::string>{"1|two|6.5|NULL|", "2|NULL|NULL|NULL|",
                                            "3|NULL|NULL|70|", "4|again|NULL|NULL|",
                                            "5|NULL|NULL|NULL|", "6|2|64|70|",
                                            "7|NULL|1|NULL|"}));
}

TEST_F(Store, RowsAndMetaComeBackAsWritten) {
  {
    RecordingWriter w(path_, false);
    w.set_meta("command", "python train.py");
    w.set_meta("monotonic_to_realtime_ns", "1700000000000000000");
    w.add(ProcessRow{10, 1, "python", "python train.py", 100});
    w.add(ThreadRow{10, 11, "pt_main_thread"});
    w.add(copy_call(1000, 4096));
    CudaCallRow launch;
    launch.ts_ns = 2000, launch.dur_ns = 50, launch.pid = 10, launch.tid = 11;
    launch.name = "cudaLaunchKernel";
    launch.ret = 35;
    launch.is_launch = true;
    launch.grid[0] = 4, launch.grid[1] = 2, launch.grid[2] = 1;
    launch.block[0] = 128, launch.block[1] = 1, launch.block[2] = 1;
    launch.shared_mem = 256;
    launch.kernel = "void scale<float>(float*, float, int)";
    launch.address = 0x401000;
    w.add(launch);
    w.add(ProcessExitRow{10, 5000, 3});
    w.flush();
    EXPECT_EQ(w.close(), "");
  }
  RecordingReader r(path_);
  EXPECT_EQ(r.meta_or("command", ""), "python train.py");
  EXPECT_EQ(r.meta_or("absent", "fallback"), "fallback");
  EXPECT_EQ(r.monotonic_to_realtime_ns(), 1700000000000000000);

  int rows = 0;
  r.query("SELECT pid, ppid, name, command, start_ns, end_ns, exit_code FROM processes",
          [&](Statement& s) {
            ++rows;
            EXPECT_EQ(s.int_at(0), 10);
            EXPECT_EQ(s.int_at(1), 1);
            EXPECT_EQ(s.text_at(2), "python");
            EXPECT_EQ(s.text_at(3), "python train.py");
            EXPECT_EQ(s.int_at(4), 100);
            EXPECT_EQ(s.int_at(5), 5000);
            EXPECT_EQ(s.int_at(6), 3);
          });
  EXPECT_EQ(rows, 1);
  r.query("SELECT tid, name FROM threads", [&](Statement& s) {
    EXPECT_EQ(s.int_at(0), 11);
    EXPECT_EQ(s.text_at(1), "pt_main_thread");
  });

  std::vector<std::string> calls;
  r.query("SELECT name, ret, bytes, memcpy_kind, stream, grid_x, grid_y, block_x, shared_mem, "
          "kernel, address FROM cuda_calls ORDER BY ts_ns",
          [&](Statement& s) { calls.push_back(row_text(s, 11)); });
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], "cudaMemcpyAsync|0|4096|HostToDevice|4660|NULL|NULL|NULL|NULL|NULL|NULL|");
  EXPECT_EQ(calls[1],
            "cudaLaunchKernel|35|NULL|NULL|NULL|4|2|128|256|void scale<float>(float*, float, "
            "int)|4198400|");

  // the cross-layer view names the layer and puts the most useful detail in one column
  std::vector<std::string> trace;
  r.query("SELECT layer, name, detail, dur_ns FROM trace ORDER BY ts_ns", [&](Statement& s) {
    trace.push_back(std::string(s.text_at(0)) + "|" + std::string(s.text_at(1)) + "|" +
                    std::string(s.text_at(2)) + "|" + std::to_string(s.int_at(3)));
  });
  EXPECT_EQ(trace, (std::vector<std::string>{
                       "cuda|cudaMemcpyAsync|HostToDevice|250",
                       "cuda|cudaLaunchKernel|void scale<float>(float*, float, int)|50"}));
}

// CUDA calls go in eight rows a statement: copies and launches mixed in one batch (two
// statements of eight and a rest of three) come back in order, each with its own values and
// NULLs, none of a neighbour's.
TEST_F(Store, CudaCallsOfOneMultiRowInsertKeepTheirOwnColumns) {
  std::vector<std::string> kernels;
  for (int i = 0; i < 19; ++i) kernels.push_back("kernel" + std::to_string(i));
  {
    RecordingWriter w(path_, false);
    for (int i = 0; i < 19; ++i) {
      if (i % 3 != 0) {  // a period that eight is not a multiple of: a slot of the statement
                         // holds a copy in one run and a launch in the next
        w.add(copy_call(uint64_t(1000 + i), 100 * i));
        continue;
      }
      CudaCallRow launch;
      launch.ts_ns = uint64_t(1000 + i), launch.dur_ns = 50, launch.pid = 10, launch.tid = 11;
      launch.name = "cudaLaunchKernel";
      launch.ret = 35;
      launch.is_launch = true;
      launch.grid[0] = 4, launch.grid[1] = 2, launch.grid[2] = 1;
      launch.block[0] = 128, launch.block[1] = 1, launch.block[2] = 1;
      launch.shared_mem = uint64_t(i);
      launch.kernel = kernels[size_t(i)];
      launch.address = 0x401000;
      launch.runq_ns = i;
      w.add(launch);
    }
    w.flush();
    EXPECT_EQ(w.close(), "");
  }
  RecordingReader r(path_);
  std::vector<std::string> rows;
  r.query("SELECT ts_ns, name, ret, bytes, memcpy_kind, stream, grid_x, block_x, shared_mem, "
          "kernel, address, runq_ns FROM cuda_calls ORDER BY rowid",
          [&](Statement& s) { rows.push_back(row_text(s, 12)); });
  ASSERT_EQ(rows.size(), 19u);
  for (int i = 0; i < 19; ++i) {
    std::string want =
        i % 3 != 0 ? fmt::format("{}|cudaMemcpyAsync|0|{}|HostToDevice|4660|NULL|NULL|NULL|NULL|"
                                 "NULL|NULL|",
                                 1000 + i, 100 * i)
                   : fmt::format("{}|cudaLaunchKernel|35|NULL|NULL|NULL|4|128|{}|kernel{}|4198400|"
                                 "{}|",
                                 1000 + i, i, i, i);
    EXPECT_EQ(rows[size_t(i)], want) << i;
  }
}

TEST_F(Store, ManyBatchesAllLandInOrder) {
  constexpr int kBatches = 20, kPerBatch = 500;
  RecordingWriter w(path_, false);
  for (int b = 0; b < kBatches; ++b) {
    for (int i = 0; i < kPerBatch; ++i) w.add(copy_call(uint64_t(b * kPerBatch + i), i));
    EXPECT_EQ(w.pending(), size_t(kPerBatch));
    w.flush();
    EXPECT_EQ(w.pending(), 0u);
  }
  EXPECT_EQ(w.close(), "");
  EXPECT_EQ(w.rows_written(), uint64_t(kBatches * kPerBatch));
  RecordingReader r(path_);
  int64_t n = 0, sum_bytes = 0, out_of_order = 0, last = -1;
  r.query("SELECT ts_ns, bytes FROM cuda_calls ORDER BY rowid", [&](Statement& s) {
    ++n;
    sum_bytes += s.int_at(1);
    if (s.int_at(0) <= last) ++out_of_order;
    last = s.int_at(0);
  });
  EXPECT_EQ(n, kBatches * kPerBatch);
  EXPECT_EQ(sum_bytes, int64_t(kBatches) * (kPerBatch - 1) * kPerBatch / 2);
  EXPECT_EQ(out_of_order, 0);
}

// The writer thread behind the events (a slow disk, a burst) makes flush() wait once
// max_queued_rows are queued, instead of queueing without bound: the caller's ring buffer then
// fills and the kernel drops events (counted), and the recorder's memory stays bounded. Before,
// a 20 s burst the writer could not keep up with took the recorder from 86 to 440 MB.
TEST_F(Store, AWriterFarBehindMakesFlushWaitNotQueueWithoutBound) {
  constexpr size_t kBound = 20'000, kBatch = 5'000;
  RecordingWriter w(path_, false, kBound);
  size_t most = 0;
  for (int b = 0; b < 100; ++b) {
    for (size_t i = 0; i < kBatch; ++i) w.add(copy_call(uint64_t(b) * kBatch + i, 64));
    w.flush();
    most = std::max(most, w.queued_rows());
  }
  EXPECT_LE(most, kBound + kBatch);
  EXPECT_GT(most, kBatch);  // the writer did fall behind: the bound was what held it
  ASSERT_EQ(w.close(), "");
  EXPECT_EQ(w.rows_written(), 100 * kBatch);
}

TEST_F(Store, ReadableWhileBeingWritten) {
  RecordingWriter w(path_, false);
  w.set_meta("command", "still running");
  for (int i = 0; i < 100; ++i) w.add(copy_call(uint64_t(i), 1));
  w.flush();
  // the writer thread commits asynchronously: wait for it, as `eacgm report` on a live file would
  for (int i = 0; i < 500 && w.rows_written() < 101; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(w.rows_written(), 101u);
  RecordingReader r(path_);
  EXPECT_EQ(r.meta_or("command", ""), "still running");
  int64_t n = 0;
  r.query("SELECT count(*) FROM cuda_calls", [&](Statement& s) { n = s.int_at(0); });
  EXPECT_EQ(n, 100);
  EXPECT_EQ(w.close(), "");
}

TEST_F(Store, ClosedRecordingIsOneSelfContainedFile) {
  {
    RecordingWriter w(path_, false);
    w.add(copy_call(1, 1));
    w.close();
  }
  EXPECT_FALSE(fs::exists(path_ + "-wal"));
  EXPECT_FALSE(fs::exists(path_ + "-shm"));
  // a copy of the one file is a complete recording
  fs::copy_file(path_, (dir_ / "copy.db"));
  RecordingReader r((dir_ / "copy.db").string());
  int64_t n = 0;
  r.query("SELECT count(*) FROM cuda_calls", [&](Statement& s) { n = s.int_at(0); });
  EXPECT_EQ(n, 1);
  std::string mode;
  r.query("PRAGMA journal_mode", [&](Statement& s) { mode = s.text_at(0); });
  EXPECT_EQ(mode, "delete");
}

TEST_F(Store, ExistingFileIsRefusedUnlessForced) {
  { std::ofstream(path_) << "precious"; }
  try {
    RecordingWriter w(path_, false);
    FAIL() << "an existing file was overwritten without --force";
  } catch (const UsageError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  {
    std::ifstream in(path_);
    std::string s;
    in >> s;
    EXPECT_EQ(s, "precious");
  }
  {
    RecordingWriter w(path_, true);
    w.add(copy_call(1, 1));
    EXPECT_EQ(w.close(), "");
  }
  RecordingReader r(path_);
  EXPECT_TRUE(r.has_table("cuda_calls"));
}

TEST_F(Store, BadOutputPathsNameTheProblem) {
  auto message = [](const std::string& path) {
    try {
      RecordingWriter w(path, false);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message((dir_ / "no/such/dir/run.db").string()).find("does not exist"),
            std::string::npos);
  EXPECT_NE(message(dir_.string()).find("is a directory"), std::string::npos);
  if (geteuid() != 0) {  // root writes anywhere: the permission check only means something for others
    fs::create_directory(dir_ / "ro");
    fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_NE(message((dir_ / "ro/run.db").string()).find("not writable"), std::string::npos);
  }
}

// A late join that no model judged (detect/young_stragglers.h) has no score: stored as NULL,
// listed after every scored anomaly, and said as what it is, not as "score nan".
TEST_F(Store, AnAnomalyNoModelScoredHasNoScore) {
  {
    RecordingWriter w(path_, false);
    w.set_meta("start_monotonic_ns", "1");
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  const std::string late = R"([["log_straggler_wait_10us",null,30300.0,38.9]])";
  write_anomalies(path_,
                  {AnomalyRow{5, 31'000'000, "comm", "gloo:all_reduce", NAN, NAN,
                              "straggling rank: gloo:all_reduce waited for a peer", late},
                   AnomalyRow{9, 2, "cuda", "cudaMalloc", -9, -3, "slow cuda call: cudaMalloc", "[]"}},
                  {{"detect_trained_on", "the first half"}});
  RecordingReader rec(path_);
  auto strongest = strongest_anomalies(rec, 5);
  ASSERT_EQ(strongest.size(), 2u);
  EXPECT_EQ(strongest[0].name, "cudaMalloc");
  EXPECT_TRUE(std::isnan(strongest[1].score) && std::isnan(strongest[1].threshold));
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  ASSERT_NO_THROW(print_report(path_, false, out));
  fclose(out);
  std::string printed(text, size);
  free(text);
  EXPECT_NE(printed.find("late join, against the job's own collectives  straggling rank: "
                         "gloo:all_reduce waited for a peer (waited for a late rank 30.3 ms "
                         "(usual 38.9 us))"),
            std::string::npos)
      << printed;
  EXPECT_EQ(printed.find("nan"), std::string::npos) << printed;
  out = open_memstream(&text, &size);
  ASSERT_NO_THROW(print_report(path_, true, out));
  fclose(out);
  auto j = nlohmann::json::parse(std::string(text, size));
  free(text);
  ASSERT_EQ(j["anomalies"].size(), 2u);
  EXPECT_TRUE(j["anomalies"][0]["score"].is_null()) << j["anomalies"][0];
}

// A damaged or edited recording (found by fuzz_recording): a time in meta that is no number is
// an error naming the file and the key (it escaped as std::invalid_argument, "internal error:
// stoll" from report and detect); one beyond 2^62 ns is read as 2^62; an anomaly's features that are not JSON are
// reported as the text they are (report --json threw json's parse_error); an XID at 2^63 ns and
// sizes adding up past int64 are printed without overflow.
TEST_F(Store, DamagedMetaAndAnomaliesAreClearErrorsOrReadAsTheyAre) {
  {
    RecordingWriter w(path_, false);
    w.set_meta("start_monotonic_ns", "12abc");
    w.set_meta("end_monotonic_ns", "99999999999999999999");
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  write_anomalies(path_, {AnomalyRow{1, 2, "cuda", "cudaMalloc", -9, -3, "slow", "not json"}}, {});
  RecordingReader rec(path_);
  EXPECT_EQ(rec.meta_ns("end_monotonic_ns"), kMaxRecordedNs);
  EXPECT_EQ(rec.meta_ns("no_such_key"), 0);
  try {
    rec.meta_ns("start_monotonic_ns");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              path_ + ": its meta 'start_monotonic_ns' is '12abc', not a whole number of "
                      "nanoseconds (the file was damaged or edited; record again)");
  }
  {
    RecordingWriter w(path_, true);
    w.set_meta("start_monotonic_ns", "1");
    w.add(GpuXidEvent{uint64_t(1) << 63, 0, 79});  // read back as INT64_MIN
    CudaCallRow big = copy_call(10, INT64_MAX);
    w.add(big);
    w.add(big);  // the bytes of the two add up past int64
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  write_anomalies(path_, {AnomalyRow{1, 2, "cuda", "cudaMalloc", -9, -3, "slow", "not json"}}, {});
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  ASSERT_NO_THROW(print_report(path_, false, out));  // no overflow either (UBSan in the asan test)
  fclose(out);
  EXPECT_NE(std::string(text, size).find("XID 79"), std::string::npos);
  free(text);
  out = open_memstream(&text, &size);
  ASSERT_NO_THROW(print_report(path_, true, out));
  fclose(out);
  auto j = nlohmann::json::parse(std::string(text, size));
  free(text);
  ASSERT_EQ(j["anomalies"].size(), 1u);
  EXPECT_EQ(j["anomalies"][0]["features"], "not json");
}

// On a GPU every runtime launch makes a driver launch of the same kernel inside it (an H100's
// report counted each kernel twice before); cuBLAS launches through the driver alone; without a
// GPU only the runtime's calls are there.
TEST_F(Store, TopKernelsCountEachLaunchOnce) {
  {
    RecordingWriter w(path_, true);
    w.set_meta("start_monotonic_ns", "1");
    auto launch = [&](const char* api, const char* kernel, uint64_t ts, uint64_t dur) {
      CudaCallRow r;
      r.ts_ns = ts, r.dur_ns = dur, r.pid = 1, r.tid = 1, r.name = api, r.kernel = kernel;
      r.is_launch = true;
      r.grid[0] = r.block[0] = 1;
      w.add(r);
    };
    for (uint64_t i = 0; i < 3; ++i) {  // through the runtime: both levels
      launch("cuLaunchKernel", "reduce_kernel", 100 * i + 2, 5);
      launch("cudaLaunchKernel", "reduce_kernel", 100 * i, 10);
    }
    for (uint64_t i = 0; i < 2; ++i) launch("cuLaunchKernelEx", "sm90_gemm", 1000 + i, 4);
    for (uint64_t i = 0; i < 4; ++i) launch("cudaLaunchKernel", "vecAdd", 2000 + i, 7);  // no GPU
    launch("cuLaunchKernel", "mixed", 3000, 1);  // one through the driver alone, one through
    launch("cuLaunchKernel", "mixed", 3010, 1);  // the runtime
    launch("cudaLaunchKernel", "mixed", 3008, 3);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path_);
  std::vector<KernelStats> k = top_kernels(rec, 10);
  ASSERT_EQ(k.size(), 4u);
  EXPECT_EQ(k[0].kernel, "vecAdd");
  EXPECT_EQ(k[0].launches, 4u);
  EXPECT_EQ(k[1].kernel, "reduce_kernel");
  EXPECT_EQ(k[1].launches, 3u);
  EXPECT_EQ(k[1].total_ns, 30u);  // the runtime's time, which holds the driver's
  EXPECT_EQ(k[2].kernel, "mixed");
  EXPECT_EQ(k[2].launches, 2u);
  EXPECT_EQ(k[3].kernel, "sm90_gemm");
  EXPECT_EQ(k[3].launches, 2u);
  EXPECT_EQ(top_kernels(rec, 2).size(), 2u);
}

TEST_F(Store, ReaderRefusesWhatIsNotARecording) {
  auto message = [](const std::string& path) {
    try {
      RecordingReader r(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message((dir_ / "missing.db").string()).find("no such file"), std::string::npos);
  std::string text = (dir_ / "notes.txt").string();
  { std::ofstream(text) << std::string(4096, 'x'); }
  EXPECT_NE(message(text).find("not an SQLite file"), std::string::npos) << message(text);
  std::string other = (dir_ / "other.db").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
  exec_sql(db, "CREATE TABLE t(x)");
  sqlite3_close(db);
  EXPECT_NE(message(other).find("no meta table"), std::string::npos) << message(other);
}


// detect, report and the page print causes that differ only in their measurements as one line
TEST(AnomalyCauses, DifferingOnlyInMeasurementsAreOneLineWithTheirRanges) {
  auto g = group_causes({{"rank 1 (pid 1822) joined 27.4 ms late (straggler)", 1},
                         {"rank 1 (pid 1822) joined 22.0 ms late (straggler)", 2},
                         {"rank 1 (pid 1822) joined 24.6 ms late (straggler)", 1},
                         {"rank 0 (pid 1821) joined 3.5 ms late (straggler)", 1},
                         {"CPU interference", 3},
                         {"preempted: waited 1.2 ms for a CPU; 40% of 2 MiB", 1},
                         {"preempted: waited 2.9 ms for a CPU; 45% of 2 MiB", 1}});
  ASSERT_EQ(g.size(), 4u);
  EXPECT_EQ(g[0].cause, "rank 1 (pid 1822) joined 22.0-27.4 ms late (straggler)");
  EXPECT_EQ(g[0].count, 4u);
  EXPECT_EQ(g[1].cause, "CPU interference");
  EXPECT_EQ(g[1].count, 3u);
  // ranks and pids are no measurements: another rank is another line
  EXPECT_EQ(g[2].cause, "preempted: waited 1.2-2.9 ms for a CPU; 40-45% of 2 MiB");
  EXPECT_EQ(g[3].cause, "rank 0 (pid 1821) joined 3.5 ms late (straggler)");
  EXPECT_TRUE(group_causes({}).empty());
  // a number glued to a word is part of the word; a lone number with no unit stays as it is
  EXPECT_EQ(group_causes({{"layer2 5 calls 3x slower", 1}})[0].cause, "layer2 5 calls 3x slower");
}

// A page or trace written through OUT.tmp: a stop signal in the middle removes the tmp file and
// still ends eacgm by that signal; after a write, the handlers eacgm had are back.
TEST(OutputFile, AStopSignalMidWriteLeavesNoTmpFileAndHandlersAreRestored) {
  std::string out = (fs::temp_directory_path() /
                     ("eacgm_write_" + std::to_string(getpid()) + ".html")).string();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    write_then_rename(out, [](std::ostream& f) {
      f << std::string(1 << 20, 'x');
      f.flush();
      raise(SIGINT);
      f << "never";
    });
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  EXPECT_FALSE(fs::exists(out));

  static int seen = 0;
  struct sigaction mine {}, before {}, now {};
  mine.sa_handler = [](int) { ++seen; };
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(sigaction(SIGHUP, &mine, &before), 0);
  write_then_rename(out, [](std::ostream& f) { f << "page"; });
  ASSERT_EQ(sigaction(SIGHUP, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, mine.sa_handler);
  raise(SIGHUP);
  EXPECT_EQ(seen, 1);
  sigaction(SIGHUP, &before, nullptr);
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "page");
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  fs::remove(out);
}

}  // namespace
}  // namespace eacgm
