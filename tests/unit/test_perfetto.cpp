// Tests the protobuf encoder and the Perfetto writer; traces are decoded with protoc --decode_raw.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "export/perfetto.h"
#include "export/protobuf_writer.h"
#include "util/error.h"

namespace eacgm {
namespace {

std::string hex(std::string_view bytes) {
  std::string out;
  for (unsigned char byte : bytes) out += fmt::format("{:02x}", byte);
  return out;
}

std::string varint_hex(uint64_t value) {
  std::string out;
  proto::append_varint(out, value);
  return hex(out);
}

// One message as printed by `protoc --decode_raw`: scalars as text, sub-messages as trees.
struct RawMessage {
  std::vector<std::pair<int, std::string>> scalars;
  // Parallel vectors: a pair<int, RawMessage> member would need RawMessage complete.
  std::vector<int> message_fields;
  std::vector<RawMessage> messages;

  std::vector<std::string> values(int field) const {
    std::vector<std::string> out;
    for (const auto& [number, text] : scalars) {
      if (number == field) out.push_back(text);
    }
    return out;
  }
  // The single value of `field`; "<missing>" or "<repeated>" make the comparison fail visibly.
  std::string value(int field) const {
    auto all = values(field);
    if (all.size() != 1) return all.empty() ? "<missing>" : "<repeated>";
    return all.front();
  }
  std::vector<const RawMessage*> all(int field) const {
    std::vector<const RawMessage*> out;
    for (size_t i = 0; i < messages.size(); ++i) {
      if (message_fields[i] == field) out.push_back(&messages[i]);
    }
    return out;
  }
  const RawMessage& at(int field, size_t nth = 0) const {
    static const RawMessage kEmpty;
    auto found = all(field);
    return nth < found.size() ? *found[nth] : kEmpty;
  }
  bool has(int field) const { return !all(field).empty() || !values(field).empty(); }
};

RawMessage parse_decode_raw(const std::string& text) {
  RawMessage root;
  std::vector<RawMessage*> stack{&root};
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    line.erase(0, line.find_first_not_of(' '));
    if (line.empty()) continue;
    if (line == "}") {
      stack.pop_back();
    } else if (line.ends_with(" {")) {
      RawMessage& parent = *stack.back();
      parent.message_fields.push_back(std::stoi(line));
      stack.push_back(&parent.messages.emplace_back());
    } else {
      const auto colon = line.find(": ");
      stack.back()->scalars.emplace_back(std::stoi(line), line.substr(colon + 2));
    }
  }
  return root;
}

RawMessage decode_raw(const std::string& bytes) {
  // ctest runs each test in its own process, possibly in parallel: one file per process.
  const std::string path = fmt::format("{}eacgm_trace_{}.pb", testing::TempDir(), getpid());
  std::ofstream(path, std::ios::binary) << bytes;
  const std::string command = fmt::format("{} --decode_raw < '{}' 2>&1", EACGM_PROTOC, path);
  std::unique_ptr<FILE, decltype(&pclose)> pipe(popen(command.c_str(), "r"), pclose);
  EXPECT_NE(pipe, nullptr);
  std::string text;
  char chunk[4096];
  while (size_t n = fread(chunk, 1, sizeof(chunk), pipe.get())) text.append(chunk, n);
  EXPECT_EQ(pclose(pipe.release()), 0) << text;
  std::remove(path.c_str());
  return parse_decode_raw(text);
}

std::string raw_string(std::string_view text) { return fmt::format("\"{}\"", text); }
std::string fixed64_text(double value) {
  return fmt::format("0x{:016x}", std::bit_cast<uint64_t>(value));
}

TEST(ProtoWriter, VarintEdgeCases) {
  EXPECT_EQ(varint_hex(0), "00");
  EXPECT_EQ(varint_hex(1), "01");
  EXPECT_EQ(varint_hex(127), "7f");
  EXPECT_EQ(varint_hex(128), "8001");
  EXPECT_EQ(varint_hex(300), "ac02");
  EXPECT_EQ(varint_hex(16383), "ff7f");
  EXPECT_EQ(varint_hex(16384), "808001");
  EXPECT_EQ(varint_hex(uint64_t{1} << 63), "80808080808080808001");
  EXPECT_EQ(varint_hex(UINT64_MAX), "ffffffffffffffffff01");
  for (uint64_t v : {uint64_t{0}, uint64_t{127}, uint64_t{128}, uint64_t{1} << 63, UINT64_MAX}) {
    EXPECT_EQ(proto::varint_size(v) * 2, varint_hex(v).size()) << v;
  }
}

TEST(ProtoWriter, ScalarFields) {
  proto::ProtoWriter w;
  w.add_varint(1, 150);
  w.add_int(2, -1);  // two's complement, sign-extended to 64 bits: ten bytes
  w.add_bool(3, true);
  w.add_double(4, 2.5);
  w.add_fixed64(5, 0x0102030405060708);
  w.add_string(6, "hi");
  w.add_varint(16, 1);  // first field number whose tag needs two bytes
  EXPECT_EQ(hex(w.data()),
            "089601"
            "10ffffffffffffffffff01"
            "1801"
            "210000000000000440"
            "290807060504030201"
            "32026869"
            "800101");
}

TEST(ProtoWriter, NestedMessagesGetMinimalLengthPrefixes) {
  proto::ProtoWriter w;
  {
    auto outer = w.message(1);
    {
      auto inner = w.message(2);
      w.add_bytes(3, std::string(125, 'g'));  // 2 + 125 = 127 bytes: one-byte length
    }
    w.add_bytes(4, std::string(126, 'o'));  // makes outer 129 + 128 = 257 bytes: two-byte length
  }
  EXPECT_FALSE(w.in_message());
  const std::string_view out = w.data();
  ASSERT_EQ(out.size(), 1 + 2 + 257u);
  EXPECT_EQ(hex(out.substr(0, 5)), "0a8102" "127f");  // tag 1, len 257; tag 2, len 127
  EXPECT_EQ(hex(out.substr(5, 2)), "1a7d");          // tag 3, len 125

  const RawMessage decoded = decode_raw(std::string(out));
  ASSERT_EQ(decoded.all(1).size(), 1u);
  // 'g' and 'o' cannot start a protobuf field, so protoc shows these as strings.
  EXPECT_EQ(decoded.at(1).at(2).value(3), raw_string(std::string(125, 'g')));
  EXPECT_EQ(decoded.at(1).value(4), raw_string(std::string(126, 'o')));
}

TEST(ProtoWriter, EmptyNestedMessage) {
  proto::ProtoWriter w;
  { auto empty = w.message(7); }
  EXPECT_EQ(hex(w.data()), "3a00");
  w.clear();
  EXPECT_EQ(w.size(), 0u);
}

constexpr uint32_t kPid = 4242;
constexpr uint64_t kProcessUuid = (uint64_t{1} << 63) | kPid;
constexpr uint64_t kMainUuid = (uint64_t{kPid} << 32) | 4242;
constexpr uint64_t kWorkerUuid = (uint64_t{kPid} << 32) | 4243;
constexpr uint64_t kT0 = 1'700'000'000'000'000'000;  // realtime ns, as the recorder stores them

std::string write_trace(const std::function<void(TimelineSink&)>& fill) {
  std::ostringstream out;
  auto writer = make_perfetto_writer(out);
  fill(*writer);
  writer->finish();
  return out.str();
}

// Slices are added out of order: the nested cudaMemcpyAsync before its enclosing launch.
std::string sample_trace() {
  return write_trace([](TimelineSink& sink) {
    sink.add_process({kPid, "python3 train.py"});
    sink.add_thread({kPid, 4242, "python3"});
    sink.add_thread({kPid, 4243, "pt_worker"});
    sink.add_slice({kT0 + 100, 200, kPid, 4242, "cuda", "cudaMemcpyAsync", {}});
    sink.add_slice({kT0, 500, kPid, 4242, "cuda", "cudaLaunchKernel",
                    {{"kernel", std::string("sgemm_128x64")},
                     {"stream", int64_t{-7}},
                     {"bytes", uint64_t{UINT64_MAX}},
                     {"ratio", 2.5}}});
    sink.add_slice({kT0, 50, kPid, 4243, "nccl", "ncclAllReduce", {}});
    sink.add_slice({kT0 + 500, 10, kPid, 4242, "cuda", "cudaLaunchKernel", {}});
  });
}

TEST(PerfettoWriter, ClockSnapshotMakesRealtimeTheTraceClock) {
  const RawMessage trace = decode_raw(sample_trace());
  const RawMessage& snapshot = trace.at(1, 0).at(6);        // TracePacket.clock_snapshot
  EXPECT_EQ(snapshot.at(1).value(1), "1");                  // clock_id REALTIME
  EXPECT_EQ(snapshot.at(1).value(2), std::to_string(kT0));  // earliest slice
  EXPECT_EQ(snapshot.value(2), "1");                        // primary_trace_clock REALTIME
}

TEST(PerfettoWriter, SequenceHeaderHoldsDefaultsAndInternedStrings) {
  const RawMessage trace = decode_raw(sample_trace());
  const RawMessage& header = trace.at(1, 1);
  EXPECT_EQ(header.value(10), "1");         // trusted_packet_sequence_id
  EXPECT_EQ(header.value(13), "1");         // SEQ_INCREMENTAL_STATE_CLEARED
  EXPECT_EQ(header.at(59).value(58), "1");  // defaults: timestamp_clock_id REALTIME
  const RawMessage& interned = header.at(12);

  auto entries = [&](int field) {
    std::map<std::string, std::string> by_iid;
    for (const RawMessage* entry : interned.all(field)) by_iid[entry->value(1)] = entry->value(2);
    return by_iid;
  };
  using Entries = std::map<std::string, std::string>;
  EXPECT_EQ(entries(1), (Entries{{"1", raw_string("cuda")}, {"2", raw_string("nccl")}}));
  EXPECT_EQ(entries(2), (Entries{{"1", raw_string("cudaMemcpyAsync")},
                                 {"2", raw_string("cudaLaunchKernel")},
                                 {"3", raw_string("ncclAllReduce")}}));
  EXPECT_EQ(entries(3), (Entries{{"1", raw_string("kernel")},
                                 {"2", raw_string("stream")},
                                 {"3", raw_string("bytes")},
                                 {"4", raw_string("ratio")}}));
}

TEST(PerfettoWriter, TrackDescriptorsForProcessAndThreads) {
  const RawMessage trace = decode_raw(sample_trace());
  const auto packets = trace.all(1);
  ASSERT_EQ(packets.size(), 2u + 3u + 8u);  // clock, header, 3 tracks, begin+end of 4 slices

  const RawMessage& process = packets[2]->at(60);
  EXPECT_EQ(process.value(1), std::to_string(kProcessUuid));
  EXPECT_FALSE(process.has(5));
  EXPECT_EQ(process.at(3).value(1), "4242");
  EXPECT_EQ(process.at(3).value(6), raw_string("python3 train.py"));

  const RawMessage& main_thread = packets[3]->at(60);
  EXPECT_EQ(main_thread.value(1), std::to_string(kMainUuid));
  EXPECT_EQ(main_thread.value(5), std::to_string(kProcessUuid));  // parent_uuid
  EXPECT_EQ(main_thread.at(4).value(1), "4242");
  EXPECT_EQ(main_thread.at(4).value(2), "4242");
  EXPECT_EQ(main_thread.at(4).value(5), raw_string("python3"));

  const RawMessage& worker = packets[4]->at(60);
  EXPECT_EQ(worker.value(1), std::to_string(kWorkerUuid));
  EXPECT_EQ(worker.value(5), std::to_string(kProcessUuid));
  EXPECT_EQ(worker.at(4).value(2), "4243");
  EXPECT_EQ(worker.at(4).value(5), raw_string("pt_worker"));

  for (size_t i = 2; i < packets.size(); ++i) {
    EXPECT_EQ(packets[i]->value(10), "1");  // same sequence as the interned data
    EXPECT_EQ(packets[i]->value(13), "2");  // SEQ_NEEDS_INCREMENTAL_STATE
  }
}

struct DecodedEvent {
  uint64_t ts;
  uint64_t track;
  std::string type;
  std::string name_iid;  // "<missing>" on SLICE_END
};

std::vector<DecodedEvent> track_events(const RawMessage& trace) {
  std::vector<DecodedEvent> events;
  for (const RawMessage* packet : trace.all(1)) {
    if (!packet->has(11)) continue;
    const RawMessage& event = packet->at(11);
    events.push_back({std::stoull(packet->value(8)), std::stoull(event.value(11)), event.value(9),
                      event.value(10)});
  }
  return events;
}

TEST(PerfettoWriter, SliceBeginAndEndEventsInTimeOrder) {
  const RawMessage trace = decode_raw(sample_trace());
  const auto events = track_events(trace);
  ASSERT_EQ(events.size(), 8u);
  // type 1 = TYPE_SLICE_BEGIN, 2 = TYPE_SLICE_END; name iids as interned above.
  const std::vector<std::tuple<uint64_t, uint64_t, std::string, std::string>> expected = {
      {kT0, kMainUuid, "1", "2"},    // cudaLaunchKernel, the longer of the two, begins first
      {kT0, kWorkerUuid, "1", "3"},  // ncclAllReduce
      {kT0 + 50, kWorkerUuid, "2", "<missing>"},
      {kT0 + 100, kMainUuid, "1", "1"},  // nested cudaMemcpyAsync
      {kT0 + 300, kMainUuid, "2", "<missing>"},
      {kT0 + 500, kMainUuid, "2", "<missing>"},  // the launch ends before its sibling begins
      {kT0 + 500, kMainUuid, "1", "2"},
      {kT0 + 510, kMainUuid, "2", "<missing>"},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [ts, track, type, name_iid] = expected[i];
    EXPECT_EQ(events[i].ts, ts) << "event " << i;
    EXPECT_EQ(events[i].track, track) << "event " << i;
    EXPECT_EQ(events[i].type, type) << "event " << i;
    EXPECT_EQ(events[i].name_iid, name_iid) << "event " << i;
  }
}

TEST(PerfettoWriter, BeginCarriesCategoryAndDebugAnnotations) {
  const RawMessage trace = decode_raw(sample_trace());
  const RawMessage& launch = trace.at(1, 5).at(11);
  EXPECT_EQ(launch.value(3), "1");  // category_iids: cuda
  EXPECT_EQ(launch.value(10), "2");
  const auto annotations = launch.all(4);
  ASSERT_EQ(annotations.size(), 4u);
  EXPECT_EQ(annotations[0]->value(1), "1");  // name_iid: kernel
  EXPECT_EQ(annotations[0]->value(6), raw_string("sgemm_128x64"));  // string_value
  EXPECT_EQ(annotations[1]->value(1), "2");
  EXPECT_EQ(annotations[1]->value(4), std::to_string(static_cast<uint64_t>(int64_t{-7})));
  EXPECT_EQ(annotations[2]->value(1), "3");
  EXPECT_EQ(annotations[2]->value(3), std::to_string(UINT64_MAX));  // uint_value
  EXPECT_EQ(annotations[3]->value(1), "4");
  EXPECT_EQ(annotations[3]->value(5), fixed64_text(2.5));  // double_value

  const RawMessage& end = trace.at(1, 7).at(11);
  EXPECT_FALSE(end.has(3));
  EXPECT_FALSE(end.has(4));
  EXPECT_FALSE(end.has(10));
}

// Random nested slice trees with shared boundaries, identical ranges and zero-length slices,
// added in shuffled order: every SLICE_END must close the innermost open slice of its track.
TEST(PerfettoWriter, NestingStaysBalancedForAnyInputOrder) {
  std::mt19937_64 rng(7);
  std::vector<TimelineSlice> slices;
  auto pick = [&rng](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  std::function<void(uint32_t, uint64_t, uint64_t, int)> fill = [&](uint32_t tid, uint64_t lo,
                                                                    uint64_t hi, int depth) {
    if (depth == 4) return;
    if (pick(0, 3) == 0) {  // a child spanning its parent exactly
      slices.push_back({lo, hi - lo, 1, tid, "t", fmt::format("slice_{}", slices.size()), {}});
      fill(tid, lo, hi, depth + 1);
      return;
    }
    for (uint64_t t = lo; t < hi;) {
      const uint64_t begin = pick(0, 1) ? t : pick(t, hi);  // often touching the previous one
      const uint64_t end = pick(0, 4) == 0 ? begin : pick(begin, hi);
      const std::string name = fmt::format("slice_{}", slices.size());
      slices.push_back({begin, end - begin, 1, tid, "t", name, {}});
      if (end > begin) fill(tid, begin, end, depth + 1);
      t = std::max(end, t + 1);
    }
  };
  for (uint32_t tid = 1; tid <= 3; ++tid) fill(tid, kT0, kT0 + 40, 0);
  std::shuffle(slices.begin(), slices.end(), rng);
  ASSERT_GT(slices.size(), 50u);

  const RawMessage trace = decode_raw(write_trace([&](TimelineSink& sink) {
    for (uint32_t tid = 1; tid <= 3; ++tid) sink.add_thread({1, tid, "w"});
    for (const auto& slice : slices) sink.add_slice(slice);
  }));

  // Names were interned in the order slices were added: name iid n is slices[n - 1].
  std::map<uint64_t, std::vector<const TimelineSlice*>> open;
  std::map<uint64_t, uint64_t> last_ts;
  size_t begins = 0;
  for (const auto& event : track_events(trace)) {
    EXPECT_GE(event.ts, last_ts[event.track]);
    last_ts[event.track] = event.ts;
    auto& stack = open[event.track];
    if (event.type == "1") {
      const TimelineSlice& slice = slices.at(std::stoull(event.name_iid) - 1);
      EXPECT_EQ(event.ts, slice.ts_ns);
      EXPECT_EQ(event.track, (uint64_t{1} << 32) | slice.tid);
      stack.push_back(&slice);
      ++begins;
    } else {
      ASSERT_EQ(event.type, "2");
      ASSERT_FALSE(stack.empty()) << "SLICE_END with no open slice at " << event.ts;
      EXPECT_EQ(event.ts, stack.back()->ts_ns + stack.back()->dur_ns) << stack.back()->name;
      stack.pop_back();
    }
  }
  EXPECT_EQ(begins, slices.size());
  for (const auto& [track, stack] : open) EXPECT_TRUE(stack.empty()) << track;
}

TEST(PerfettoWriter, SliceOnUnannouncedThreadStillGetsTracks) {
  const RawMessage trace = decode_raw(write_trace([](TimelineSink& sink) {
    sink.add_slice({kT0, 1, 7, 8, "cuda", "cudaFree", {}});
  }));
  const auto packets = trace.all(1);
  ASSERT_EQ(packets.size(), 2u + 2u + 2u);
  EXPECT_EQ(packets[2]->at(60).value(1), std::to_string((uint64_t{1} << 63) | 7));
  EXPECT_EQ(packets[3]->at(60).value(1), std::to_string((uint64_t{7} << 32) | 8));
  EXPECT_EQ(packets[3]->at(60).at(4).value(2), "8");
}

TEST(PerfettoWriter, CountersGetTheirOwnTracksAndMergeByTime) {
  const RawMessage trace = decode_raw(write_trace([](TimelineSink& sink) {
    sink.add_process({kPid, "python3 train.py"});
    sink.add_slice({kT0 + 10, 20, kPid, kPid, "cuda", "cudaFree", {}});
    sink.add_counter({kT0 + 25, kPid, "cpu (%)", 42.5});
    sink.add_counter({kT0, kPid, "cpu (%)", 12.5});
    sink.add_counter({kT0 + 5, 0, "eth0 tx (MB/s)", 3.0});
  }));
  const auto packets = trace.all(1);
  // clock, header, process and thread descriptors, 2 counter descriptors, 2 slice events,
  // 3 counter values
  ASSERT_EQ(packets.size(), 2u + 2u + 2u + 2u + 3u);
  const RawMessage& cpu = packets[4]->at(60);
  EXPECT_EQ(cpu.value(1), std::to_string(uint64_t{1} << 62));
  EXPECT_EQ(cpu.value(2), raw_string("cpu (%)"));
  EXPECT_EQ(cpu.value(5), std::to_string(kProcessUuid));  // under its process
  EXPECT_TRUE(cpu.has(8));                                // a counter track
  const RawMessage& eth = packets[5]->at(60);
  EXPECT_EQ(eth.value(2), raw_string("eth0 tx (MB/s)"));
  EXPECT_FALSE(eth.has(5));  // machine-wide: no parent
  // values and slice events in time order: cpu@0, eth@5, begin@10, cpu@25, end@30
  std::vector<std::string> order;
  for (size_t i = 6; i < packets.size(); ++i) {
    const RawMessage& event = packets[i]->at(11);
    std::string what = event.value(9) == "4" ? "counter:" + event.value(44) : "slice:" + event.value(9);
    order.push_back(packets[i]->value(8) + " " + what);
  }
  EXPECT_EQ(order, (std::vector<std::string>{
                       std::to_string(kT0) + " counter:" + fixed64_text(12.5),
                       std::to_string(kT0 + 5) + " counter:" + fixed64_text(3.0),
                       std::to_string(kT0 + 10) + " slice:1",
                       std::to_string(kT0 + 25) + " counter:" + fixed64_text(42.5),
                       std::to_string(kT0 + 30) + " slice:2"}));
}

TEST(PerfettoWriter, InstantsSitOnANamedTrackWithTheirArgs) {
  const RawMessage trace = decode_raw(write_trace([](TimelineSink& sink) {
    sink.add_instant({kT0 + 3, "anomalies", "anomaly", "CPU interference",
                      {{"score", -12.5}, {"layer", std::string("window")}}});
  }));
  const auto packets = trace.all(1);
  ASSERT_EQ(packets.size(), 2u + 1u + 1u);  // clock, header, track, event
  const RawMessage& track = packets[2]->at(60);
  EXPECT_EQ(track.value(1), std::to_string(uint64_t{1} << 61));
  // decode_raw guesses: the bytes of "anomalies" also parse as a message, so it may print
  // them as one; the name is field 2 either way
  EXPECT_TRUE(track.value(2) == raw_string("anomalies") || track.all(2).size() == 1u);
  EXPECT_FALSE(track.has(8));  // not a counter track
  EXPECT_EQ(packets[3]->value(8), std::to_string(kT0 + 3));
  const RawMessage& event = packets[3]->at(11);
  EXPECT_EQ(event.value(9), "3");  // TYPE_INSTANT
  EXPECT_EQ(event.value(11), std::to_string(uint64_t{1} << 61));
  EXPECT_EQ(event.all(4).size(), 2u);  // debug annotations
  // the interned name of the event
  const RawMessage& interned = packets[1]->at(12);
  bool named = false;
  for (const RawMessage* n : interned.all(2))
    named |= n->value(1) == event.value(10) && n->value(2) == raw_string("CPU interference");
  EXPECT_TRUE(named);
}

// CPU profile samples are PerfSample packets on the sequence, in time order; their callstacks,
// frames, function names and mappings are interned once in the sequence header, root first.
TEST(PerfettoWriter, StackSamplesReferToInternedCallstacks) {
  const RawMessage trace = decode_raw(write_trace([](TimelineSink& sink) {
    sink.add_process({kPid, "python3 train.py"});
    sink.add_thread({kPid, 4242, "python3"});
    sink.add_slice({kT0 + 10, 20, kPid, 4242, "cuda", "cudaFree", {}});
    // innermost first: a C function under Python's train.step (line 12) under train.main
    sink.add_stack(7, {{"hot_c_spin", "libhot_c.so", -1, false},
                       {"train.step", "/src/train.py", 12, true},
                       {"train.main", "/src/train.py", 30, true}});
    sink.add_stack(9, {{"train.step", "/src/train.py", 14, true},
                       {"train.main", "/src/train.py", 30, true}});
    sink.add_stack_sample({kT0 + 40, kPid, 4242, 9});
    sink.add_stack_sample({kT0 + 5, kPid, 4242, 7});
    sink.add_stack_sample({kT0 + 20, kPid, 4243, 7});  // an unannounced thread gets a track
    sink.add_stack_sample({kT0 + 50, kPid, 4242, 99});  // a stack never given: left out
  }));
  const auto packets = trace.all(1);
  EXPECT_EQ(trace.at(1, 0).at(6).at(1).value(2), std::to_string(kT0 + 5));  // earliest: a sample
  const RawMessage& interned = packets[1]->at(12);
  auto strings = [&](int field) {
    std::map<std::string, std::string> by_iid;
    for (const RawMessage* e : interned.all(field)) by_iid[e->value(1)] = e->value(2);
    return by_iid;
  };
  auto functions = strings(5), parts = strings(17);
  std::map<std::string, const RawMessage*> frames, mappings, callstacks;
  for (const RawMessage* f : interned.all(6)) frames[f->value(1)] = f;
  for (const RawMessage* m : interned.all(19)) mappings[m->value(1)] = m;
  for (const RawMessage* c : interned.all(7)) callstacks[c->value(1)] = c;
  EXPECT_EQ(frames.size(), 4u);  // train.main:30 is one frame in both stacks
  EXPECT_EQ(mappings.size(), 2u);
  EXPECT_EQ(callstacks.size(), 2u);
  // a frame as text: function, mapping path, line
  auto frame_text = [&](const std::string& iid) {
    const RawMessage* f = frames.at(iid);
    std::string path;
    for (const std::string& part : mappings.at(f->value(3))->values(7)) path += "/" + parts[part];
    std::string text = functions[f->value(2)] + " " + path;
    if (f->has(6)) text += ":" + f->value(6);
    return text;
  };
  auto stack_text = [&](const std::string& iid) {
    std::vector<std::string> out;
    for (const std::string& frame : callstacks.at(iid)->values(2)) out.push_back(frame_text(frame));
    return out;
  };
  // PerfSamples in time order, each with its thread and the callstack it was given
  std::vector<std::string> seen;
  for (const RawMessage* p : packets) {
    if (!p->has(66)) continue;
    const RawMessage& sample = p->at(66);
    EXPECT_EQ(sample.value(2), std::to_string(kPid));
    EXPECT_EQ(sample.value(5), "2");  // MODE_USER
    EXPECT_EQ(p->value(13), "2");     // needs the sequence's interned data
    seen.push_back(p->value(8) + " " + sample.value(3));
    auto stack = stack_text(sample.value(4));
    if (p->value(8) == std::to_string(kT0 + 40))
      EXPECT_EQ(stack, (std::vector<std::string>{"\"train.main\" /\"src\"/\"train.py\":30",
                                                 "\"train.step\" /\"src\"/\"train.py\":14"}));
    else
      EXPECT_EQ(stack, (std::vector<std::string>{"\"train.main\" /\"src\"/\"train.py\":30",
                                                 "\"train.step\" /\"src\"/\"train.py\":12",
                                                 "\"hot_c_spin\" /\"libhot_c.so\""}));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{std::to_string(kT0 + 5) + " 4242",
                                            std::to_string(kT0 + 20) + " 4243",
                                            std::to_string(kT0 + 40) + " 4242"}));
  // thread 4243 has a track descriptor
  bool described = false;
  for (const RawMessage* p : packets)
    described |= p->has(60) && p->at(60).at(4).value(2) == "4243";
  EXPECT_TRUE(described);
}

TEST(PerfettoWriter, CounterOnlyTraceTakesItsClockFromTheCounters) {
  const RawMessage trace = decode_raw(write_trace([](TimelineSink& sink) {
    sink.add_counter({kT0 + 7, 0, "vda write (MB/s)", 1.0});
  }));
  EXPECT_EQ(trace.at(1, 0).at(6).at(1).value(2), std::to_string(kT0 + 7));
}

TEST(PerfettoWriter, EmptyTimelineIsAValidTrace) {
  const RawMessage trace = decode_raw(write_trace([](TimelineSink&) {}));
  ASSERT_EQ(trace.all(1).size(), 2u);
  EXPECT_EQ(trace.at(1, 1).value(13), "1");
}

TEST(PerfettoWriter, FinishThrowsWhenTheOutputFails) {
  std::ostringstream out;
  auto writer = make_perfetto_writer(out);
  writer->add_slice({kT0, 1, 1, 1, "cuda", "cudaFree", {}});
  out.setstate(std::ios::badbit);
  try {
    writer->finish();
    FAIL() << "finish() did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write trace"), std::string::npos) << e.what();
  }
}

