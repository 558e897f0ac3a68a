// Chrome trace-event JSON writer: streams one event per line, never holding the trace in memory.
#include "export/chrome_json.h"

#include <cmath>
#include <cstdint>
#include <iterator>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace eacgm {
namespace {

// Comms are cut at 15 bytes by the kernel and may end mid UTF-8 sequence; replace such bytes
// (U+FFFD) instead of failing the whole export.
std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

class ChromeJsonWriter final : public TimelineSink {
 public:
  explicit ChromeJsonWriter(std::ostream& out) : out_(out) { out_ << "{\"traceEvents\":["; }

  void add_process(const TimelineProcess& process) override {
    line_.clear();
    append(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":{}}}}})",
           process.pid, json_string(process.name));
    write_event();
  }

  void add_thread(const TimelineThread& thread) override {
    line_.clear();
    append(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{}}}}})",
           thread.pid, thread.tid, json_string(thread.name));
    write_event();
  }

  void add_slice(const TimelineSlice& slice) override {
    line_.clear();
    append(R"({{"ph":"X","name":{},"cat":{},"pid":{},"tid":{},"ts":)", cached(slice.name),
           cached(slice.category), slice.pid, slice.tid);
    append_microseconds(slice.ts_ns);
    line_ += R"(,"dur":)";
    append_microseconds(slice.dur_ns);
    if (!slice.args.empty()) append_args(slice.args);
    line_ += '}';
    write_event();
    if (slice.flow_out) flow_event('s', slice.flow_out, slice.pid, slice.tid, slice.ts_ns);
  }

  // GPU work on a thread of its own per device and stream ("GPU 0 stream 7"), with the flow
  // arrow from its launch ending on it.
  void add_gpu_slice(const TimelineGpuSlice& g) override {
    uint32_t tid = kGpuTidBase + g.device * 65536 + (g.stream & 0xffff);
    if (gpu_threads_.insert({g.pid, tid}).second)
      add_thread({g.pid, tid,
                  g.track.empty() ? fmt::format("GPU {} stream {}", g.device, g.stream) : g.track});
    line_.clear();
    append(R"({{"ph":"X","name":{},"cat":{},"pid":{},"tid":{},"ts":)", cached(g.name),
           cached(g.category), g.pid, tid);
    append_microseconds(g.ts_ns);
    line_ += R"(,"dur":)";
    append_microseconds(g.dur_ns);
    if (!g.args.empty()) append_args(g.args);
    line_ += '}';
    write_event();
    if (g.flow_in) flow_event('f', g.flow_in, g.pid, tid, g.ts_ns);
  }

  // A counter event ("C"); machine-wide tracks live in a process of their own, pid 0.
  void add_counter(const TimelineCounter& counter) override {
    if (counter.pid == 0 && !machine_named_) {
      machine_named_ = true;
      add_process({0, "machine (gpu, network, disks)"});
    }
    line_.clear();
    append(R"({{"ph":"C","name":{},"pid":{},"ts":)", cached(counter.track), counter.pid);
    append_microseconds(counter.ts_ns);
    line_ += R"(,"args":{"value":)";
    append_value(counter.value);
    line_ += "}}";
    write_event();
  }

  // A global instant event ("i", scope "g"): a line across the whole timeline.
  void add_instant(const TimelineInstant& instant) override {
    line_.clear();
    append(R"({{"ph":"i","s":"g","name":{},"cat":{},"pid":0,"tid":0,"ts":)", cached(instant.name),
           cached(instant.category));
    append_microseconds(instant.ts_ns);
    if (!instant.args.empty()) append_args(instant.args);
    line_ += '}';
    write_event();
  }

  void finish() override {
    if (finished_) return;
    finished_ = true;
    out_ << "\n],\"displayTimeUnit\":\"ns\"}\n";
    out_.flush();
    check_stream();
  }

 private:
  template <typename... Args>
  void append(fmt::format_string<Args...> format, Args&&... args) {
    fmt::format_to(std::back_inserter(line_), format, std::forward<Args>(args)...);
  }

  // Chrome's unit is the microsecond; three decimals keep every nanosecond exactly.
  void append_microseconds(uint64_t ns) { append("{}.{:03}", ns / 1000, ns % 1000); }

  // Chrome's flow events: "s" inside the launch's slice, "f" (bound to the enclosing slice,
  // "bp":"e") at the start of the GPU work.
  void flow_event(char phase, uint64_t id, uint32_t pid, uint32_t tid, uint64_t ts_ns) {
    line_.clear();
    append(R"({{"ph":"{}","name":"launch","cat":"gpu","id":{},"pid":{},"tid":{},"ts":)", phase, id,
           pid, tid);
    append_microseconds(ts_ns);
    if (phase == 'f') line_ += R"(,"bp":"e")";
    line_ += '}';
    write_event();
  }

  void append_args(const std::vector<TimelineArg>& args) {
    line_ += R"(,"args":{)";
    for (size_t i = 0; i < args.size(); ++i) {
      if (i > 0) line_ += ',';
      line_ += cached(args[i].name);
      line_ += ':';
      std::visit([this](const auto& value) { append_value(value); }, args[i].value);
    }
    line_ += '}';
  }
  void append_value(int64_t value) { append("{}", value); }
  void append_value(uint64_t value) { append("{}", value); }
  void append_value(double value) {
    if (std::isfinite(value)) {
      append("{}", value);  // shortest form that reads back to the same double
    } else {
      line_ += "null";  // JSON has no NaN or infinity
    }
  }
  void append_value(const std::string& value) { line_ += json_string(value); }

  // Names, categories and arg keys repeat across millions of events: escape each once.
  const std::string& cached(const std::string& text) {
    auto it = escaped_.find(text);
    if (it == escaped_.end()) it = escaped_.emplace(text, json_string(text)).first;
    return it->second;
  }

  void write_event() {
    if (!first_event_) out_.put(',');
    first_event_ = false;
    out_.put('\n');
    out_.write(line_.data(), static_cast<std::streamsize>(line_.size()));
    check_stream();
  }

  void check_stream() const {
    if (!out_) fail("cannot write trace: disk full or output closed (check free space)");
  }

  std::ostream& out_;
  bool first_event_ = true;
  bool finished_ = false;
  bool machine_named_ = false;
  // GPU streams as threads: tids far above any real one (Linux pids stay below 2^22)
  static constexpr uint32_t kGpuTidBase = 0x40000000;
  std::set<std::pair<uint32_t, uint32_t>> gpu_threads_;
  std::string line_;  // the event being formatted; reused so its capacity is kept
  std::unordered_map<std::string, std::string> escaped_;
};

}  // namespace

std::unique_ptr<TimelineSink> make_chrome_json_writer(std::ostream& out) {
  return std::make_unique<ChromeJsonWriter>(out);
}

}  // namespace eacgm
