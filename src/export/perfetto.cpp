// Perfetto protobuf trace writer: buffers the timeline compactly, then writes sorted TracePackets.
#include "export/perfetto.h"

#include <algorithm>
#include <map>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "export/protobuf_writer.h"
#include "util/error.h"

namespace eacgm {
namespace {

// Field numbers and enum values from perfetto/protos/perfetto/trace/**.proto.
namespace pb {
constexpr uint32_t kTracePacket = 1;  // Trace.packet

// TracePacket
constexpr uint32_t kTimestamp = 8;
constexpr uint32_t kTrustedPacketSequenceId = 10;
constexpr uint32_t kTrackEvent = 11;
constexpr uint32_t kInternedData = 12;
constexpr uint32_t kSequenceFlags = 13;
constexpr uint32_t kClockSnapshot = 6;
constexpr uint32_t kTracePacketDefaults = 59;
constexpr uint32_t kTrackDescriptor = 60;
constexpr uint32_t kPerfSample = 66;
constexpr uint64_t kSeqIncrementalStateCleared = 1;
constexpr uint64_t kSeqNeedsIncrementalState = 2;

// ClockSnapshot, ClockSnapshot.Clock, TracePacketDefaults
constexpr uint32_t kClockSnapshotClocks = 1;
constexpr uint32_t kClockSnapshotPrimaryTraceClock = 2;
constexpr uint32_t kClockId = 1;
constexpr uint32_t kClockTimestamp = 2;
constexpr uint32_t kDefaultsTimestampClockId = 58;
constexpr uint64_t kBuiltinClockRealtime = 1;

// InternedData; EventCategory, EventName and DebugAnnotationName all use iid = 1, name = 2.
constexpr uint32_t kInternedEventCategories = 1;
constexpr uint32_t kInternedEventNames = 2;
constexpr uint32_t kInternedDebugAnnotationNames = 3;
constexpr uint32_t kInternedIid = 1;
constexpr uint32_t kInternedName = 2;  // InternedString.str too
// InternedData's profile tables (profiling/profile_common.proto): InternedString function_names,
// mapping_paths; Mapping{1 iid, 7 path_string_ids}; Frame{1 iid, 2 function_name_id,
// 3 mapping_id, 4 rel_pc, 6 line_number}; Callstack{1 iid, 2 frame_ids, root first}.
constexpr uint32_t kInternedFunctionNames = 5;
constexpr uint32_t kInternedFrames = 6;
constexpr uint32_t kInternedCallstacks = 7;
constexpr uint32_t kInternedMappingPaths = 17;
constexpr uint32_t kInternedMappings = 19;
constexpr uint32_t kMappingPathStringIds = 7;
constexpr uint32_t kFrameFunctionNameId = 2;
constexpr uint32_t kFrameMappingId = 3;
constexpr uint32_t kFrameRelPc = 4;
constexpr uint32_t kFrameLineNumber = 6;
constexpr uint32_t kCallstackFrameIds = 2;

// PerfSample (profiling/profile_packet.proto)
constexpr uint32_t kPerfSamplePid = 2;
constexpr uint32_t kPerfSampleTid = 3;
constexpr uint32_t kPerfSampleCallstackIid = 4;
constexpr uint32_t kPerfSampleCpuMode = 5;
constexpr uint64_t kCpuModeUser = 2;

// TrackDescriptor, ProcessDescriptor, ThreadDescriptor
constexpr uint32_t kTrackUuid = 1;
constexpr uint32_t kTrackName = 2;
constexpr uint32_t kTrackCounter = 8;  // CounterDescriptor: an empty one means plain values
constexpr uint32_t kTrackProcess = 3;
constexpr uint32_t kTrackThread = 4;
constexpr uint32_t kTrackParentUuid = 5;
constexpr uint32_t kProcessPid = 1;
constexpr uint32_t kProcessName = 6;
constexpr uint32_t kThreadPid = 1;
constexpr uint32_t kThreadTid = 2;
constexpr uint32_t kThreadName = 5;

// TrackEvent
constexpr uint32_t kEventCategoryIids = 3;
constexpr uint32_t kEventDebugAnnotations = 4;
constexpr uint32_t kEventType = 9;
constexpr uint32_t kEventNameIid = 10;
constexpr uint32_t kEventTrackUuid = 11;
constexpr uint64_t kTypeSliceBegin = 1;
constexpr uint64_t kTypeSliceEnd = 2;
constexpr uint64_t kTypeCounter = 4;
constexpr uint64_t kTypeInstant = 3;
constexpr uint32_t kEventDoubleCounterValue = 44;
constexpr uint32_t kEventFlowIds = 47;             // repeated fixed64
constexpr uint32_t kEventTerminatingFlowIds = 48;  // repeated fixed64

// DebugAnnotation
constexpr uint32_t kAnnotationNameIid = 1;
constexpr uint32_t kAnnotationUintValue = 3;
constexpr uint32_t kAnnotationIntValue = 4;
constexpr uint32_t kAnnotationDoubleValue = 5;
constexpr uint32_t kAnnotationStringValue = 6;
}  // namespace pb

constexpr uint64_t kSequenceId = 1;
constexpr size_t kFlushBytes = 1 << 20;
constexpr size_t kMaxSlices = size_t{1} << 31;  // EventRef keeps the slice index in 31 bits

// Track uuids only need to be unique within this file. Linux pids stay below 2^22, so a thread's
// (pid << 32 | tid) never reaches the top bit that marks process tracks.
uint64_t process_track_uuid(uint32_t pid) { return (uint64_t{1} << 63) | pid; }
uint64_t thread_track_uuid(uint32_t pid, uint32_t tid) { return (uint64_t{pid} << 32) | tid; }

// Maps strings to iids (1, 2, ...; 0 means "none" in Perfetto) and remembers them in iid order.
class Interner {
 public:
  uint64_t intern(const std::string& text) {
    auto [it, inserted] = ids_.try_emplace(text, ids_.size() + 1);
    if (inserted) by_iid_.push_back(&it->first);  // node-based map: the key never moves
    return it->second;
  }
  void write(proto::ProtoWriter& w, uint32_t field) const {
    for (size_t i = 0; i < by_iid_.size(); ++i) {
      auto entry = w.message(field);
      w.add_varint(pb::kInternedIid, i + 1);
      w.add_string(pb::kInternedName, *by_iid_[i]);
    }
  }

