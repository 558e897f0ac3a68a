// libeacgm_cupti.so as NCCL's profiler plugin (src/gputime/nccl_profiler.cpp), driven through
// its ncclProfiler_v5 entry points as NCCL's two threads can call them: the operation's stop
// before or after its channels, channels NCCL never reports (written at finalize), a parent the
// plugin did not make, an operation already written named again as a parent (a CUDA graph's
// replay). Each operation must come out once, with what NCCL said, and nothing may crash.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "gputime/gpu_batch.h"
#include "gputime/nccl_profiler_abi.h"

namespace {

using namespace eacgm::gputime;
using namespace eacgm::nccl_abi;

std::vector<GpuCollective> handed_over;  // every collective entry of every batch
int batches = 0;

}  // namespace

// The library's own is a no-op for eacgm's uprobe; this program's is found first.
extern "C" __attribute__((visibility("default"))) void eacgm_gputime_batch(const void* batch,
                                                                          uint32_t bytes) {
  ++batches;
  auto* at = static_cast<const unsigned char*>(batch);
  const unsigned char* end = at + bytes;
  while (end - at >= ptrdiff_t(sizeof(EntryHeader))) {
    EntryHeader h;
    memcpy(&h, at, sizeof(h));
    if (h.bytes < sizeof(h) || h.bytes > end - at) break;
    if (h.kind == uint16_t(EntryKind::collective)) {
      GpuCollective c;
      memcpy(&c, at, sizeof(c));
      handed_over.push_back(c);
    }
    at += h.bytes;
  }
}

namespace {

uint64_t wall_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

class NcclPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = dlopen(EACGM_CUPTI_LIBRARY_FILE, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    p_ = static_cast<ProfilerV5*>(dlsym(lib_, "ncclProfiler_v5"));
    ASSERT_NE(p_, nullptr);
    int mask = 0;
    ASSERT_EQ(p_->init(&ctx_, 0xabcull, &mask, "test", 1, 4, 2, nullptr), kSuccess);
    EXPECT_EQ(uint64_t(mask), kColl | kP2p | kKernelCh);
    handed_over.clear();
  }
  void TearDown() override {
    if (ctx_) p_->finalize(ctx_);
  }
  void* collective(uint64_t seq, uint8_t channels) {
    EventDescrV5 d{};
    d.type = kColl;
    d.detail.coll.seq = seq;
    d.detail.coll.func = "AllReduce";
    d.detail.coll.count = 1024;
    d.detail.coll.datatype = "ncclFloat32";
    d.detail.coll.channels = channels;
    d.detail.coll.algo = "RING";
    d.detail.coll.proto = "LL";
    void* h = nullptr;
    EXPECT_EQ(p_->start_event(ctx_, &h, &d), kSuccess);
    return h;
  }
  // A channel's kernel, `start`..`stop` ns after `base` on the GPU's timer.
  void channel(void* parent, uint8_t id, uint64_t base, uint64_t start, uint64_t stop) {
    EventDescrV5 d{};
    d.type = kKernelCh;
    d.parent = parent;
    d.detail.kernel_channel.channel = id;
    d.detail.kernel_channel.gpu_timer = base + start;
    void* h = nullptr;
    EXPECT_EQ(p_->start_event(ctx_, &h, &d), kSuccess);
    EventStateArgs a{};
    a.kernel_channel.gpu_timer = base + stop;
    EXPECT_EQ(p_->record_event_state(h, kKernelChStop, &a), kSuccess);
    EXPECT_EQ(p_->stop_event(h), kSuccess);
  }
  void* lib_ = nullptr;
  ProfilerV5* p_ = nullptr;
  void* ctx_ = nullptr;
};