// GPU work (the gputime layer) on a track per device and stream under its process, and the flow
// arrow from the launch's slice (flow_ids, 47) to the kernel's (terminating_flow_ids, 48).
TEST(PerfettoWriter, GpuWorkHasAStreamTrackAndAFlowFromItsLaunch) {
  const RawMessage trace = decode_raw(write_trace([](TimelineSink& sink) {
    sink.add_process({kPid, "python3 train.py"});
    sink.add_thread({kPid, 4242, "python3"});
    TimelineSlice launch{kT0, 500, kPid, 4242, "cuda", "cudaLaunchKernel", {}};
    launch.flow_out = 0x1234;
    sink.add_slice(launch);
    TimelineGpuSlice kernel;
    kernel.ts_ns = kT0 + 2000, kernel.dur_ns = 300, kernel.pid = kPid;
    kernel.device = 0, kernel.stream = 7, kernel.category = "gpu", kernel.name = "sgemm";
    kernel.flow_in = 0x1234;
    sink.add_gpu_slice(kernel);
  }));
  const RawMessage* gpu_track = nullptr;
  for (const RawMessage* packet : trace.all(1))
    if (packet->has(60) && packet->at(60).value(2) == raw_string("GPU 0 stream 7"))
      gpu_track = &packet->at(60);
  ASSERT_NE(gpu_track, nullptr);
  EXPECT_EQ(gpu_track->value(5), std::to_string(kProcessUuid));  // under its process
  std::string gpu_uuid = gpu_track->value(1);
  int begins = 0;
  for (const RawMessage* packet : trace.all(1)) {
    if (!packet->has(11) || packet->at(11).value(9) != "1") continue;  // SLICE_BEGIN
    const RawMessage& event = packet->at(11);
    ++begins;
    if (event.value(11) == std::to_string(kMainUuid)) {
      EXPECT_EQ(event.value(47), "0x0000000000001234");
      EXPECT_FALSE(event.has(48));
    } else {
      EXPECT_EQ(event.value(11), gpu_uuid);
      EXPECT_EQ(packet->value(8), std::to_string(kT0 + 2000));
      EXPECT_EQ(event.value(48), "0x0000000000001234");
      EXPECT_FALSE(event.has(47));
    }
  }
  EXPECT_EQ(begins, 2);
}

}  // namespace
}  // namespace eacgm