 private:
  std::unordered_map<std::string, uint64_t> ids_;
  std::vector<const std::string*> by_iid_;
};

struct Track {
  uint64_t uuid = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  bool is_thread = false;
  std::string name;
  bool is_gpu = false;  // a GPU stream's track under its process (named by `name`)
};

// One slice as kept until finish(): ids instead of strings, args pre-encoded in args_.
struct SliceRecord {
  uint64_t ts = 0;
  uint64_t dur = 0;
  uint64_t args_offset = 0;
  uint32_t args_size = 0;
  uint32_t track = 0;  // index into tracks_
  uint32_t name_iid = 0;
  uint32_t category_iid = 0;
};

// A SLICE_BEGIN or SLICE_END of slices_[index()]: 4 bytes per event to sort.
struct EventRef {
  uint32_t bits;
  uint32_t index() const { return bits >> 1; }
  bool is_end() const { return bits & 1; }
};

// A counter track (per process or machine-wide) and one value on it.
struct CounterTrack {
  uint64_t uuid = 0;
  uint32_t pid = 0;
  std::string name;
};
struct CounterValue {
  uint64_t ts = 0;
  uint32_t track = 0;  // index into counter_tracks_
  double value = 0;
};

// A CPU profile sample as kept until finish().
struct StackSampleRecord {
  uint64_t ts = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t callstack_iid = 0;
};

class PerfettoWriter final : public TimelineSink {
 public:
  explicit PerfettoWriter(std::ostream& out) : out_(out) {}

  void add_process(const TimelineProcess& process) override {
    track_for(process_track_uuid(process.pid), process.pid, 0, false).name = process.name;
  }

  void add_thread(const TimelineThread& thread) override {
    process_track(thread.pid);
    const uint64_t uuid = thread_track_uuid(thread.pid, thread.tid);
    track_for(uuid, thread.pid, thread.tid, true).name = thread.name;
  }

  void add_slice(const TimelineSlice& slice) override {
    if (slices_.size() >= kMaxSlices) fail("cannot write trace: more than {} slices", kMaxSlices);
    SliceRecord record;
    record.ts = slice.ts_ns;
    record.dur = slice.dur_ns;
    record.track = thread_track_index(slice.pid, slice.tid);
    record.name_iid = static_cast<uint32_t>(event_names_.intern(slice.name));
    record.category_iid = static_cast<uint32_t>(categories_.intern(slice.category));
    record.args_offset = args_.size();
    encode_args(slice.args);
    record.args_size = static_cast<uint32_t>(args_.size() - record.args_offset);
    if (slice.flow_out) flow_out_[uint32_t(slices_.size())] = slice.flow_out;
    slices_.push_back(record);
  }

