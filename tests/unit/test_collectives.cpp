// Collectives lined up across ranks: how long each rank waited for the last to join, and how
// much of that the late rank straggled (against what its previous collective finishing late,
// or its wait for a CPU, explain); the straggler found by detect on a recording made here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fmt/format.h>
#include <filesystem>
#include <memory>
#include <random>
#include <set>

#include "agent/node_collectives.h"
#include "detect/call_context.h"
#include "detect/detector.h"
#include "detect/features.h"
#include "detect/young_stragglers.h"
#include "report/collectives.h"
#include "store/reader.h"
#include "store/sqlite_util.h"
#include "store/recording.h"
#include "util/error.h"

namespace eacgm::detect {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kStart = 1'000'000'000'000;
constexpr uint64_t ms = 1'000'000, us = 1'000;

std::string temp_path(const char* what) {
  return (fs::temp_directory_path() /
          (std::string("eacgm_") + what + "_" + std::to_string(getpid()) + ".eacgm.db"))
      .string();
}

// Two ranks (pids 100 and 200, threads of the same ids) in a synchronous loop over one
// communicator: each computes for `gap` after its previous collective completed, then joins;
// the instance completes `transfer` after the last rank joined, `extra` later on some ranks.
class Loop {
 public:
  explicit Loop(RecordingWriter& w) : w_(w) {}
  struct Step {
    uint64_t gap[2] = {300 * us, 300 * us};
    uint64_t cpu[2] = {0, 0};    // of which waiting for a CPU
    uint64_t extra[2] = {0, 0};  // completes this much later on that rank
    const char* name = "gloo:all_reduce";
  };
  // Returns each rank's start.
  std::array<uint64_t, 2> step(const Step& s) {
    std::array<uint64_t, 2> start{};
    for (int r = 0; r < 2; ++r) {
      start[r] = end_[r] + s.gap[r];
      run_delay_[r] += s.cpu[r];
    }
    uint64_t joined = std::max(start[0], start[1]);
    for (int r = 0; r < 2; ++r) {
      CommCallRow c;
      c.ts_ns = start[r];
      end_[r] = joined + 200 * us + s.extra[r];
      c.dur_ns = end_[r] - start[r];
      c.pid = c.tid = r == 0 ? 100 : 200;
      c.name = s.name;
      c.bytes = 65536;
      c.comm = r == 0 ? 0xa0 : 0xb0;
      c.rank = r;
      c.nranks = 2;
      c.entry_run_delay_ns = int64_t(run_delay_[r]);
      w_.add(c);
    }
    return start;
  }

 private:
  RecordingWriter& w_;
  uint64_t end_[2] = {kStart, kStart};
  uint64_t run_delay_[2] = {5 * ms, 9 * ms};
};

TEST(Collectives, TellStragglingFromCarriedLatenessAndCpuWait) {
  std::string path = temp_path("collectives");
  std::array<uint64_t, 2> straggled{}, carried{}, starved{}, mixed{}, after_broadcast{};
  {
    RecordingWriter w(path, true);
    Loop loop(w);
    for (int k = 0; k < 40; ++k) {
      Loop::Step s;
      if (k == 5) s.gap[1] += 10 * ms;  // rank 1 straggles
      if (k == 9) s.extra[1] = 3 * ms;  // instance 9 completes 3 ms later on rank 1
      if (k == 15) s.gap[1] += 4 * ms, s.cpu[1] = 4 * ms;  // rank 1 kept off a CPU
      // 6 ms late, 2 ms of it waiting for a CPU while rank 0 waited 1 ms
      if (k == 20) s.gap[1] += 6 * ms, s.cpu[1] = 2 * ms, s.cpu[0] = 1 * ms;
      if (k == 25) {  // a broadcast in between completes 2 ms later on rank 1
        Loop::Step b;
        b.name = "gloo:broadcast";
        b.extra[1] = 2 * ms;
        loop.step(b);
      }
      auto start = loop.step(s);
      if (k == 5) straggled = start;
      if (k == 10) carried = start;
      if (k == 15) starved = start;
      if (k == 20) mixed = start;
      if (k == 25) after_broadcast = start;
    }
    CommCallRow send;  // point-to-point: not a collective, not lined up
    send.ts_ns = kStart + 10 * ms;
    send.pid = send.tid = 100;
    send.name = "gloo:send";
    send.comm = 0xa0, send.rank = 0, send.nranks = 2;
    w.add(send);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  Collectives c(rec);
  EXPECT_TRUE(c.notes().empty()) << c.notes().front();
  EXPECT_EQ(c.matched_instances(), 41u);

  const PeerWait* w = c.find(100, straggled[0]);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->wait_ns, 10 * ms);
  EXPECT_EQ(w->straggling_ns(), 10 * ms);
  EXPECT_EQ(w->last_rank, 1);
  EXPECT_EQ(w->last_pid, 200u);
  ASSERT_NE(c.find(200, straggled[1]), nullptr);
  EXPECT_EQ(c.find(200, straggled[1])->wait_ns, 0u) << "the last rank waits for nobody";

  w = c.find(100, carried[0]);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->wait_ns, 3 * ms);
  EXPECT_EQ(w->carried_ns, 3 * ms);
  EXPECT_EQ(w->straggling_ns(), 0u) << "late only because its previous one completed late";

