// profile.proto (github.com/google/pprof/proto/profile.proto), the fields eacgm fills:
// Profile{1 sample_type, 2 sample, 3 mapping, 4 location, 5 function, 6 string_table,
// 9 time_nanos, 10 duration_nanos, 11 period_type, 12 period, 14 default_sample_type};
// ValueType{1 type, 2 unit};
// Sample{1 location_id (packed), 2 value (packed), 3 label}; Label{1 key, 2 str, 3 num};
// Mapping{1 id, 5 filename, 7 has_functions}; Location{1 id, 2 mapping_id, 4 line};
// Line{1 function_id, 2 line}; Function{1 id, 2 name, 3 system_name, 4 filename}.
#include "export/pprof.h"

#include <zlib.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "export/protobuf_writer.h"
#include "report/profile.h"
#include "util/error.h"

namespace eacgm {
namespace {

class StringTable {
 public:
  StringTable() { id(""); }  // index 0 is the empty string
  int64_t id(const std::string& s) {
    auto [it, fresh] = ids_.try_emplace(s, int64_t(strings_.size()));
    if (fresh) strings_.push_back(s);
    return it->second;
  }
  const std::vector<std::string>& strings() const { return strings_; }

 private:
  std::unordered_map<std::string, int64_t> ids_;
  std::vector<std::string> strings_;
};

void packed(proto::ProtoWriter& w, uint32_t field, const std::vector<uint64_t>& values) {
  std::string bytes;
  for (uint64_t v : values) proto::append_varint(bytes, v);
  w.add_bytes(field, bytes);
}

// Native modules as mappings (their code named by eacgm already: has_functions), the one in
// most CPU samples first (pprof calls the first mapping the profile's "File"); one location per
// frame, one function per (name, file).
void write_locations(proto::ProtoWriter& w, StringTable& strings,
                     const std::vector<const ProfileFrame*>& locations,
                     std::map<std::string, uint64_t>& module_weight) {
  std::vector<std::pair<uint64_t, std::string>> by_weight;
  for (const ProfileFrame* f : locations)
    if (!f->python && !f->file.empty()) by_weight.emplace_back(module_weight[f->file], f->file);
  std::sort(by_weight.begin(), by_weight.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::map<std::string, uint64_t> mappings;
  for (const auto& [w_, file] : by_weight) mappings.try_emplace(file, mappings.size() + 1);
  std::vector<std::pair<uint64_t, std::string>> ordered;
  for (const auto& [file, id] : mappings) ordered.emplace_back(id, file);
  std::sort(ordered.begin(), ordered.end());
  for (const auto& [id, file] : ordered) {
    auto m = w.message(3);
    w.add_varint(1, id);
    w.add_int(5, strings.id(file));
    w.add_bool(7, true);
  }
  // one location per frame, one function per (name, file)
  std::map<std::pair<std::string, std::string>, uint64_t> functions;
  for (size_t i = 0; i < locations.size(); ++i) {
    const ProfileFrame& f = *locations[i];
    uint64_t function = functions.try_emplace({f.name, f.file}, functions.size() + 1).first->second;
    auto m = w.message(4);
    w.add_varint(1, i + 1);
    if (!f.python && !f.file.empty()) w.add_varint(2, mappings.at(f.file));
    auto line = w.message(4);
    w.add_varint(1, function);
    if (f.line > 0) w.add_int(2, f.line);
  }
  for (const auto& [name_file, id] : functions) {
    auto m = w.message(5);
    w.add_varint(1, id);
    w.add_int(2, strings.id(name_file.first));
    w.add_int(3, strings.id(name_file.first));
    w.add_int(4, strings.id(name_file.second));
  }
}

// The string table and the fields after it: last, when every string is in the table.
std::string profile_tail(StringTable& strings, int64_t start_realtime_ns, int64_t duration_ns,
                         int64_t period, bool with_off) {
  proto::ProtoWriter tail;
  for (const auto& s : strings.strings()) tail.add_string(6, s);
  if (start_realtime_ns > 0) tail.add_int(9, start_realtime_ns);
  if (duration_ns > 0) tail.add_int(10, duration_ns);
  {
    auto m = tail.message(11);
    // (the ids of "cpu" and "nanoseconds" are taken above)
    tail.add_int(1, strings.id("cpu"));
    tail.add_int(2, strings.id("nanoseconds"));
  }
  tail.add_int(12, period);
  // pprof shows the last sample type unless told: the CPU time, not the waits
  if (with_off) tail.add_int(14, strings.id("cpu"));
  return std::string(tail.data());
}

}  // namespace

std::string pprof_profile(const CpuProfile& cpu, const CpuProfile* off_cpu,
                          int64_t start_realtime_ns, int64_t duration_ns) {
  proto::ProtoWriter w;
  StringTable strings;
  const int64_t period = cpu.hz() ? int64_t(1'000'000'000 / cpu.hz()) : 0;
  auto value_type = [&](uint32_t field, const char* type, const char* unit) {
    auto m = w.message(field);
    w.add_int(1, strings.id(type));
    w.add_int(2, strings.id(unit));
  };
  const bool with_off = off_cpu && !off_cpu->empty();
  value_type(1, "samples", "count");
  value_type(1, "cpu", "nanoseconds");
  if (with_off) value_type(1, "off_cpu", "nanoseconds");

  // The frames of both profiles as one table: a location per distinct frame (a Python function
  // at another line is another location of the same function)
  std::map<std::tuple<std::string, std::string, int64_t, bool>, uint64_t> location_ids;
  std::vector<const ProfileFrame*> locations;  // location id - 1
  auto location_of = [&](const ProfileFrame& f) {
    auto [it, fresh] =
        location_ids.try_emplace({f.name, f.file, f.line, f.python}, locations.size() + 1);
    if (fresh) locations.push_back(&f);
    return it->second;
  };
  // per profile, weight per (stack, pid, tid); the values of a sample of each kind
  struct Part {
    const CpuProfile* profile;
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint64_t> weights;
  };
  std::vector<Part> parts{{&cpu, {}}};
  if (with_off) parts.push_back({off_cpu, {}});
  const int64_t pid_key = strings.id("pid"), tid_key = strings.id("tid");
  std::map<std::string, uint64_t> module_weight;  // by samples (cpu), then by time blocked
  for (Part& part : parts) {
    const bool off = part.profile != &cpu;
    for (const auto& s : part.profile->samples()) part.weights[{s.stack, s.pid, s.tid}] += s.weight;
    for (const auto& [key, n] : part.weights) {
      const auto& [stack, pid, tid] = key;
      const auto& frames = part.profile->stacks()[stack];
      if (frames.empty()) continue;
      auto m = w.message(2);
      std::vector<uint64_t> ids;
      std::set<std::string> in;
      for (uint32_t f : frames) {
        const ProfileFrame& frame = part.profile->frames()[f];
        ids.push_back(location_of(frame));
        if (!frame.python && !frame.file.empty()) in.insert(frame.file);
      }
      for (const auto& file : in) module_weight[file] += off ? 0 : n;
      packed(w, 1, ids);
      if (off)
        packed(w, 2, {0, 0, n});
      else if (with_off)
        packed(w, 2, {n, n * uint64_t(period), 0});
      else
        packed(w, 2, {n, n * uint64_t(period)});
      for (auto [k, v] : {std::pair<int64_t, uint32_t>{pid_key, pid}, {tid_key, tid}}) {
        auto label = w.message(3);
        w.add_int(1, k);
        w.add_int(3, int64_t(v));
      }
    }
  }

  write_locations(w, strings, locations, module_weight);
  return std::string(w.data()) +
         profile_tail(strings, start_realtime_ns, duration_ns, period, with_off);
}

std::string gzip(const std::string& data) {
  z_stream z{};
  // 15 + 16: a gzip header and trailer around the deflate stream
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    fail("cannot compress the profile: zlib: {}", z.msg ? z.msg : "deflateInit2 failed");
  std::string out(deflateBound(&z, uLong(data.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = uInt(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) fail("cannot compress the profile: zlib error {}", rc);
  return out;
}

}  // namespace eacgm