  void add_gpu_slice(const TimelineGpuSlice& g) override {
    if (slices_.size() >= kMaxSlices) fail("cannot write trace: more than {} slices", kMaxSlices);
    process_track(g.pid);
    auto [it, inserted] = gpu_track_index_.try_emplace(
        std::tuple<uint32_t, uint32_t, uint32_t>{g.pid, g.device, g.stream}, tracks_.size());
    if (inserted) {
      // uuids with bit 60 set: apart from instant (61), counter (62), process (63) and thread
      Track t{(uint64_t{1} << 60) | tracks_.size(), g.pid, 0, false,
              g.track.empty() ? fmt::format("GPU {} stream {}", g.device, g.stream) : g.track,
              true};
      track_index_.emplace(t.uuid, tracks_.size());
      tracks_.push_back(std::move(t));
    }
    SliceRecord record;
    record.ts = g.ts_ns;
    record.dur = g.dur_ns;
    record.track = static_cast<uint32_t>(it->second);
    record.name_iid = static_cast<uint32_t>(event_names_.intern(g.name));
    record.category_iid = static_cast<uint32_t>(categories_.intern(g.category));
    record.args_offset = args_.size();
    encode_args(g.args);
    record.args_size = static_cast<uint32_t>(args_.size() - record.args_offset);
    if (g.flow_in) flow_in_[uint32_t(slices_.size())] = g.flow_in;
    slices_.push_back(record);
  }

  void add_counter(const TimelineCounter& counter) override {
    if (counter.pid) process_track(counter.pid);
    auto [it, inserted] =
        counter_index_.try_emplace({counter.pid, counter.track}, counter_tracks_.size());
    if (inserted) {
      // uuids with bit 62 set: apart from thread (pid << 32 | tid) and process (bit 63) tracks
      counter_tracks_.push_back(
          {(uint64_t{1} << 62) | counter_tracks_.size(), counter.pid, counter.track});
    }
    counters_.push_back({counter.ts_ns, uint32_t(it->second), counter.value});
  }

  void add_instant(const TimelineInstant& instant) override {
    auto [it, inserted] = instant_index_.try_emplace(instant.track, instant_tracks_.size());
    // uuids with bit 61 set: apart from counter (62), process (63) and thread tracks
    if (inserted) instant_tracks_.push_back({(uint64_t{1} << 61) | instant_tracks_.size(), 0,
                                             instant.track});
    SliceRecord record;
    record.ts = instant.ts_ns;
    record.track = uint32_t(it->second);
    record.name_iid = static_cast<uint32_t>(event_names_.intern(instant.name));
    record.category_iid = static_cast<uint32_t>(categories_.intern(instant.category));
    record.args_offset = args_.size();
    encode_args(instant.args);
    record.args_size = static_cast<uint32_t>(args_.size() - record.args_offset);
    instants_.push_back(record);
  }

  // Frames are interned by what they show (function, file or module, line), mappings by their
  // file, callstacks by their frames: a profile's stacks share most of their frames.
  void add_stack(uint32_t id, const std::vector<TimelineFrame>& frames) override {
    std::vector<uint64_t> frame_iids;
    frame_iids.reserve(frames.size());
    for (auto f = frames.rbegin(); f != frames.rend(); ++f) {  // root first
      FrameKey key{function_names_.intern(f->name), mapping_iid(f->file), f->line};
      auto [it, fresh] = frame_index_.try_emplace(key, frame_keys_.size() + 1);
      if (fresh) frame_keys_.push_back(key);
      frame_iids.push_back(it->second);
    }
    auto [it, fresh] = callstack_index_.try_emplace(frame_iids, callstacks_.size() + 1);
    if (fresh) callstacks_.push_back(frame_iids);
    stack_iids_[id] = it->second;
  }

  void add_stack_sample(const TimelineStackSample& sample) override {
    auto it = stack_iids_.find(sample.stack);
    if (it == stack_iids_.end()) return;  // a stack never given: nothing to show
    thread_track_index(sample.pid, sample.tid);
    samples_.push_back({sample.ts_ns, sample.pid, sample.tid, it->second});
  }