  w = c.find(100, starved[0]);
  EXPECT_EQ(w->wait_ns, 4 * ms);
  EXPECT_EQ(w->cpu_ns, 4 * ms);
  EXPECT_EQ(w->straggling_ns(), 0u);

  w = c.find(100, mixed[0]);
  EXPECT_EQ(w->wait_ns, 6 * ms);
  EXPECT_EQ(w->cpu_ns, 1 * ms) << "2 ms waiting for a CPU, less the 1 ms rank 0 waited";
  EXPECT_EQ(w->straggling_ns(), 5 * ms);

  w = c.find(100, after_broadcast[0]);
  EXPECT_EQ(w->carried_ns, 2 * ms) << "the previous collective is the broadcast";
  EXPECT_EQ(w->straggling_ns(), 0u);

  auto anomaly = [](uint64_t ts, uint64_t dur) {
    Anomaly a;
    a.layer = "comm";
    a.name = "gloo:all_reduce";
    a.pid = 100;
    a.ts_ns = ts;
    a.dur_ns = dur;
    a.cause = "x";
    return a;
  };
  std::vector<Anomaly> found = {anomaly(straggled[0], 10 * ms + 200 * us),
                                anomaly(starved[0], 4 * ms + 200 * us),
                                anomaly(carried[0], 3 * ms + 200 * us),
                                anomaly(straggled[0] + 1, 10 * ms)};
  explain_waits(c, found);
  EXPECT_EQ(found[0].cause, "x; rank 1 (pid 200) joined 10.0 ms late (straggler)");
  EXPECT_EQ(found[1].cause,
            "x; rank 1 (pid 200) joined 4.0 ms late, kept off a CPU (CPU interference)");
  EXPECT_EQ(found[2].cause, "x") << "its collective was slow on the other rank, not late";
  EXPECT_EQ(found[3].cause, "x") << "no such call";

  // the report's section: the straggled instances (1 ms or more) by rank
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  print_collectives(c, out);
  std::fclose(out);
  std::string report(text, size);
  std::free(text);
  EXPECT_NE(report.find("rank 1 (pid 200): 2 (15.0 ms)"), std::string::npos) << report;
  EXPECT_NE(report.find("gloo:broadcast                   2         1"), std::string::npos)
      << report;
  fs::remove(path);
}

