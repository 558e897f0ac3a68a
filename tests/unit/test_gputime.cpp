// The gputime layer's decoder (pipeline/decoder_gputime.cpp): batches of the injection
// library's entries (gputime/gpu_batch.h) into gpu_activity rows, read back through the table
// reader; what does not parse is counted, and stops no more than it must.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "events.h"
#include "export/chrome_json.h"
#include "export/exporter.h"
#include <fmt/format.h>

#include "gputime/duty.h"
#include "gputime/embedded.h"
#include "gputime/gpu_batch.h"
#include "pipeline/decoder.h"
#include "probe/symbolizer.h"
#include "report/gpu_time.h"
#include "report/html_report.h"
#include "report/report.h"
#include "store/reader.h"
#include "store/recording.h"
#include "store/table_readers.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;
using namespace gputime;

constexpr uint64_t kNow = 5'000'000'000'000ull;  // when the batch arrived (the probe's ts_ns)

// A batch as the library packs it.
class Batch {
 public:
  template <class Entry>
  Batch& add(Entry e) {
    e.h.bytes = uint16_t(sizeof(Entry));
    put(&e, sizeof(e));
    return *this;
  }
  Batch& text(EntryKind kind, uint32_t id, const std::string& s) {
    std::vector<unsigned char> entry(entry_bytes(uint32_t(sizeof(GpuText) + s.size() + 1)), 0);
    GpuText t{{uint16_t(kind), uint16_t(entry.size())}, id};
    memcpy(entry.data(), &t, sizeof(t));
    memcpy(entry.data() + sizeof(t), s.data(), s.size());
    put(entry.data(), uint32_t(entry.size()));
    return *this;
  }
  Batch& raw(const void* p, uint32_t n) {
    put(p, n);
    return *this;
  }
  eacgm_gpu_batch_event event(uint32_t pid = 42) const {
    eacgm_gpu_batch_event e{};
    e.kind = EACGM_REC_GPU_BATCH;
    e.pid = pid;
    e.tid = pid + 1;
    e.bytes = used_;
    e.ts_ns = kNow;
    memcpy(e.data, bytes_, used_);
    return e;
  }

 private:
  void put(const void* p, uint32_t n) {
    memcpy(bytes_ + used_, p, n);
    used_ += n;
  }
  unsigned char bytes_[kGpuBatchBytes] = {};
  uint32_t used_ = 0;
};

GpuExecution execution(EntryKind kind, uint32_t correlation, uint64_t start, uint64_t dur) {
  GpuExecution x{};
  x.h.kind = uint16_t(kind);
  x.correlation = correlation;
  x.start_ns = start, x.end_ns = start + dur;
  x.device = 1, x.context = 2, x.stream = 13;
  return x;
}

