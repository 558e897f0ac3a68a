// Perfetto protobuf trace writer: buffers the timeline compactly, then writes sorted TracePackets.
#include "export/perfetto.h"

#include <algorithm>
#include <map>
#include <cstdint>
#include <string>
#include <string_view>
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
constexpr uint32_t kInternedName = 2;

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
    counters_ = {};
    instants_ = {};
    args_ = {};
  }

 private:
  Track& track_for(uint64_t uuid, uint32_t pid, uint32_t tid, bool is_thread) {
    auto [it, inserted] = track_index_.try_emplace(uuid, tracks_.size());
    if (inserted) tracks_.push_back(Track{uuid, pid, tid, is_thread, {}});
    return tracks_[it->second];
  }
  void process_track(uint32_t pid) { track_for(process_track_uuid(pid), pid, 0, false); }

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
    for (bool threads : {false, true}) {
      for (const auto& track : tracks_) {
        if (track.is_thread == threads) write_track_descriptor(track);
      }
    }
  }

  void write_track_descriptor(const Track& track) {
    begin_sequence_packet();
    {
      auto descriptor = writer_.message(pb::kTrackDescriptor);
      writer_.add_varint(pb::kTrackUuid, track.uuid);
      if (track.is_thread) {
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
    size_t next_counter = 0, next_instant = 0;
    auto others_until = [&](uint64_t ts) {
      while (next_counter < counters_.size() && counters_[next_counter].ts <= ts)
        write_counter_event(counters_[next_counter++]);
      while (next_instant < instants_.size() && instants_[next_instant].ts <= ts)
        write_instant_event(instants_[next_instant++]);
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
  std::vector<CounterTrack> counter_tracks_;
  std::map<std::pair<uint32_t, std::string>, size_t> counter_index_;
  std::vector<CounterValue> counters_;
  std::vector<CounterTrack> instant_tracks_;
  std::map<std::string, size_t> instant_index_;
  std::vector<SliceRecord> instants_;
  proto::ProtoWriter args_;    // DebugAnnotation fields of all slices, back to back
  proto::ProtoWriter writer_;  // pending output, flushed in chunks
};

}  // namespace

std::unique_ptr<TimelineSink> make_perfetto_writer(std::ostream& out) {
  return std::make_unique<PerfettoWriter>(out);
}

}  // namespace eacgm