  void finish() override {
    if (finished_) return;
    finished_ = true;
    write_clock_snapshot();
    write_sequence_header();
    write_track_descriptors();
    write_counter_descriptors();
    write_instant_descriptors();
    write_slice_events();
    flush_chunk();
    out_.flush();
    check_stream();
    slices_ = {};
    flow_out_ = {};
    flow_in_ = {};
    counters_ = {};
    instants_ = {};
    samples_ = {};
    args_ = {};
  }

 private:
  Track& track_for(uint64_t uuid, uint32_t pid, uint32_t tid, bool is_thread) {
    auto [it, inserted] = track_index_.try_emplace(uuid, tracks_.size());
    if (inserted) tracks_.push_back(Track{uuid, pid, tid, is_thread, {}});
    return tracks_[it->second];
  }
  void process_track(uint32_t pid) { track_for(process_track_uuid(pid), pid, 0, false); }

  // A mapping per file or module: Perfetto names it by its path's components.
  uint64_t mapping_iid(const std::string& file) {
    auto [it, fresh] = mapping_index_.try_emplace(file, mapping_paths_.size() + 1);
    if (fresh) {
      std::vector<uint64_t> parts;
      size_t start = 0;
      while (start <= file.size()) {
        size_t slash = file.find('/', start);
        if (slash == std::string::npos) slash = file.size();
        if (slash > start) parts.push_back(path_parts_.intern(file.substr(start, slash - start)));
        start = slash + 1;
      }
      mapping_paths_.push_back(std::move(parts));
    }
    return it->second;
  }

  // Callers announce threads first; a slice from an unannounced thread still gets a track.
  uint32_t thread_track_index(uint32_t pid, uint32_t tid) {
    const uint64_t uuid = thread_track_uuid(pid, tid);
    if (auto it = track_index_.find(uuid); it != track_index_.end()) {
      return static_cast<uint32_t>(it->second);
    }
    process_track(pid);
    track_for(uuid, pid, tid, true);
    return static_cast<uint32_t>(tracks_.size() - 1);
  }

  void encode_args(const std::vector<TimelineArg>& args) {
    for (const auto& arg : args) {
      auto annotation = args_.message(pb::kEventDebugAnnotations);
      args_.add_varint(pb::kAnnotationNameIid, annotation_names_.intern(arg.name));
      std::visit([this](const auto& value) { add_annotation_value(value); }, arg.value);
    }
  }
  void add_annotation_value(int64_t v) { args_.add_int(pb::kAnnotationIntValue, v); }
  void add_annotation_value(uint64_t v) { args_.add_varint(pb::kAnnotationUintValue, v); }
  void add_annotation_value(double v) { args_.add_double(pb::kAnnotationDoubleValue, v); }
  void add_annotation_value(const std::string& v) {
    args_.add_string(pb::kAnnotationStringValue, v);
  }

  // Trace time is REALTIME so that the caller's wall-clock timestamps need no conversion (without
  // this, a reader defaults to BOOTTIME and cannot relate it to REALTIME). The snapshot carries
  // the first timestamp so the UI can also show wall-clock dates.
  void write_clock_snapshot() {
    auto packet = writer_.message(pb::kTracePacket);
    auto snapshot = writer_.message(pb::kClockSnapshot);
    {
      auto clock = writer_.message(pb::kClockSnapshotClocks);
      writer_.add_varint(pb::kClockId, pb::kBuiltinClockRealtime);
      writer_.add_varint(pb::kClockTimestamp, first_timestamp());
    }
    writer_.add_varint(pb::kClockSnapshotPrimaryTraceClock, pb::kBuiltinClockRealtime);
  }

  uint64_t first_timestamp() const {
    uint64_t first = UINT64_MAX;
    for (const auto& slice : slices_) first = std::min(first, slice.ts);
    for (const auto& counter : counters_) first = std::min(first, counter.ts);
    for (const auto& instant : instants_) first = std::min(first, instant.ts);
    for (const auto& sample : samples_) first = std::min(first, sample.ts);
    if (first == UINT64_MAX) first = 0;
    return first;
  }