// A new empty folder of this test program's for a recording of `what`.
fs::path fresh_dir(const std::string& what) {
  fs::path dir = fs::temp_directory_path() / ("eacgm_gputime_" + what + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The recording at `path` exported as Chrome JSON into `dir`, parsed.
nlohmann::json chrome_trace(const std::string& path, const fs::path& dir) {
  std::string out = (dir / "run.json").string();
  export_recording(path, out, ExportFormat::ChromeJson, false);
  std::ifstream in(out);
  return nlohmann::json::parse(in);
}

class GpuTimeDecode : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("eacgm_gputime_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "run.eacgm.db").string();
    writer_ = std::make_unique<RecordingWriter>(path_, false);
    decoder_ = std::make_unique<EventDecoder>(*writer_, symbols_);
    decoder_->on_gpu_note = [this](uint32_t pid, const std::string& note) {
      notes_.push_back(std::to_string(pid) + ": " + note);
    };
  }
  void TearDown() override {
    decoder_.reset();
    writer_.reset();
    fs::remove_all(dir_);
  }
  void feed(const Batch& b, uint32_t pid = 42) {
    auto e = std::make_unique<eacgm_gpu_batch_event>(b.event(pid));  // 16 KB: not on the stack
    decoder_->on_record(e.get(), sizeof(*e));
  }
  // kind name tid correlation ts dur bytes [grid block shared registers] per row, in time order
  std::vector<std::string> rows() {
    writer_->flush();
    EXPECT_EQ(writer_->close(), "");
    std::vector<std::string> out;
    RecordingReader r(path_);
    each_gpu_activity(r, [&](const GpuActivityRow& g) {
      std::string row = std::string(g.kind) + " " + std::string(g.name) +
                        " tid=" + std::to_string(g.tid) + " corr=" + std::to_string(g.correlation) +
                        " ts=" + std::to_string(g.ts_ns - kNow) +
                        " dur=" + std::to_string(g.dur_ns) + " bytes=" + std::to_string(g.bytes) +
                        " dev=" + std::to_string(g.device) + " stream=" + std::to_string(g.stream);
      if (g.kind == "kernel")
        row += " grid=" + std::to_string(g.grid[0]) + "x" + std::to_string(g.grid[1]) +
               " block=" + std::to_string(g.block[0]) + " shared=" + std::to_string(g.shared_mem) +
               " regs=" + std::to_string(g.registers);
      out.push_back(row);
    });
    return out;
  }
  fs::path dir_;
  std::string path_;
  Symbolizer symbols_;
  std::unique_ptr<RecordingWriter> writer_;
  std::unique_ptr<EventDecoder> decoder_;
  std::vector<std::string> notes_;
};

TEST_F(GpuTimeDecode, EveryKindOfEntryBecomesItsRow) {
  GpuLaunch launch{};
  launch.h.kind = uint16_t(EntryKind::launch);
  launch.correlation = 7, launch.start_ns = kNow + 100, launch.end_ns = kNow + 103;
  launch.tid = 4242, launch.cbid = 211;
  GpuExecution kernel = execution(EntryKind::kernel, 7, kNow + 110, 20);
  kernel.name_id = 1;
  kernel.grid[0] = 64, kernel.grid[1] = 2, kernel.grid[2] = 1;
  kernel.block[0] = 128, kernel.block[1] = 1, kernel.block[2] = 1;
  kernel.shared_bytes = 4096, kernel.registers = 40;
  GpuExecution copy = execution(EntryKind::memcpy, 8, kNow + 200, 50);
  copy.bytes = 1 << 20, copy.copy_kind = 2;
  GpuExecution set = execution(EntryKind::memset, 9, kNow + 300, 5);
  set.bytes = 512;
  GpuDropped dropped{};
  dropped.h.kind = uint16_t(EntryKind::dropped);
  dropped.records = 11;
  feed(Batch()
           .text(EntryKind::note, 0, "CUPTI from /usr/local/cuda/lib64")
           .text(EntryKind::name, 1, "_Z4axpyPff")
           .add(launch)
           .add(kernel)
           .add(copy)
           .add(set)
           .add(dropped));
  EXPECT_EQ(rows(),
            (std::vector<std::string>{
                "launch cudaLaunchKernel tid=4242 corr=7 ts=100 dur=3 bytes=-1 dev=0 stream=0",
                "kernel axpy(float*, float) tid=0 corr=7 ts=110 dur=20 bytes=-1 dev=1 stream=13 "
                "grid=64x2 block=128 shared=4096 regs=40",
                "memcpy DeviceToHost tid=0 corr=8 ts=200 dur=50 bytes=1048576 dev=1 stream=13",
                "memset  tid=0 corr=9 ts=300 dur=5 bytes=512 dev=1 stream=13"}));
  EXPECT_EQ(notes_, (std::vector<std::string>{"42: CUPTI from /usr/local/cuda/lib64"}));
  EXPECT_EQ(decoder_->stats().gpu_activity, 4u);
  EXPECT_EQ(decoder_->stats().gpu_dropped, 11u);
  EXPECT_EQ(decoder_->stats().malformed, 0u);
}

// A duty-cycled library's slice: its span as a gpu_time_slices row; one off the recording's
// clock (or ending before it starts) is counted, not kept.
TEST_F(GpuTimeDecode, SlicesBecomeGpuTimeSliceRows) {
  GpuSlice on{};
  on.h.kind = uint16_t(EntryKind::slice);
  on.start_ns = kNow + 1000, on.end_ns = kNow + 201'000;
  GpuSlice backwards = on;
  backwards.end_ns = on.start_ns - 1;
  GpuSlice far = on;
  far.start_ns = 5, far.end_ns = 10;
  feed(Batch().add(on).add(backwards).add(far));
  writer_->flush();
  EXPECT_EQ(writer_->close(), "");
  std::vector<std::string> got;
  RecordingReader r(path_);
  each_gpu_slice(r, [&](const GpuSliceRow& g) {
    got.push_back(fmt::format("{} {} {}", g.ts_ns - kNow, g.dur_ns, g.pid));
  });
  EXPECT_EQ(got, (std::vector<std::string>{"1000 200000 42"}));
  EXPECT_EQ(decoder_->stats().gpu_slices, 1u);
  EXPECT_EQ(decoder_->stats().gpu_off_clock, 2u);
}

// The duty cycle's setting, as the library reads it and `record --gputime-duty` checks it.
TEST(GpuTimeDuty, SettingsParseAndNonsenseIsRefused) {
  Duty d;
  ASSERT_TRUE(parse_duty("full", d));
  EXPECT_TRUE(d.full());
  ASSERT_TRUE(parse_duty("1s/10s", d));
  EXPECT_EQ(d.on_ns, 1'000'000'000u);
  EXPECT_EQ(d.period_ns, 10'000'000'000u);
  ASSERT_TRUE(parse_duty("250ms/1.5s", d));
  EXPECT_EQ(d.on_ns, 250'000'000u);
  EXPECT_EQ(d.period_ns, 1'500'000'000u);
  ASSERT_TRUE(parse_duty("30s/2m", d));
  EXPECT_EQ(d.period_ns, 120'000'000'000u);
  ASSERT_TRUE(parse_duty(kDefaultDuty, d));
  EXPECT_EQ(d.period_ns, 10 * d.on_ns);
  Duty kept{7, 9};
  for (const char* bad : {"", "1s", "10s/1s", "1s/1s", "5ms/1s", "1/10", "1s/10", "nan s/1s",
                          "inf s/10s", "-1s/10s", "1s/10s/", "1x/10s", "1s/2d", "FULL"}) {
    EXPECT_FALSE(parse_duty(bad, kept)) << bad;
    EXPECT_EQ(kept.on_ns, 7u) << bad;
  }
  EXPECT_FALSE(parse_duty(nullptr, kept));
}

// NCCL's profiler plugin's entries: NCCL's strings as comm_calls names them, the GPU's time
// and the bandwidths over it; a GPU time off the host's clock is dropped, the row kept; an
// operation no channel reported has no GPU time; the report sums them per operation and rank.
TEST_F(GpuTimeDecode, NcclOperationsBecomeGpuCollectiveRowsAndReportLines) {
  auto op = [](uint64_t seq, uint64_t start, uint64_t gpu_start, uint64_t gpu_dur) {
    GpuCollective c{};
    c.h.kind = uint16_t(EntryKind::collective);
    c.tid = 77, c.comm_hash = 0xfedcba9876543210ull, c.seq = seq;
    c.enqueue_ns = start, c.enqueued_ns = start + 2'000, c.completed_ns = start + 900'000;
    c.start_ns = gpu_start, c.end_ns = gpu_start + gpu_dur;
    c.count = 1 << 18, c.rank = 1, c.nranks = 4, c.root_or_peer = -1;
    strcpy(c.func, "AllReduce"), strcpy(c.datatype, "ncclBfloat16");
    strcpy(c.algo, "RING"), strcpy(c.proto, "LL128");
    c.channels = 2, c.channels_seen = 2, c.warps = 8;
    c.flags = kCollectiveGpuClock;
    return c;
  };
  GpuCollective late_clock = op(2, kNow + 3'000'000, kNow + 700'000'000'000ull, 1'000);
  GpuCollective unseen = op(3, kNow + 4'000'000, 0, 0);
  unseen.flags = 0, unseen.channels_seen = 0, unseen.completed_ns = 0;
  GpuCollective send = op(~0ull, kNow + 5'000'000, kNow + 5'100'000, 500'000);
  send.flags |= kCollectiveP2p, strcpy(send.func, "Send"), send.algo[0] = send.proto[0] = 0;
  send.root_or_peer = 3, send.channels = send.channels_seen = 1;
  feed(Batch()
           .add(op(0, kNow + 1'000'000, kNow + 1'300'000, 250'000))
           .add(op(1, kNow + 2'000'000, kNow + 2'300'000, 750'000))
           .add(late_clock)
           .add(unseen)
           .add(send));
  EXPECT_EQ(decoder_->stats().gpu_collectives, 5u);
  writer_->flush();
  ASSERT_EQ(writer_->close(), "");
  RecordingReader r(path_);
  std::vector<std::string> got;
  each_gpu_collective(r, [&](const GpuCollectiveRow& g) {
    got.push_back(fmt::format("{} tid={} seq={} {}/{} peer={} {} {}B {}/{} {}/{} ts={} dur={} "
                              "gpu={} {}+{} busbw={:.4f} hash={:x}",
                              g.name, g.tid, g.seq, g.rank, g.nranks, g.peer, g.datatype, g.bytes,
                              g.algo, g.proto, g.channels_seen, g.channels, g.ts_ns - kNow,
                              g.dur_ns, g.has_gpu_time, g.has_gpu_time ? g.gpu_start_ns - kNow : 0,
                              g.gpu_dur_ns, g.busbw_gbps, g.comm_hash));
  });
  EXPECT_EQ(got, (std::vector<std::string>{
                     "ncclAllReduce tid=77 seq=0 1/4 peer=-1 bfloat16 524288B RING/LL128 2/2 "
                     "ts=1000000 dur=900000 gpu=true 1300000+250000 busbw=3.1457 "
                     "hash=fedcba9876543210",
                     "ncclAllReduce tid=77 seq=1 1/4 peer=-1 bfloat16 524288B RING/LL128 2/2 "
                     "ts=2000000 dur=900000 gpu=true 2300000+750000 busbw=1.0486 "
                     "hash=fedcba9876543210",
                     "ncclAllReduce tid=77 seq=2 1/4 peer=-1 bfloat16 524288B RING/LL128 2/2 "
                     "ts=3000000 dur=900000 gpu=false 0+0 busbw=-1.0000 hash=fedcba9876543210",
                     "ncclAllReduce tid=77 seq=3 1/4 peer=-1 bfloat16 524288B RING/LL128 0/2 "
                     "ts=4000000 dur=0 gpu=false 0+0 busbw=-1.0000 hash=fedcba9876543210",
                     "ncclSend tid=77 seq=-1 1/4 peer=3 bfloat16 524288B / 1/1 ts=5000000 "
                     "dur=900000 gpu=true 5100000+500000 busbw=1.0486 hash=fedcba9876543210"}));
  GpuTimeSummary s = gpu_time_summary(r, 10);
  ASSERT_EQ(s.collectives.size(), 2u);
  const GpuCollectiveTime& ar = s.collectives[0];
  EXPECT_EQ(ar.name, "ncclAllReduce");
  EXPECT_EQ(ar.operations, 4u);
  EXPECT_EQ(ar.timed, 2u);
  EXPECT_EQ(ar.total_ns, 1'000'000u);
  EXPECT_EQ(ar.max_ns, 750'000u);
  EXPECT_EQ(ar.start_p50_ns, 300'000u);
  EXPECT_EQ(ar.bytes, 4 * 524288);
  char* text = nullptr;
  size_t len = 0;
  FILE* out = open_memstream(&text, &len);
  print_gpu_time(s, out);
  fclose(out);
  std::string printed(text, len);
  free(text);
  EXPECT_NE(printed.find("NCCL on the GPU"), std::string::npos) << printed;
  EXPECT_NE(printed.find("ncclAllReduce (rank 1 of 4), 2 without GPU time"), std::string::npos)
      << printed;
  EXPECT_EQ(gpu_time_json(s)["collectives"][1]["name"], "ncclSend");
}

TEST_F(GpuTimeDecode, NamesArePerProcessAndACutNameIsStillNamed) {
  GpuExecution a = execution(EntryKind::kernel, 1, kNow + 10, 1);
  a.name_id = 1;
  std::string cut = "_ZN2at6native18elementwise_kernelILi128ELi4EZNS0_";
  cut += std::string(kMaxTextBytes - 1 - cut.size(), 'x');  // fills the library's limit
  feed(Batch().text(EntryKind::name, 1, "_Z5firstv").add(a), 42);
  GpuExecution b = execution(EntryKind::kernel, 1, kNow + 20, 1);
  b.name_id = 1;
  feed(Batch().text(EntryKind::name, 1, cut).add(b), 43);  // id 1 again: another process's
  GpuExecution unnamed = execution(EntryKind::kernel, 2, kNow + 30, 1);
  unnamed.name_id = 9;
  feed(Batch().add(unnamed), 42);
  auto got = rows();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got[0].starts_with("kernel first() ")) << got[0];
  EXPECT_TRUE(got[1].starts_with("kernel at::native::elementwise_kernel")) << got[1];
  EXPECT_TRUE(got[2].starts_with("kernel unknown kernel ")) << got[2];
}

TEST_F(GpuTimeDecode, WhatDoesNotParseIsCountedAndSkipsNoMoreThanItMust) {
  GpuExecution ok = execution(EntryKind::memset, 1, kNow + 10, 1);
  // an entry of a kind a newer library added: skipped alone, by its size
  struct {
    EntryHeader h;
    uint32_t pad;
    uint64_t x;
  } newer{{99, 16}, 0, 0};
  // a time not on the recording's clock (a CUPTI without the timestamp callback): left out
  GpuExecution elsewhere = execution(EntryKind::memset, 2, 17, 1);
  // a torn entry (its size not a multiple of 8): the rest of the batch is skipped
  EntryHeader torn{uint16_t(EntryKind::memset), 12};
  feed(Batch().add(ok).raw(&newer, sizeof(newer)).add(elsewhere).raw(&torn, sizeof(torn)).add(ok));
  // a batch the probe could not read
  Batch empty;
  feed(empty);
  EXPECT_EQ(rows(),
            (std::vector<std::string>{"memset  tid=0 corr=1 ts=10 dur=1 bytes=0 dev=1 stream=13"}));
  EXPECT_EQ(decoder_->stats().gpu_off_clock, 1u);
  EXPECT_EQ(decoder_->stats().malformed, 2u);  // the torn entry, the unreadable batch
}

// The meta a page needs of a recording (its clock), added to one written without it.
void rec_meta_for_page(const std::string& path) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db,
                         "INSERT OR REPLACE INTO meta VALUES('start_monotonic_ns', '0'), "
                         "('end_monotonic_ns', '6000'), ('monotonic_to_realtime_ns', '0')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
}

// The report's GPU time from a recording with known rows: busy time counts overlapping work
// once, queue delays come from each kernel's launch, kernels rank by GPU time.
TEST(GpuTimeReport, BusyQueueDelayAndTopKernels) {
  fs::path dir = fresh_dir("report");
  std::string path = (dir / "run.eacgm.db").string();
  {
    RecordingWriter w(path, false);
    auto add = [&](std::string_view kind, std::string_view name, uint64_t ts, uint64_t dur,
                   uint32_t corr, uint32_t device = 0, int64_t bytes = -1) {
      GpuActivityRow r;
      r.ts_ns = ts, r.dur_ns = dur, r.pid = 9, r.kind = kind, r.name = name;
      r.correlation = corr, r.device = device, r.bytes = bytes;
      if (kind == "launch") r.tid = 10;
      w.add(r);
    };
    // device 0, 0..1000 ns: a (0-300) overlaps b (200-500): busy 500; a copy at 800-1000
    add("launch", "cudaLaunchKernel", 0, 5, 1);
    add("kernel", "a", 100 - 100, 300, 1);  // queued 0 ns
    add("launch", "cudaLaunchKernel", 50, 5, 2);
    add("kernel", "b", 200, 300, 2);  // queued 150 ns
    add("memcpy", "HostToDevice", 800, 200, 3, 0, 4096);
    add("kernel", "a", 900, 100, 4);  // no launch row: unlinked
    // device 1: one long kernel, queued 1000 ns
    add("launch", "cudaLaunchKernel", 2000, 5, 5);
    add("kernel", "c", 3000, 2000, 5, 1);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  GpuTimeSummary s = gpu_time_summary(rec, 2);
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(s.devices[0].busy_ns, 500u + 200u);  // a|b merged, the copy (the late a inside it)
  EXPECT_EQ(s.devices[0].span_ns, 1000u);
  EXPECT_EQ(s.devices[0].kernels, 3u);
  EXPECT_EQ(s.devices[0].copies, 1u);
  EXPECT_EQ(s.devices[0].copy_bytes, 4096);
  EXPECT_EQ(s.devices[1].busy_ns, 2000u);
  EXPECT_EQ(s.linked, 3u);
  EXPECT_EQ(s.unlinked, 1u);
  EXPECT_EQ(s.queue_p50_ns, 150u);
  EXPECT_EQ(s.queue_max_ns, 1000u);
  ASSERT_EQ(s.kernels.size(), 2u);  // top 2 of 3
  EXPECT_EQ(s.kernels[0].kernel, "c");
  EXPECT_EQ(s.kernels[0].total_ns, 2000u);
  EXPECT_EQ(s.kernels[1].kernel, "a");
  EXPECT_EQ(s.kernels[1].executions, 2u);
  EXPECT_EQ(s.kernels[1].total_ns, 400u);
  // in the text report, and its JSON
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  print_report(path, false, out);
  fclose(out);
  std::string report(text, size);
  free(text);
  EXPECT_NE(report.find("device 0: busy 700 ns of 1.0 us (70.0%); kernels 3, copies 1 (4.0 KiB), "
                        "memsets 0"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("queue delay (launch call to GPU start): p50 150 ns"), std::string::npos)
      << report;
  out = open_memstream(&text, &size);
  print_report(path, true, out);
  fclose(out);
  auto j = nlohmann::json::parse(std::string(text, size));
  free(text);
  EXPECT_EQ(j["gpu_time"]["top_kernels"][0]["kernel"], "c");
  EXPECT_EQ(j["gpu_time"]["devices"][1]["busy_ns"], 2000);
  // and the page's table of kernels by GPU time
  rec_meta_for_page(path);
  RecordingReader again(path);
  auto page = html_report_data(again, HtmlReportOptions{});
  ASSERT_EQ(page["top"]["gpu_kernels"].size(), 3u);
  EXPECT_EQ(page["top"]["gpu_kernels"][0]["kernel"], "c");
  EXPECT_EQ(page["top"]["gpu_kernels"][0]["gpu_ms"], 0.002);
  EXPECT_EQ(page["top"]["gpu_devices"][0]["busy_pct"], 70.0);
  fs::remove_all(dir);
}

// Duty-cycled GPU time: busy counts what ran inside the slices collected (a kernel across a
// slice's end, its part inside), against the time collected, not the time between; each kernel
// carries the Python stack its launches were made from (the cuda layer's launch calls).
TEST(GpuTimeReport, DutyCycledBusyCountsTheSlicesAndKernelsCarryTheirPythonStack) {
  fs::path dir = fresh_dir("duty");
  std::string path = (dir / "run.eacgm.db").string();
  {
    RecordingWriter w(path, false);
    w.add(GpuSliceRow{0, 1000, 9});
    w.add(GpuSliceRow{10'000, 1000, 9});
    auto kernel = [&](uint64_t ts, uint64_t dur) {
      GpuActivityRow r;
      r.ts_ns = ts, r.dur_ns = dur, r.pid = 9, r.kind = "kernel", r.name = "axpy";
      w.add(r);
    };
    kernel(0, 500);
    kernel(10'000, 200);
    kernel(10'900, 200);  // 100 ns of it after the slice's end
    for (uint64_t ts : {0, 10'000, 10'900}) {
      CudaCallRow c;
      c.ts_ns = ts, c.dur_ns = 5, c.pid = 9, c.tid = 10, c.name = "cudaLaunchKernel";
      c.kernel = "axpy", c.is_launch = true, c.grid[0] = c.grid[1] = c.grid[2] = 1;
      c.py_stack = 5;
      w.add(c);
    }
    w.add(PythonStackFrameRow{5, 0, "forward", "model.py", 42});
    w.add(PythonStackFrameRow{5, 1, "step", "train.py", 7});
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  GpuTimeSummary s = gpu_time_summary(rec, 5);
  EXPECT_EQ(s.slices, 2u);
  EXPECT_EQ(s.collected_ns, 2000u);
  EXPECT_EQ(s.sliced_span_ns, 11'000u);
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].busy_ns, 500u + 200u + 100u);
  EXPECT_EQ(s.devices[0].span_ns, 2000u);
  ASSERT_EQ(s.kernels.size(), 1u);
  EXPECT_EQ(s.kernels[0].python_stack,
            (std::vector<std::string>{"forward (model.py:42)", "step (train.py:7)"}));
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  print_gpu_time(s, out);
  fclose(out);
  std::string report(text, size);
  free(text);
  EXPECT_NE(report.find("duty-cycled (EACGM_GPUTIME_DUTY): collected in 2 slices, 2.0 us of "
                        "11.0 us"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("device 0: busy 800 ns of 2.0 us collected (40.0%)"), std::string::npos)
      << report;
  EXPECT_NE(report.find("from forward (model.py:42) < step (train.py:7)"), std::string::npos)
      << report;
  auto j = gpu_time_json(s);
  EXPECT_EQ(j["duty_cycled"]["collected_ns"], 2000);
  EXPECT_EQ(j["top_kernels"][0]["python_stack"][1], "step (train.py:7)");
  fs::remove_all(dir);
}

// The timeline: each kernel on its GPU stream's own track, with the flow arrow from the runtime
// launch call (eacgm's uprobe row) that CUPTI's launch record lies in (same thread, inside its
// span); a kernel whose launch eacgm did not see gets no arrow.
TEST(GpuTimeExport, KernelsOnStreamTracksWithArrowsFromTheirLaunchCalls) {
  fs::path dir = fresh_dir("export");
  std::string path = (dir / "run.eacgm.db").string();
  {
    RecordingWriter w(path, false);
    w.set_meta("monotonic_to_realtime_ns", "1000000000000");
    CudaCallRow launch;
    launch.ts_ns = 10'000, launch.dur_ns = 4'000, launch.pid = 9, launch.tid = 10;
    launch.name = "cudaLaunchKernel", launch.is_launch = true, launch.kernel = "axpy";
    w.add(launch);
    GpuActivityRow l;
    l.ts_ns = 11'000, l.dur_ns = 2'000, l.pid = 9, l.tid = 10, l.kind = "launch";
    l.correlation = 5, l.name = "cudaLaunchKernel";
    w.add(l);
    GpuActivityRow k;
    k.ts_ns = 20'000, k.dur_ns = 3'000, k.pid = 9, k.kind = "kernel", k.name = "axpy";
    k.correlation = 5, k.device = 0, k.stream = 7;
    w.add(k);
    GpuActivityRow orphan = k;  // launched before eacgm attached: no launch row
    orphan.ts_ns = 30'000, orphan.correlation = 6;
    w.add(orphan);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  auto trace = chrome_trace(path, dir);
  std::map<std::string, int> phases;
  std::string gpu_thread;
  int64_t gpu_tid = -1;
  nlohmann::json start, finish;
  for (const auto& e : trace["traceEvents"]) {
    ++phases[e["ph"].get<std::string>()];
    if (e["ph"] == "M" && e["name"] == "thread_name" &&
        e["args"]["name"].get<std::string>().starts_with("GPU"))
      gpu_thread = e["args"]["name"], gpu_tid = e["tid"];
    if (e["ph"] == "s") start = e;
    if (e["ph"] == "f") finish = e;
  }
  EXPECT_EQ(gpu_thread, "GPU 0 stream 7");
  EXPECT_EQ(phases["s"], 1);
  EXPECT_EQ(phases["f"], 1);
  EXPECT_EQ(start["id"], finish["id"]);
  EXPECT_EQ(start["tid"], 10);
  EXPECT_EQ(finish["tid"], gpu_tid);
  EXPECT_EQ(finish["ts"], 1000000020.0);  // us: the kernel's start on the GPU
  int kernels = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == gpu_tid && e["name"] == "axpy") ++kernels;
  EXPECT_EQ(kernels, 2);
  fs::remove_all(dir);
}

// A library with its own copy of the CUDA runtime (cuBLASLt links it statically) launches
// through it: CUPTI records a runtime launch (cudaLaunchKernelExC) that eacgm's uprobes on
// libcudart never see, and eacgm's row is the driver launch inside it (cuLaunchKernelEx), which
// begins a little after CUPTI's record (0.7-22 us on an H200). That driver row starts the
// arrow; a driver launch inside a runtime launch row is that row's and starts none; a record
// more than 50 us before a driver row is not its.
TEST(GpuTimeExport, ADriverLaunchWithoutARuntimeCallAroundItStartsTheArrow) {
  fs::path dir = fresh_dir("driver");
  std::string path = (dir / "run.eacgm.db").string();
  {
    RecordingWriter w(path, false);
    w.set_meta("monotonic_to_realtime_ns", "1000000000000");
    auto call = [&](uint64_t ts, uint64_t dur, const char* name) {
      CudaCallRow c;
      c.ts_ns = ts, c.dur_ns = dur, c.pid = 9, c.tid = 10, c.name = name, c.is_launch = true;
      c.kernel = "gemm";
      w.add(c);
    };
    auto record = [&](uint64_t ts, uint32_t correlation, uint64_t kernel_at) {
      GpuActivityRow l;
      l.ts_ns = ts, l.dur_ns = 5'000, l.pid = 9, l.tid = 10, l.kind = "launch";
      l.correlation = correlation, l.name = "cudaLaunchKernelExC";
      w.add(l);
      GpuActivityRow k;
      k.ts_ns = kernel_at, k.dur_ns = 1'000, k.pid = 9, k.kind = "kernel", k.name = "gemm";
      k.correlation = correlation, k.device = 0, k.stream = 7;
      w.add(k);
    };
    record(100'000, 1, 200'000);  // cuBLASLt's: its driver call 1.5 us later
    call(101'500, 3'000, "cuLaunchKernelEx");
    record(300'000, 2, 400'000);  // a runtime launch eacgm saw, and the driver call inside it
    call(299'000, 4'000, "cudaLaunchKernel");
    call(300'500, 2'000, "cuLaunchKernel");
    record(500'000, 3, 600'000);  // a driver call 80 us after a record: not its launch
    call(580'000, 3'000, "cuLaunchKernelEx");
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  auto trace = chrome_trace(path, dir);
  std::map<uint64_t, std::string> started;  // flow id -> the slice that starts it
  std::map<std::string, int> slices_with_arrows;
  std::set<uint64_t> finished;
  // an arrow's start is bound to the slice it lies in on the launching thread (ph "s" at the
  // slice's start)
  std::map<double, std::string> on_thread;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == 10) on_thread[e["ts"].get<double>()] = e["name"];
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "s") ++slices_with_arrows[on_thread[e["ts"].get<double>()]];
    if (e["ph"] == "f") finished.insert(e["id"].get<uint64_t>());
  }
  EXPECT_EQ(slices_with_arrows, (std::map<std::string, int>{{"cuLaunchKernelEx", 1},
                                                            {"cudaLaunchKernel", 1}}))
      << trace.dump();
  EXPECT_EQ(finished.size(), 2u);
  fs::remove_all(dir);
}

// Duty-cycled GPU time: each slice collected on a lane of its own under its process, so that
// the gaps between kernel bursts read as not collected.
TEST(GpuTimeExport, DutyCycleSlicesOnALaneOfTheirOwn) {
  fs::path dir = fresh_dir("slices");
  std::string path = (dir / "run.eacgm.db").string();
  {
    RecordingWriter w(path, false);
    w.set_meta("monotonic_to_realtime_ns", "1000000000000");
    w.add(GpuSliceRow{10'000, 2'000, 9});
    w.add(GpuSliceRow{50'000, 2'000, 9});
    GpuActivityRow k;
    k.ts_ns = 10'500, k.dur_ns = 100, k.pid = 9, k.kind = "kernel", k.name = "axpy";
    w.add(k);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  auto trace = chrome_trace(path, dir);
  int64_t lane = -1;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" &&
        e["args"]["name"] == "GPU time collected (EACGM_GPUTIME_DUTY)")
      lane = e["tid"];
  ASSERT_NE(lane, -1) << trace.dump();
  std::vector<std::pair<double, double>> on_lane;  // (ts, dur) in us
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == lane) {
      EXPECT_EQ(e["pid"], 9);
      EXPECT_EQ(e["name"], "collecting");
      on_lane.emplace_back(e["ts"].get<double>(), e["dur"].get<double>());
    }
  EXPECT_EQ(on_lane, (std::vector<std::pair<double, double>>{{1000000010.0, 2.0},
                                                              {1000000050.0, 2.0}}));
  fs::remove_all(dir);
}

// NCCL's operations on the GPU: a track per communicator under the process, each operation with
// the arrow from the NCCL call on its thread whose span holds its enqueue; one whose call eacgm
// did not see gets none, one without a GPU time no slice.
TEST(GpuTimeExport, NcclOperationsOnTheirCommunicatorsTrackWithArrowsFromTheirCalls) {
  fs::path dir = fresh_dir("nccl");
  std::string path = (dir / "run.eacgm.db").string();
  {
    RecordingWriter w(path, false);
    w.set_meta("monotonic_to_realtime_ns", "1000000000000");
    CommCallRow call;
    call.ts_ns = 10'000, call.dur_ns = 4'000, call.pid = 9, call.tid = 10;
    call.name = "ncclAllReduce", call.rank = 0, call.nranks = 2;
    w.add(call);
    GpuCollectiveRow g;
    g.ts_ns = 12'000, g.dur_ns = 30'000, g.pid = 9, g.tid = 10, g.name = "ncclAllReduce";
    g.comm_hash = 0xabcdef123456ull, g.seq = 0, g.rank = 0, g.nranks = 2, g.algo = "RING";
    g.has_gpu_time = true, g.gpu_start_ns = 20'000, g.gpu_dur_ns = 5'000;
    w.add(g);
    GpuCollectiveRow uncalled = g;  // its call not traced: no arrow
    uncalled.ts_ns = 50'000, uncalled.seq = 1, uncalled.gpu_start_ns = 60'000;
    w.add(uncalled);
    GpuCollectiveRow untimed = g;  // no channel reported: no slice
    untimed.ts_ns = 80'000, untimed.seq = 2, untimed.has_gpu_time = false;
    w.add(untimed);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  auto trace = chrome_trace(path, dir);
  int64_t lane = -1;
  std::map<std::string, int> phases;
  nlohmann::json start, finish;
  std::vector<double> on_lane;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" &&
        e["args"]["name"] == "NCCL comm 123456 on the GPU")
      lane = e["tid"];
  ASSERT_NE(lane, -1) << trace.dump();
  for (const auto& e : trace["traceEvents"]) {
    ++phases[e["ph"].get<std::string>()];
    if (e["ph"] == "s") start = e;
    if (e["ph"] == "f") finish = e;
    if (e["ph"] == "X" && e["tid"] == lane) on_lane.push_back(e["ts"].get<double>());
  }
  EXPECT_EQ(on_lane, (std::vector<double>{1000000020.0, 1000000060.0}));
  EXPECT_EQ(phases["s"], 1);
  EXPECT_EQ(phases["f"], 1);
  EXPECT_EQ(start["id"], finish["id"]);
  EXPECT_EQ(start["tid"], 10);
  EXPECT_EQ(finish["tid"], lane);
  EXPECT_EQ(finish["ts"], 1000000020.0);
  // and Perfetto's format takes the same
  export_recording(path, (dir / "run.pftrace").string(), ExportFormat::Perfetto, false);
  EXPECT_GT(fs::file_size(dir / "run.pftrace"), 0u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace eacgm

// A recorder killed outright leaves its injection library's folder: the next one removes the
// folders of recorders gone, and nothing else (a running recorder's, a folder holding anything
// but the library, a link, another user's name pattern).
TEST(GpuTimeLibraryFile, FoldersOfRecordersGoneAreRemovedAndNothingElse) {
  namespace fs = std::filesystem;
  fs::path tmp = fs::temp_directory_path() / ("eacgm-stale-test-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  pid_t gone = fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) _exit(0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  auto make = [&](const std::string& name, bool library, const char* extra = nullptr) {
    fs::create_directory(tmp / name);
    if (library) std::ofstream(tmp / name / "libeacgm_cupti.so") << "ELF";
    if (extra) std::ofstream(tmp / name / extra) << "x";
  };
  std::string dead = std::to_string(gone), alive = std::to_string(getpid());
  make("eacgm-gputime-" + dead + "-aaaaaa", true);            // a killed recorder's: removed
  make("eacgm-gputime-" + dead + "-bbbbbb", false);           // empty: removed
  make("eacgm-gputime-" + dead + "-cccccc", true, "notes");   // something else in it: kept
  make("eacgm-gputime-" + alive + "-dddddd", true);           // a running recorder's: kept
  make("eacgm-gputime-eeeeee", true);                         // no pid (older eacgm): kept
  fs::create_directory(tmp / "elsewhere");
  fs::create_directory_symlink(tmp / "elsewhere", tmp / ("eacgm-gputime-" + dead + "-ffffff"));
  EXPECT_EQ(eacgm::gputime::remove_stale_library_dirs(tmp.string()), 2u);
  EXPECT_FALSE(fs::exists(tmp / ("eacgm-gputime-" + dead + "-aaaaaa")));
  EXPECT_FALSE(fs::exists(tmp / ("eacgm-gputime-" + dead + "-bbbbbb")));
  EXPECT_TRUE(fs::exists(tmp / ("eacgm-gputime-" + dead + "-cccccc") / "libeacgm_cupti.so"));
  EXPECT_TRUE(fs::exists(tmp / ("eacgm-gputime-" + alive + "-dddddd") / "libeacgm_cupti.so"));
  EXPECT_TRUE(fs::exists(tmp / "eacgm-gputime-eeeeee" / "libeacgm_cupti.so"));
  EXPECT_TRUE(fs::is_symlink(tmp / ("eacgm-gputime-" + dead + "-ffffff")));
  EXPECT_TRUE(fs::exists(tmp / "elsewhere"));
  EXPECT_EQ(eacgm::gputime::remove_stale_library_dirs((tmp / "none").string()), 0u)
      << "a missing folder: nothing to do";
  fs::remove_all(tmp);
}