// The agent matches collectives as their rows come (as the calls end) by detect's rule: each
// call's peer wait is the one Collectives finds in the recording of the same calls, and a
// collective anomaly is explained alike ("straggling rank" for a duration mostly a straggler's).
TEST(Collectives, MatchedAsTheyComeAsInTheRecording) {
  std::string path = temp_path("matcher");
  {
    RecordingWriter w(path, true);
    Loop loop(w);
    for (int k = 0; k < 30; ++k) {
      Loop::Step s;
      if (k == 5) s.gap[1] += 10 * ms;
      if (k == 9) s.extra[1] = 3 * ms;
      if (k == 15) s.gap[1] += 4 * ms, s.cpu[1] = 4 * ms;
      if (k == 20) s.gap[0] += 6 * ms, s.cpu[0] = 2 * ms, s.cpu[1] = 1 * ms;
      if (k == 25) {
        Loop::Step b;
        b.name = "gloo:broadcast";
        b.extra[1] = 2 * ms;
        loop.step(b);
      }
      loop.step(s);
    }
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  Collectives c(rec);
  CollectiveMatcher m;
  size_t matched = 0;
  Anomaly straggled;
  rec.query("SELECT name, pid, tid, ts_ns, dur_ns, rank, nranks, comm, entry_run_delay_ns "
            "FROM comm_calls ORDER BY ts_ns + dur_ns",
            [&](Statement& st) {
              std::string name(st.text_at(0));
              CommCallRow r;
              r.name = name;
              r.pid = uint32_t(st.int_at(1)), r.tid = uint32_t(st.int_at(2));
              r.ts_ns = uint64_t(st.ns_at(3)), r.dur_ns = uint64_t(st.ns_at(4));
              r.rank = st.int_at(5), r.nranks = st.int_at(6), r.comm = uint64_t(st.int_at(7));
              r.entry_run_delay_ns = st.ns_at(8);
              for (const auto& inst : m.add(r)) {
                EXPECT_TRUE(inst.all_ranks);
                for (size_t i = 0; i < inst.calls.size(); ++i, ++matched) {
                  const PeerWait* want = c.find(inst.calls[i].pid, inst.calls[i].ts);
                  ASSERT_NE(want, nullptr);
                  const PeerWait& got = inst.waits[i];
                  EXPECT_EQ(got.wait_ns, want->wait_ns);
                  EXPECT_EQ(got.carried_ns, want->carried_ns);
                  EXPECT_EQ(got.cpu_ns, want->cpu_ns);
                  EXPECT_EQ(got.last_rank, want->last_rank);
                  EXPECT_EQ(got.last_pid, want->last_pid);
                  if (got.straggling_ns() == 10 * ms) {
                    straggled.layer = "comm", straggled.name = name;
                    straggled.cause = "straggling rank: " + name + " waited for a peer";
                    straggled.dur_ns = got.wait_ns + 200 * us;
                    explain_wait(got, " on host h", straggled);
                    // flagged for its own time (net of the wait): not the straggler's doing
                    Anomaly slow = straggled;
                    slow.cause = "slow collective: " + name;
                    explain_wait(got, " on host h", slow);
                    EXPECT_EQ(slow.cause, "slow collective: " + name);
                    // flagged for its wait, a tenth of a long call: still the straggler's
                    Anomaly tenth = straggled;
                    tenth.cause = "straggling rank: " + name + " waited for a peer";
                    tenth.dur_ns = 10 * got.wait_ns;
                    explain_wait(got, " on host h", tenth);
                    EXPECT_EQ(tenth.cause, straggled.cause);
                    EXPECT_EQ(tenth.late_pid, 200u);
                    // any other cause, under a quarter of the call: not named
                    Anomaly size = tenth;
                    size.cause = "unusual size: " + name;
                    size.late_pid = 0;
                    explain_wait(got, " on host h", size);
                    EXPECT_EQ(size.cause, "unusual size: " + name);
                  }
                }
              }
            });
  EXPECT_EQ(matched, 2 * c.matched_instances());
  EXPECT_EQ(straggled.cause,
            "straggling rank: gloo:all_reduce waited for a peer; rank 1 (pid 200 on host h) "
            "joined 10.0 ms late (straggler)");
  // and in fields, for the windows it held up (attribute_windows)
  EXPECT_EQ(straggled.late_rank, 1);
  EXPECT_EQ(straggled.late_pid, 200u);
  EXPECT_EQ(straggled.late_ns, 10 * ms);
  EXPECT_EQ(straggled.late_where, " on host h");
  fs::remove(path);
}

// A window flagged for slow collectives or slow operators names the straggler that held it up
// (the late rank of the collectives that waited within it, the most often late one); a window
// with another cause, or without such collectives, keeps its cause. (gpt_ddp.py's straggling
// phase: 13 "slow collectives" windows, each while rank 1 was named late in the calls.)
TEST(Collectives, AWindowHeldUpByAStragglerNamesIt) {
  auto call = [](uint64_t ts_ms, uint64_t dur_ms, int64_t rank, uint32_t pid, uint64_t late_ms) {
    Anomaly a;
    a.layer = "comm", a.name = "gloo:all_reduce", a.pid = 100;
    a.ts_ns = ts_ms * 1'000'000, a.dur_ns = dur_ms * 1'000'000;
    a.late_rank = rank, a.late_pid = pid, a.late_ns = late_ms * 1'000'000;
    a.late_where = " on host h";
    return a;
  };
  auto window = [](uint64_t ts_ms, const char* cause) {
    Anomaly w;
    w.layer = w.name = "window";
    w.ts_ns = ts_ms * 1'000'000, w.dur_ns = 1'000'000'000;
    w.cause = cause;
    return w;
  };
  std::vector<Anomaly> calls = {call(1'100, 50, 1, 201, 45), call(1'500, 60, 1, 201, 52),
                                call(1'980, 40, 0, 200, 30),  // ends in the next window
                                call(5'000, 50, 1, 201, 48)};
  Anomaly slow_op = calls[0];
  slow_op.late_pid = 0, slow_op.layer = "torch";  // a call anomaly that named no late rank
  calls.push_back(slow_op);
  std::vector<Anomaly> found = {window(1'000, "slow collectives"), window(2'000, "slow operators"),
                                window(1'000, "CPU interference"), window(3'000, "slow collectives")};
  attribute_windows(found, calls);
  EXPECT_EQ(found[0].cause,
            "slow collectives: rank 1 (pid 201 on host h) joined 52.0 ms late (straggler)");
  EXPECT_EQ(found[1].cause,
            "slow operators: rank 0 (pid 200 on host h) joined 30.0 ms late (straggler)");
  EXPECT_EQ(found[2].cause, "CPU interference");
  EXPECT_EQ(found[3].cause, "slow collectives");
  EXPECT_EQ(cause_kind(found[0].cause), "slow collectives");  // the metric's label unchanged
}

// NCCL with its kernels' times (gpu_collectives): two ranks whose host calls are on time, rank
// 1's GPU 8 ms late to the all-reduce of step 10 (busy with other work). Matched by the GPU's
// times, offline (Collectives) and online (NodeCollectives, the GPU rows coming in each
// process's batches after the calls), the waits belong to the API calls' rows, and the host
// calls of those processes are not matched by themselves.
TEST(Collectives, NcclOnTheGpuIsMatchedByItsKernelsOfflineAndOnline) {
  std::string path = temp_path("nccl_gpu");
  std::vector<CommCallRow> calls;
  std::vector<GpuCollectiveRow> gpu[2];
  for (int k = 0; k < 30; ++k) {
    uint64_t t = kStart + uint64_t(k) * 5 * ms;
    uint64_t start[2] = {t + 50 * us, t + 60 * us + (k == 10 ? 8 * ms : 0)};
    for (int r = 0; r < 2; ++r) {
      CommCallRow c;
      c.ts_ns = t + uint64_t(r) * 10 * us;
      c.dur_ns = 20 * us;
      c.pid = c.tid = r == 0 ? 100 : 200;
      c.name = "ncclAllReduce";
      c.comm = 0xc0 + uint64_t(r), c.comm_id = 77;
      c.rank = r, c.nranks = 2;
      c.entry_run_delay_ns = 0;
      calls.push_back(c);
      GpuCollectiveRow g;
      g.ts_ns = c.ts_ns + 5 * us;  // enqueued inside the call
      g.dur_ns = 2 * ms;
      g.pid = c.pid, g.tid = c.tid;
      g.name = "ncclAllReduce";
      g.comm_hash = 0xfeedull << 48, g.seq = k, g.rank = r, g.nranks = 2;
      g.has_gpu_time = true;
      g.gpu_start_ns = start[r];
      g.gpu_dur_ns = std::max(start[0], start[1]) + ms - start[r];
      gpu[r].push_back(g);
    }
  }
  {
    RecordingWriter w(path, true);
    for (const auto& c : calls) w.add(c);
    for (const auto& rank : gpu)
      for (const auto& g : rank) w.add(g);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  Collectives offline(rec);
  EXPECT_EQ(offline.matched_instances(), 30u);
  // online: the calls of steps 0-4 come before either process's first GPU batch (matched by
  // themselves, as host calls); from then on the calls come first and the GPU rows after, in
  // each process's batch
  NodeCollectives online([](uint32_t) { return std::string("job"); });
  for (size_t i = 0; i < 10; ++i) online.add(calls[i]);
  for (const auto& rank : gpu)
    for (size_t k = 0; k < 5; ++k) online.add(rank[k]);
  for (size_t i = 10; i < calls.size(); ++i) online.add(calls[i]);
  for (const auto& rank : gpu)
    for (size_t k = 5; k < rank.size(); ++k) online.add(rank[k]);
  for (const auto& c : calls) {
    const PeerWait* w = offline.find(c.pid, c.ts_ns);
    ASSERT_NE(w, nullptr) << c.pid << " " << c.ts_ns;
    EXPECT_TRUE(w->on_gpu);
    uint64_t k = (c.ts_ns - kStart) / (5 * ms);
    if (c.rank == 0) {
      EXPECT_EQ(w->last_rank, 1);
      EXPECT_EQ(w->wait_ns, k == 10 ? 8 * ms + 10 * us : 10 * us) << k;
      EXPECT_EQ(w->straggling_ns(), w->wait_ns) << k;
    } else {
      EXPECT_EQ(w->wait_ns, 0u);
    }
    const PeerWait* o = online.find(c.pid, c.ts_ns);
    ASSERT_NE(o, nullptr) << k;
    EXPECT_EQ(o->on_gpu, k >= 5) << k;
    if (k < 5) continue;
    EXPECT_EQ(o->wait_ns, w->wait_ns) << k;
    EXPECT_EQ(o->last_rank, w->last_rank) << k;
  }
  fs::remove(path);
}

// Four ranks of one communicator: ranks 2 and 3's first rows come after ranks 0 and 1's, and
// each instance still holds the same call of every rank. Two of four ranks on this node (the
// others elsewhere): matched among themselves once each has 3 calls waiting, and said so.
TEST(Collectives, MatchedAsTheyComeWhateverRanksComeFirstOrAreElsewhere) {
  auto row = [](int rank, int k, int nranks) {
    CommCallRow r;
    r.name = "gloo:all_reduce";
    r.pid = r.tid = uint32_t(100 + rank);
    r.ts_ns = kStart + uint64_t(k) * 10 * ms + uint64_t(rank) * us;
    r.dur_ns = 1 * ms;
    r.rank = rank, r.nranks = nranks, r.comm = 0xa0 + uint64_t(rank);
    return r;
  };
  CollectiveMatcher all;
  std::vector<CollectiveMatcher::Instance> got;
  auto add = [&](CollectiveMatcher& m, const CommCallRow& r) {
    for (auto& i : m.add(r)) got.push_back(std::move(i));
  };
  add(all, row(0, 0, 4)), add(all, row(1, 0, 4));
  EXPECT_TRUE(got.empty()) << "ranks 2 and 3 may be a moment behind";
  add(all, row(0, 1, 4)), add(all, row(1, 1, 4));
  add(all, row(2, 0, 4)), add(all, row(3, 0, 4));
  for (int k = 1; k < 5; ++k) add(all, row(2, k, 4)), add(all, row(3, k, 4));
  for (int k = 2; k < 5; ++k) add(all, row(0, k, 4)), add(all, row(1, k, 4));
  ASSERT_EQ(got.size(), 5u);
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_TRUE(got[k].all_ranks);
    ASSERT_EQ(got[k].calls.size(), 4u);
    for (const RankCall& c : got[k].calls)
      EXPECT_EQ((c.ts - kStart) / (10 * ms), k) << "rank " << c.rank << " in instance " << k;
    EXPECT_EQ(got[k].waits[0].wait_ns, 3 * us) << "rank 0 waited for rank 3";
  }
  got.clear();
  CollectiveMatcher half;
  for (int k = 0; k < 2; ++k) add(half, row(0, k, 4)), add(half, row(1, k, 4));
  EXPECT_TRUE(got.empty());
  add(half, row(0, 2, 4)), add(half, row(1, 2, 4));
  ASSERT_EQ(got.size(), 3u) << "3 calls waiting on each rank seen: the others are elsewhere";
  add(half, row(0, 3, 4)), add(half, row(1, 3, 4));
  ASSERT_EQ(got.size(), 4u);
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_FALSE(got[k].all_ranks);
    for (const RankCall& c : got[k].calls) EXPECT_EQ((c.ts - kStart) / (10 * ms), k);
  }
}

TEST(Collectives, SayWhyTheyCannotBeLinedUp) {
  std::string path = temp_path("collectives_unmatched");
  {
    RecordingWriter w(path, true);
    auto call = [&](const char* name, int rank, uint64_t ts, uint64_t dur) {
      CommCallRow c;
      c.ts_ns = kStart + ts;
      c.dur_ns = dur;
      c.pid = c.tid = 100 + uint32_t(rank);
      c.name = name;
      c.comm = 0xa0 + uint64_t(rank);
      c.rank = rank;
      c.nranks = 2;
      w.add(c);
    };
    call("gloo:all_gather", 0, 0, ms);  // rank 1 not traced
    for (int i = 0; i < 3; ++i) call("gloo:barrier", 0, 10 * ms * i, ms);
    for (int i = 0; i < 2; ++i) call("gloo:barrier", 1, 10 * ms * i, ms);  // one lost
    // rank 0 completes each before rank 1 joins: these are not the same instances
    for (int i = 0; i < 4; ++i) {
      call("gloo:reduce_scatter", 0, 100 * ms + 10 * ms * i, ms);
      call("gloo:reduce_scatter", 1, 100 * ms + 10 * ms * i + 5 * ms, ms);
    }
    // NCCL's host-side durations are enqueue times: no completion to check, lined up
    for (int i = 0; i < 4; ++i) {
      call("ncclAllReduce", 0, 200 * ms + 10 * ms * i, 10 * us);
      call("ncclAllReduce", 1, 200 * ms + 10 * ms * i + 2 * ms, 10 * us);
    }
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  Collectives c(rec);
  std::set<std::string> notes(c.notes().begin(), c.notes().end());
  EXPECT_EQ(notes, (std::set<std::string>{
                       "gloo:all_gather: 1 of its 2 ranks traced",
                       "gloo:barrier: the ranks made different numbers of calls (3, 2; calls "
                       "lost or a rank stopped early), instances cannot be lined up",
                       "gloo:reduce_scatter: 4 of 4 instances end on one rank before another "
                       "joined them (calls lost?), instances cannot be lined up"}));
  EXPECT_EQ(c.matched_instances(), 4u);
  ASSERT_NE(c.find(100, kStart + 200 * ms), nullptr);
  EXPECT_EQ(c.find(100, kStart + 200 * ms)->wait_ns, 2 * ms);
  EXPECT_EQ(c.find(100, kStart + 100 * ms), nullptr);
  fs::remove(path);
}

// A damaged recording (found by fuzz_recording): a collective claiming 2^40 ranks is one more
// that cannot be lined up, not a vector of 2^40 ranks; a call at 2^62 ns is read as such (its
// end does not overflow), and the windows detect would need from the recording's start to it
// are refused with a line that names the file, not allocated.
TEST(Collectives, ADamagedRecordingIsANoteOrAClearError) {
  std::string path = temp_path("collectives_damaged");
  {
    RecordingWriter w(path, true);
    w.set_meta("start_monotonic_ns", std::to_string(kStart));
    w.set_meta("end_monotonic_ns", std::to_string(uint64_t(1) << 62));
    CommCallRow c;
    c.ts_ns = kStart;
    c.dur_ns = ms;
    c.pid = c.tid = 100;
    c.name = "gloo:all_gather";
    c.rank = 0;
    c.nranks = int64_t(1) << 40;
    w.add(c);
    c.ts_ns = uint64_t(1) << 62;
    c.dur_ns = uint64_t(1) << 62;
    c.name = "gloo:broadcast";
    c.nranks = 2;
    w.add(c);
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  std::unique_ptr<Collectives> c;
  ASSERT_NO_THROW(c = std::make_unique<Collectives>(rec));
  std::set<std::string> notes(c->notes().begin(), c->notes().end());
  EXPECT_EQ(notes, (std::set<std::string>{"gloo:all_gather: 1 of its 1099511627776 ranks traced",
                                          "gloo:broadcast: 1 of its 2 ranks traced"}));
  try {
    window_features(rec, 100 * ms);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pass a larger --window"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

// Two communicators of two ranks each in one recording (data- and tensor-parallel groups of
// equal size): without identities their streams cannot be told apart; with them (NCCL's unique
// ids), each is lined up on its own and reported under its identity; the per-rank summary
// says who waited and who was last.
TEST(Collectives, CommunicatorsOfOneSizeAreToldApartByTheirIdentity) {
  for (bool identified : {false, true}) {
    std::string path = temp_path("collectives_identity");
    {
      RecordingWriter w(path, true);
      // ranks 0-1 of comm A (pids 100, 101), ranks 0-1 of comm B (pids 100, 102)
      auto call = [&](uint32_t pid, uint64_t comm, uint64_t id, int rank, uint64_t ts) {
        CommCallRow c;
        c.ts_ns = kStart + ts;
        c.dur_ns = 10 * us;
        c.pid = c.tid = pid;
        c.name = "ncclAllReduce";
        c.comm = comm;
        c.comm_id = identified ? id : 0;
        c.rank = rank;
        c.nranks = 2;
        w.add(c);
      };
      for (int i = 0; i < 5; ++i) {
        uint64_t t = 10 * ms * uint64_t(i);
        call(100, 0xa0, 0x111111ULL, 0, t);
        call(101, 0xa8, 0x111111ULL, 1, t + 3 * ms);  // rank 1 of A joins 3 ms late
        call(100, 0xb0, 0x222222ULL, 0, t + 5 * ms);
        call(102, 0xb8, 0x222222ULL, 1, t + 5 * ms + 1 * ms);
      }
      w.flush();
      ASSERT_EQ(w.close(), "");
    }
    RecordingReader rec(path);
    Collectives c(rec);
    if (!identified) {
      EXPECT_EQ(c.matched_instances(), 0u);
      ASSERT_EQ(c.notes().size(), 1u);
      EXPECT_NE(c.notes()[0].find("4 streams of calls for 2 ranks"), std::string::npos);
    } else {
      EXPECT_TRUE(c.notes().empty());
      EXPECT_EQ(c.matched_instances(), 10u);
      std::set<std::string> names;
      for (const auto& [key, v] : c.instances()) names.insert(key.first);
      EXPECT_EQ(names, (std::set<std::string>{"ncclAllReduce [comm 111111]",
                                              "ncclAllReduce [comm 222222]"}));
      ASSERT_NE(c.find(100, kStart), nullptr);
      EXPECT_EQ(c.find(100, kStart)->wait_ns, 3 * ms);
      EXPECT_EQ(c.find(100, kStart + 5 * ms)->wait_ns, 1 * ms);
      const auto& a = c.rank_waits().at({"ncclAllReduce [comm 111111]", 2});
      EXPECT_EQ(a[0].pid, 100u);
      EXPECT_EQ(a[0].calls, 5u);
      EXPECT_EQ(a[0].waited_ns, 15 * ms);
      EXPECT_EQ(a[1].pid, 101u);
      EXPECT_EQ(a[1].joined_last, 5u);
      EXPECT_EQ(a[1].waited_ns, 0u);
      char* text = nullptr;
      size_t size = 0;
      FILE* out = open_memstream(&text, &size);
      print_rank_waits(c, out);
      fclose(out);
      std::string printed(text, size);
      free(text);
      EXPECT_NE(printed.find("ncclAllReduce [comm 111111] per rank"), std::string::npos)
          << printed;
    }
    fs::remove(path);
  }
}

// c10d process groups have no identity in the recording, but their calls carry PyTorch's
// sequence numbers (the same on every rank of a group, from a start drawn at random per
// group): two groups of two ranks are told apart by them, and a call lost on one rank costs
// its instance only.
TEST(Collectives, ProcessGroupsAreToldApartByTheirSequenceNumbers) {
  std::string path = temp_path("collectives_sequence");
  {
    RecordingWriter w(path, true);
    auto call = [&](uint32_t pid, uint64_t pg, int64_t seq, int rank, uint64_t ts) {
      CommCallRow c;
      c.ts_ns = kStart + ts;
      c.dur_ns = 4 * ms - (ts % (10 * ms));  // every instance completes 4 ms into its step
      c.pid = c.tid = pid;
      c.name = "gloo:all_reduce";
      c.comm = pg;
      c.seq = seq;
      c.rank = rank;
      c.nranks = 2;
      w.add(c);
    };
    for (int64_t i = 0; i < 6; ++i) {
      uint64_t t = 10 * ms * uint64_t(i);
      call(100, 0xa0, 1804289384 + i, 0, t);
      if (i != 2) call(101, 0xa8, 1804289384 + i, 1, t + 2 * ms);  // lost on rank 1
      call(100, 0xb0, 846930887 + i, 0, t + 3 * ms);
      call(102, 0xb8, 846930887 + i, 1, t + 3 * ms + 500 * us);
    }
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  Collectives c(rec);
  std::set<std::string> names;
  for (const auto& [key, v] : c.instances()) names.insert(key.first + " " + std::to_string(v.size()));
  EXPECT_EQ(names, (std::set<std::string>{
                       fmt::format("gloo:all_reduce [comm {:06x}] 5", 1804289384 & 0xffffff),
                       fmt::format("gloo:all_reduce [comm {:06x}] 6", 846930887 & 0xffffff)}));
  ASSERT_EQ(c.notes().size(), 1u);
  EXPECT_NE(c.notes()[0].find("1 calls whose instance is not on every rank"), std::string::npos)
      << c.notes()[0];
  ASSERT_NE(c.find(100, kStart + 30 * ms), nullptr);  // the instance after the lost call
  EXPECT_EQ(c.find(100, kStart + 30 * ms)->wait_ns, 2 * ms);
  EXPECT_EQ(c.find(100, kStart + 20 * ms), nullptr);  // the lost call's instance
  EXPECT_EQ(c.find(100, kStart + 23 * ms)->wait_ns, 500 * us);
  fs::remove(path);
}

TEST(Collectives, WhatEveryRankJoins) {
  for (const char* yes : {"gloo:all_reduce", "gloo:barrier", "ncclAllGather", "ncclBcast",
                          "gloo:all_to_all", "ncclReduceScatter"})
    EXPECT_TRUE(is_collective(yes)) << yes;
  for (const char* no : {"gloo:send", "gloo:recv", "ncclSend", "ncclRecv", "ncclGroupStart",
                         "ncclCommInitRank", "ncclCommSplit"})
    EXPECT_FALSE(is_collective(no)) << no;
}

// The detector on a 2-rank loop with noise: the instances where rank 1 straggled (10 ms) are
// flagged on rank 0, named as such; those where rank 1 was as late for want of a CPU, or because
// its previous collective completed late there, are not. That previous one is: a slow
// collective on rank 1.
TEST(Collectives, DetectFindsTheStragglerAndOnlyIt) {
  std::string path = temp_path("collectives_detect");
  std::set<uint64_t> straggled, slow;
  uint64_t half = 0;
  {
    RecordingWriter w(path, true);
    Loop loop(w);
    std::mt19937_64 rng(3);
    std::lognormal_distribution<double> gap(std::log(300e3), 0.2);
    const int steps = 4000;
    for (int k = 0; k < steps; ++k) {
      Loop::Step s;
      s.gap[0] = uint64_t(gap(rng)), s.gap[1] = uint64_t(gap(rng));
      bool second_half = k > steps / 2;
      if (second_half && k % 300 == 0) s.gap[1] += 10 * ms;
      if (second_half && k % 300 == 100) s.gap[1] += 10 * ms, s.cpu[1] = 10 * ms;
      if (second_half && k % 300 == 199) s.extra[1] = 10 * ms;
      auto start = loop.step(s);
      if (k == steps / 2) half = start[0];
      if (second_half && k % 300 == 0) straggled.insert(start[0]);
      if (second_half && k % 300 == 199) slow.insert(start[1]);
    }
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  Collectives c(rec);
  auto tables = call_features(rec, &c);
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].feature_names,
            (std::vector<std::string>{"log_duration_us", "log2_bytes", "log_straggler_wait_10us"}));
  DetectOptions opts;
  auto model = train_detector(tables, half, opts, nullptr);
  auto found = find_anomalies(model, tables, half, 3, 1000);
  explain_waits(c, found);
  std::set<uint64_t> waited, slowed;
  for (const auto& a : found) {
    if (a.pid == 100) {
      waited.insert(a.ts_ns);
      EXPECT_EQ(a.cause.substr(0, a.cause.find(';')),
                "straggling rank: gloo:all_reduce waited for a peer");
      // 10 ms, give or take the difference of the two ranks' usual gaps
      double late_ms = 0;
      ASSERT_EQ(std::sscanf(a.cause.c_str(),
                            "straggling rank: gloo:all_reduce waited for a peer; rank 1 (pid 200) "
                            "joined %lf ms late (straggler)",
                            &late_ms),
                1)
          << a.cause;
      EXPECT_NEAR(late_ms, 10, 0.5) << a.cause;
    } else {
      slowed.insert(a.ts_ns);
      EXPECT_EQ(a.cause, "slow collective: gloo:all_reduce");
    }
  }
  EXPECT_EQ(waited, straggled);
  EXPECT_EQ(slowed, slow);
  fs::remove(path);
}

// A rank late from the job's start, as detect judges a recording on its own first half: each
// operation's model would learn its late joins as the job's normal (1% of the steps, in both
// halves), and find none. Judged by the job's own collectives where no model judges them (the
// training calls: young_stragglers.h, as the agent) and left out of training, the late joins of
// the first half are named by that rule and those of the second by the model: every late step,
// and nothing else.
TEST(Collectives, DetectNamesARankLateFromTheStartInBothHalves) {
  std::string path = temp_path("collectives_young");
  std::set<uint64_t> late;
  {
    RecordingWriter w(path, true);
    Loop loop(w);
    std::mt19937_64 rng(5);
    std::lognormal_distribution<double> gap(std::log(3e6), 0.2);
    for (int k = 0; k < 3000; ++k) {
      Loop::Step s;
      s.gap[0] = uint64_t(gap(rng)), s.gap[1] = uint64_t(gap(rng));
      bool is_late = k >= 200 && k % 60 == 30;  // (0.8% of the rows, beyond the 0.5% tail)
      if (is_late) s.gap[1] += 30 * ms;
      auto start = loop.step(s);
      if (is_late) late.insert(start[0]);
    }
    w.flush();
    ASSERT_EQ(w.close(), "");
  }
  RecordingReader rec(path);
  Collectives c(rec);
  auto tables = call_features(rec, &c);
  ASSERT_EQ(tables.size(), 1u);
  auto split = split_by_count(tables, 0.5);
  const uint64_t half = split.at(tables[0].group);
  auto judge = [&](bool leave_out) {
    std::vector<FeatureTable> own = tables;
    YoungStragglers rule;
    auto found = young_stragglers(own, c, rule, [&](const FeatureTable& t, size_t i) {
      return t.ts_ns[i] < half;
    });
    if (!leave_out) own[0].left_out.clear();
    size_t young = found.size();
    for (size_t k = 0; k < young; ++k) {
      EXPECT_LT(found[k].ts_ns, half);
      EXPECT_EQ(own[0].left_out.size(), leave_out ? own[0].ts_ns.size() : 0u);
      if (leave_out) EXPECT_EQ(own[0].left_out.at(found[k].row), 1) << found[k].ts_ns;
      EXPECT_EQ(own[0].ts_ns.at(found[k].row), found[k].ts_ns);
    }
    auto model = train_detector(own, split, DetectOptions{}, nullptr);
    auto scored = find_anomalies(model, own, split, 3, 1000, nullptr);
    found.insert(found.end(), scored.begin(), scored.end());
    explain_waits(c, found);
    std::set<uint64_t> at;
    for (const auto& a : found) {
      at.insert(a.ts_ns);
      EXPECT_EQ(a.pid, 100u);
      EXPECT_EQ(a.late_pid, 200u) << a.cause;
    }
    return std::make_pair(at, young);
  };
  auto [named, young] = judge(true);
  EXPECT_EQ(named, late);
  EXPECT_GE(young, 10u) << "the first half's late joins, named by the job's own collectives";
  // learnt with its late joins, the model finds few of the second half's
  auto [learnt, young_too] = judge(false);
  EXPECT_LT(learnt.size() - young_too, (late.size() - young) / 2);
  fs::remove(path);
}

}  // namespace
}  // namespace eacgm::detect