  // Starts the sequence: defaults (timestamp clock) and every interned string, all in one packet,
  // so that every later packet can refer to any iid.
  void write_sequence_header() {
    auto packet = writer_.message(pb::kTracePacket);
    writer_.add_varint(pb::kTrustedPacketSequenceId, kSequenceId);
    writer_.add_varint(pb::kSequenceFlags, pb::kSeqIncrementalStateCleared);
    {
      auto defaults = writer_.message(pb::kTracePacketDefaults);
      writer_.add_varint(pb::kDefaultsTimestampClockId, pb::kBuiltinClockRealtime);
    }
    auto interned = writer_.message(pb::kInternedData);
    categories_.write(writer_, pb::kInternedEventCategories);
    event_names_.write(writer_, pb::kInternedEventNames);
    annotation_names_.write(writer_, pb::kInternedDebugAnnotationNames);
    if (callstacks_.empty()) return;
    function_names_.write(writer_, pb::kInternedFunctionNames);
    path_parts_.write(writer_, pb::kInternedMappingPaths);
    for (size_t i = 0; i < mapping_paths_.size(); ++i) {
      auto mapping = writer_.message(pb::kInternedMappings);
      writer_.add_varint(pb::kInternedIid, i + 1);
      for (uint64_t part : mapping_paths_[i]) writer_.add_varint(pb::kMappingPathStringIds, part);
    }
    for (size_t i = 0; i < frame_keys_.size(); ++i) {
      auto frame = writer_.message(pb::kInternedFrames);
      writer_.add_varint(pb::kInternedIid, i + 1);
      writer_.add_varint(pb::kFrameFunctionNameId, frame_keys_[i].name);
      writer_.add_varint(pb::kFrameMappingId, frame_keys_[i].mapping);
      writer_.add_varint(pb::kFrameRelPc, 0);  // symbolised already: no address to resolve
      if (frame_keys_[i].line >= 0)
        writer_.add_varint(pb::kFrameLineNumber, uint64_t(frame_keys_[i].line));
    }
    for (size_t i = 0; i < callstacks_.size(); ++i) {
      auto callstack = writer_.message(pb::kInternedCallstacks);
      writer_.add_varint(pb::kInternedIid, i + 1);
      for (uint64_t frame : callstacks_[i]) writer_.add_varint(pb::kCallstackFrameIds, frame);
    }
  }

  // Every packet after the header relies on its defaults, which Perfetto only applies to packets
  // flagged as needing incremental state.
  void begin_sequence_packet() {
    writer_.begin_message(pb::kTracePacket);
    writer_.add_varint(pb::kTrustedPacketSequenceId, kSequenceId);
    writer_.add_varint(pb::kSequenceFlags, pb::kSeqNeedsIncrementalState);
  }

  // Processes first: a thread track's parent must already be known.
  void write_track_descriptors() {
    for (bool children : {false, true}) {
      for (const auto& track : tracks_) {
        if ((track.is_thread || track.is_gpu) == children) write_track_descriptor(track);
      }
    }
  }

  void write_track_descriptor(const Track& track) {
    begin_sequence_packet();
    {
      auto descriptor = writer_.message(pb::kTrackDescriptor);
      writer_.add_varint(pb::kTrackUuid, track.uuid);
      if (track.is_gpu) {
        writer_.add_varint(pb::kTrackParentUuid, process_track_uuid(track.pid));
        writer_.add_string(pb::kTrackName, track.name);
      } else if (track.is_thread) {
        writer_.add_varint(pb::kTrackParentUuid, process_track_uuid(track.pid));
        auto thread = writer_.message(pb::kTrackThread);
        writer_.add_int(pb::kThreadPid, track.pid);
        writer_.add_int(pb::kThreadTid, track.tid);
        if (!track.name.empty()) writer_.add_string(pb::kThreadName, track.name);
      } else {
        auto process = writer_.message(pb::kTrackProcess);
        writer_.add_int(pb::kProcessPid, track.pid);
        if (!track.name.empty()) writer_.add_string(pb::kProcessName, track.name);
      }
    }
    writer_.end_message();
    maybe_flush();
  }

  void write_counter_descriptors() {
    for (const auto& track : counter_tracks_) {
      begin_sequence_packet();
      {
        auto descriptor = writer_.message(pb::kTrackDescriptor);
        writer_.add_varint(pb::kTrackUuid, track.uuid);
        writer_.add_string(pb::kTrackName, track.name);
        if (track.pid) writer_.add_varint(pb::kTrackParentUuid, process_track_uuid(track.pid));
        auto counter = writer_.message(pb::kTrackCounter);
      }
      writer_.end_message();
      maybe_flush();
    }
  }