TEST_F(NcclPlugin, AnOperationIsWrittenOnceWhenItsStopAndAllItsChannelsCame) {
  uint64_t base = wall_ns();
  // stop first (enqueued), then the channels on the proxy thread
  void* a = collective(7, 2);
  p_->stop_event(a);
  channel(a, 0, base, 1000, 9000);
  EXPECT_TRUE(handed_over.empty()) << "written before its last channel";
  channel(a, 1, base, 2000, 11000);
  ASSERT_EQ(handed_over.size(), 1u) << "handed over once nothing is in flight";
  // channels first, the stop last
  void* b = collective(8, 2);
  channel(b, 1, base, 0, 5000);
  channel(b, 0, base, 500, 4000);
  EXPECT_EQ(handed_over.size(), 1u);
  p_->stop_event(b);
  ASSERT_EQ(handed_over.size(), 2u);
  for (const GpuCollective& c : handed_over) {
    EXPECT_EQ(c.comm_hash, 0xabcull);
    EXPECT_EQ(c.rank, 2);
    EXPECT_EQ(c.nranks, 4);
    EXPECT_EQ(c.channels, 2);
    EXPECT_EQ(c.channels_seen, 2);
    EXPECT_STREQ(c.func, "AllReduce");
    EXPECT_STREQ(c.datatype, "ncclFloat32");
    EXPECT_STREQ(c.algo, "RING");
    EXPECT_EQ(c.count, 1024u);
    EXPECT_TRUE(c.flags & kCollectiveGpuClock);
    EXPECT_EQ(c.ns_pid, uint32_t(getpid()));
  }
  EXPECT_EQ(handed_over[0].seq, 7u);
  EXPECT_EQ(handed_over[0].end_ns - handed_over[0].start_ns, 10000u);  // the timers' own span
  EXPECT_EQ(handed_over[1].seq, 8u);
  EXPECT_EQ(handed_over[1].end_ns - handed_over[1].start_ns, 5000u);
  EXPECT_LE(handed_over[0].enqueue_ns, handed_over[0].enqueued_ns);
}

TEST_F(NcclPlugin, ChannelsNcclNeverReportsAreWrittenAtFinalize) {
  void* a = collective(1, 4);
  p_->stop_event(a);
  channel(a, 0, wall_ns(), 0, 1000);
  EXPECT_TRUE(handed_over.empty());
  p_->finalize(ctx_);
  ctx_ = nullptr;
  ASSERT_EQ(handed_over.size(), 1u);
  EXPECT_EQ(handed_over[0].channels, 4);
  EXPECT_EQ(handed_over[0].channels_seen, 1);
}

TEST_F(NcclPlugin, AParentItDidNotMakeOrHasWrittenIsLeftOut) {
  uint64_t foreign[8] = {kColl, 0, 0, 0, 0, 0, 0, 0};  // not the plugin's handle
  EventDescrV5 d{};
  d.type = kKernelCh;
  d.parent = foreign;
  void* h = reinterpret_cast<void*>(1);
  EXPECT_EQ(p_->start_event(ctx_, &h, &d), kSuccess);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(p_->stop_event(nullptr), kSuccess);
  EXPECT_EQ(p_->record_event_state(nullptr, kKernelChStop, nullptr), kSuccess);
  // a send without channels: written at its stop; a later channel naming it (a graph's replay)
  // is left out, not counted into another operation
  EventDescrV5 s{};
  s.type = kP2p;
  s.detail.p2p.func = "Send";
  s.detail.p2p.peer = 3;
  void* send = nullptr;
  p_->start_event(ctx_, &send, &s);
  ASSERT_NE(send, nullptr);
  p_->stop_event(send);
  ASSERT_EQ(handed_over.size(), 1u);
  EXPECT_TRUE(handed_over[0].flags & kCollectiveP2p);
  EXPECT_EQ(handed_over[0].root_or_peer, 3);
  EXPECT_EQ(handed_over[0].seq, ~0ull);
  void* next = collective(2, 1);
  d.parent = send;
  h = reinterpret_cast<void*>(1);
  p_->start_event(ctx_, &h, &d);
  EXPECT_EQ(h, nullptr);
  p_->stop_event(next);
  channel(next, 0, wall_ns(), 0, 100);
  ASSERT_EQ(handed_over.size(), 2u);
  EXPECT_EQ(handed_over[1].channels_seen, 1);
}

}  // namespace