  void write_instant_descriptors() {
    for (const auto& track : instant_tracks_) {
      begin_sequence_packet();
      {
        auto descriptor = writer_.message(pb::kTrackDescriptor);
        writer_.add_varint(pb::kTrackUuid, track.uuid);
        writer_.add_string(pb::kTrackName, track.name);
      }
      writer_.end_message();
      maybe_flush();
    }
  }

  void write_instant_event(const SliceRecord& i) {
    begin_sequence_packet();
    writer_.add_varint(pb::kTimestamp, i.ts);
    {
      auto track_event = writer_.message(pb::kTrackEvent);
      writer_.add_varint(pb::kEventTrackUuid, instant_tracks_[i.track].uuid);
      writer_.add_varint(pb::kEventType, pb::kTypeInstant);
      writer_.add_varint(pb::kEventCategoryIids, i.category_iid);
      writer_.add_varint(pb::kEventNameIid, i.name_iid);
      writer_.add_raw(args_.data().substr(i.args_offset, i.args_size));
    }
    writer_.end_message();
    maybe_flush();
  }

  void write_stack_sample(const StackSampleRecord& s) {
    begin_sequence_packet();
    writer_.add_varint(pb::kTimestamp, s.ts);
    {
      auto sample = writer_.message(pb::kPerfSample);
      writer_.add_varint(pb::kPerfSamplePid, s.pid);
      writer_.add_varint(pb::kPerfSampleTid, s.tid);
      writer_.add_varint(pb::kPerfSampleCallstackIid, s.callstack_iid);
      writer_.add_varint(pb::kPerfSampleCpuMode, pb::kCpuModeUser);
    }
    writer_.end_message();
    maybe_flush();
  }

  void write_counter_event(const CounterValue& c) {
    begin_sequence_packet();
    writer_.add_varint(pb::kTimestamp, c.ts);
    {
      auto track_event = writer_.message(pb::kTrackEvent);
      writer_.add_varint(pb::kEventTrackUuid, counter_tracks_[c.track].uuid);
      writer_.add_varint(pb::kEventType, pb::kTypeCounter);
      writer_.add_double(pb::kEventDoubleCounterValue, c.value);
    }
    writer_.end_message();
    maybe_flush();
  }

  // Orders begin/end events so that each thread's slices nest: at equal timestamps, ends come
  // before begins (adjacent siblings), zero-length slices sit in between, and the longest slice
  // begins first (it is the outer one). An END names no slice, it closes the innermost open one,
  // so equal-time ends need no particular order. Perfetto's sorter keeps file order for equal
  // timestamps.
  void write_slice_events() {
    std::vector<EventRef> events;
    events.reserve(slices_.size() * 2);
    for (uint32_t i = 0; i < slices_.size(); ++i) {
      events.push_back({i << 1});
      events.push_back({(i << 1) | 1});
    }
    std::sort(events.begin(), events.end(),
              [this](EventRef a, EventRef b) { return event_before(a, b); });
    // counters merge in by time (they sit on tracks of their own, so ties need no order)
    std::stable_sort(counters_.begin(), counters_.end(),
                     [](const CounterValue& a, const CounterValue& b) { return a.ts < b.ts; });
    std::stable_sort(instants_.begin(), instants_.end(),
                     [](const SliceRecord& a, const SliceRecord& b) { return a.ts < b.ts; });
    std::stable_sort(samples_.begin(), samples_.end(),
                     [](const StackSampleRecord& a, const StackSampleRecord& b) {
                       return a.ts < b.ts;
                     });
    size_t next_counter = 0, next_instant = 0, next_sample = 0;
    auto others_until = [&](uint64_t ts) {
      while (next_counter < counters_.size() && counters_[next_counter].ts <= ts)
        write_counter_event(counters_[next_counter++]);
      while (next_instant < instants_.size() && instants_[next_instant].ts <= ts)
        write_instant_event(instants_[next_instant++]);
      while (next_sample < samples_.size() && samples_[next_sample].ts <= ts)
        write_stack_sample(samples_[next_sample++]);
    };
    for (EventRef event : events) {
      others_until(event_ts(event));
      write_slice_event(event);
    }
    others_until(UINT64_MAX);
  }

  uint64_t event_ts(EventRef event) const {
    const auto& slice = slices_[event.index()];
    return event.is_end() ? slice.ts + slice.dur : slice.ts;
  }
  int event_phase(EventRef event) const {
    if (slices_[event.index()].dur == 0) return 1;
    return event.is_end() ? 0 : 2;
  }

  bool event_before(EventRef a, EventRef b) const {
    if (event_ts(a) != event_ts(b)) return event_ts(a) < event_ts(b);
    if (event_phase(a) != event_phase(b)) return event_phase(a) < event_phase(b);
    if (event_phase(a) != 2) return a.bits < b.bits;  // zero-length: its begin, then its end
    const auto& sa = slices_[a.index()];
    const auto& sb = slices_[b.index()];
    if (sa.dur != sb.dur) return sa.dur > sb.dur;
    return a.index() < b.index();
  }

  void write_slice_event(EventRef event) {
    const auto& slice = slices_[event.index()];
    begin_sequence_packet();
    writer_.add_varint(pb::kTimestamp, event_ts(event));
    {
      auto track_event = writer_.message(pb::kTrackEvent);
      writer_.add_varint(pb::kEventTrackUuid, tracks_[slice.track].uuid);
      if (event.is_end()) {
        writer_.add_varint(pb::kEventType, pb::kTypeSliceEnd);
      } else {
        writer_.add_varint(pb::kEventType, pb::kTypeSliceBegin);
        writer_.add_varint(pb::kEventCategoryIids, slice.category_iid);
        writer_.add_varint(pb::kEventNameIid, slice.name_iid);
        writer_.add_raw(args_.data().substr(slice.args_offset, slice.args_size));
        if (auto f = flow_out_.find(event.index()); f != flow_out_.end())
          writer_.add_fixed64(pb::kEventFlowIds, f->second);
        if (auto f = flow_in_.find(event.index()); f != flow_in_.end())
          writer_.add_fixed64(pb::kEventTerminatingFlowIds, f->second);
      }
    }
    writer_.end_message();
    maybe_flush();
  }

  void maybe_flush() {
    if (writer_.size() >= kFlushBytes) flush_chunk();
  }
  void flush_chunk() {
    out_.write(writer_.data().data(), static_cast<std::streamsize>(writer_.size()));
    writer_.clear();
    check_stream();
  }
  void check_stream() const {
    if (!out_) fail("cannot write trace: disk full or output closed (check free space)");
  }

  std::ostream& out_;
  bool finished_ = false;
  std::vector<Track> tracks_;
  std::unordered_map<uint64_t, size_t> track_index_;
  Interner event_names_, categories_, annotation_names_;
  std::vector<SliceRecord> slices_;
  // flows, by slice index: few slices have one (launches and their GPU work)
  std::unordered_map<uint32_t, uint64_t> flow_out_, flow_in_;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, size_t> gpu_track_index_;
  std::vector<CounterTrack> counter_tracks_;
  std::map<std::pair<uint32_t, std::string>, size_t> counter_index_;
  std::vector<CounterValue> counters_;
  std::vector<CounterTrack> instant_tracks_;
  std::map<std::string, size_t> instant_index_;
  std::vector<SliceRecord> instants_;
  // the CPU profile: interned functions, path components, mappings, frames and callstacks
  struct FrameKey {
    uint64_t name = 0, mapping = 0;
    int64_t line = -1;
    bool operator<(const FrameKey& o) const {
      return std::tie(name, mapping, line) < std::tie(o.name, o.mapping, o.line);
    }
  };
  Interner function_names_, path_parts_;
  std::unordered_map<std::string, uint64_t> mapping_index_;
  std::vector<std::vector<uint64_t>> mapping_paths_;  // per mapping iid - 1: its path parts
  std::map<FrameKey, uint64_t> frame_index_;
  std::vector<FrameKey> frame_keys_;
  std::map<std::vector<uint64_t>, uint64_t> callstack_index_;
  std::vector<std::vector<uint64_t>> callstacks_;
  std::unordered_map<uint32_t, uint64_t> stack_iids_;
  std::vector<StackSampleRecord> samples_;
  proto::ProtoWriter args_;    // DebugAnnotation fields of all slices, back to back
  proto::ProtoWriter writer_;  // pending output, flushed in chunks
};

}  // namespace

std::unique_ptr<TimelineSink> make_perfetto_writer(std::ostream& out) {
  return std::make_unique<PerfettoWriter>(out);
}

}  // namespace eacgm
