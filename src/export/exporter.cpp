// Reads a recording and feeds the timeline writers.
#include "export/exporter.h"

#include "export/pprof.h"
#include "report/profile.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "export/chrome_json.h"
#include "export/perfetto.h"
#include "store/reader.h"
#include "store/sqlite_util.h"
#include "util/error.h"
#include "util/output_file.h"

namespace eacgm {
namespace {

// A call row's slice from its first columns: ts_ns, dur_ns, pid, tid, name.
TimelineSlice call_slice(const Statement& s, int64_t to_real, const char* layer) {
  TimelineSlice slice;
  slice.ts_ns = uint64_t(s.ns_at(0) + to_real);
  slice.dur_ns = uint64_t(s.ns_at(1));
  slice.pid = uint32_t(s.int_at(2));
  slice.tid = uint32_t(s.int_at(3));
  slice.category = layer;
  slice.name = std::string(s.text_at(4));
  return slice;
}

// Python stacks of calls (python_stacks), each as one text: innermost frame first.
using PythonStacks = std::map<int64_t, std::string>;

PythonStacks python_stacks(const RecordingReader& rec) {
  PythonStacks stacks;
  if (!rec.has_table("python_stacks")) return stacks;
  rec.query("SELECT id, name, file, line FROM python_stacks ORDER BY id, depth", [&](Statement& s) {
    std::string& text = stacks[s.int_at(0)];
    text += fmt::format("{}{} ({}:{})", text.empty() ? "" : "\n", s.text_at(1), s.text_at(2),
                        s.null_at(3) ? std::string("?") : std::to_string(s.int_at(3)));
  });
  return stacks;
}

// The python_stack arg of a call slice whose py_stack column is `col`.
void add_python_stack(TimelineSlice& slice, const Statement& s, int col,
                      const PythonStacks& stacks) {
  if (s.null_at(col)) return;
  if (auto it = stacks.find(s.int_at(col)); it != stacks.end())
    slice.args.push_back({"python_stack", it->second});
}

// How long the calling thread waited for a CPU during the call (runq_ns at `col`), when it did.
void add_cpu_wait(TimelineSlice& slice, const Statement& s, int col) {
  if (!s.null_at(col) && s.int_at(col) > 0)
    slice.args.push_back({"cpu_wait_us", double(s.int_at(col)) / 1e3});
}

void add_python_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  if (!rec.has_table("python_calls")) return;
  rec.query("SELECT ts_ns, dur_ns, pid, tid, name, file, line, depth, " +
                rec.column_or("python_calls", "runq_ns", "NULL") +
                " FROM python_calls ORDER BY ts_ns",
            [&](Statement& s) {
              TimelineSlice slice = call_slice(s, to_real, "python");
              slice.args.push_back({"file", std::string(s.text_at(5))});
              slice.args.push_back({"line", s.int_at(6)});
              add_cpu_wait(slice, s, 8);
              sink.add_slice(slice);
            });
}

void add_cuda_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real,
                     const PythonStacks& stacks) {
  rec.query(
      "SELECT ts_ns, dur_ns, pid, tid, name, ret, bytes, memcpy_kind, stream, grid_x, grid_y, "
      "grid_z, block_x, block_y, block_z, shared_mem, kernel, " +
          std::string(stacks.empty() ? "NULL" : "py_stack") + ", " +
          rec.column_or("cuda_calls", "runq_ns", "NULL") + " FROM cuda_calls ORDER BY ts_ns",
      [&](Statement& s) {
        TimelineSlice slice = call_slice(s, to_real, "cuda");
        if (!s.null_at(16)) slice.args.push_back({"kernel", std::string(s.text_at(16))});
        if (!s.null_at(6)) slice.args.push_back({"bytes", s.int_at(6)});
        if (!s.null_at(7)) slice.args.push_back({"kind", std::string(s.text_at(7))});
        if (!s.null_at(8)) slice.args.push_back({"stream", uint64_t(s.int_at(8))});
        if (!s.null_at(9)) {
          slice.args.push_back({"grid", fmt::format("({}, {}, {})", s.int_at(9), s.int_at(10),
                                                    s.int_at(11))});
          slice.args.push_back({"block", fmt::format("({}, {}, {})", s.int_at(12),
                                                     s.int_at(13), s.int_at(14))});
          slice.args.push_back({"shared_mem", s.int_at(15)});
        }
        slice.args.push_back({"ret", s.int_at(5)});
        add_cpu_wait(slice, s, 18);
        add_python_stack(slice, s, 17, stacks);
        sink.add_slice(slice);
      });
}

void add_comm_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real,
                     const PythonStacks& stacks) {
  if (!rec.has_table("comm_calls")) return;
  rec.query(
      "SELECT ts_ns, dur_ns, pid, tid, name, ret, count, datatype, bytes, redop, peer, comm, "
      "rank, nranks, stream, " + std::string(stacks.empty() ? "NULL" : "py_stack") + ", " +
          rec.column_or("comm_calls", "runq_ns", "NULL") + " FROM comm_calls ORDER BY ts_ns",
      [&](Statement& s) {
        TimelineSlice slice = call_slice(s, to_real, "comm");
        if (!s.null_at(6)) slice.args.push_back({"count", s.int_at(6)});
        if (!s.null_at(7)) slice.args.push_back({"datatype", std::string(s.text_at(7))});
        if (!s.null_at(8)) slice.args.push_back({"bytes", s.int_at(8)});
        if (!s.null_at(9)) slice.args.push_back({"op", std::string(s.text_at(9))});
        if (!s.null_at(10)) slice.args.push_back({"root_or_peer", s.int_at(10)});
        if (!s.null_at(11)) slice.args.push_back({"comm", uint64_t(s.int_at(11))});
        if (!s.null_at(12)) slice.args.push_back({"rank", s.int_at(12)});
        if (!s.null_at(13)) slice.args.push_back({"nranks", s.int_at(13)});
        if (!s.null_at(14)) slice.args.push_back({"stream", uint64_t(s.int_at(14))});
        slice.args.push_back({"ret", s.int_at(5)});
        add_cpu_wait(slice, s, 16);
        add_python_stack(slice, s, 15, stacks);
        sink.add_slice(slice);
      });
}

// Operators nest (aten::linear around aten::addmm): their slices nest on the thread's track.
void add_torch_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real,
                      const PythonStacks& stacks) {
  if (!rec.has_table("torch_calls")) return;
  rec.query("SELECT ts_ns, dur_ns, pid, tid, name, py_stack, " +
                rec.column_or("torch_calls", "runq_ns", "NULL") +
                " FROM torch_calls ORDER BY ts_ns, dur_ns DESC",
            [&](Statement& s) {
              TimelineSlice slice = call_slice(s, to_real, "torch");
              add_cpu_wait(slice, s, 6);
              add_python_stack(slice, s, 5, stacks);
              sink.add_slice(slice);
            });
}

// Turns interval samples into counter tracks: each value holds from the start of its interval,
// and a track drops to zero where it has no sample (rows are written only for active intervals).
class CounterSeries {
 public:
  explicit CounterSeries(TimelineSink& sink) : sink_(sink) {}
  void add(uint32_t pid, const std::string& track, uint64_t end_ns, uint64_t interval_ns,
           double value) {
    uint64_t start = end_ns - std::min(interval_ns, end_ns);
    auto [it, fresh] = last_end_.try_emplace({pid, track}, start);
    if (!fresh && start > it->second) sink_.add_counter({it->second, pid, track, 0});
    sink_.add_counter({start, pid, track, value});
    it->second = end_ns;
  }
  void finish() {
    for (const auto& [key, end] : last_end_) sink_.add_counter({end, key.first, key.second, 0});
  }

 private:
  TimelineSink& sink_;
  std::map<std::pair<uint32_t, std::string>, uint64_t> last_end_;
};

void add_host_counters(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  if (!rec.has_table("host_samples")) return;
  CounterSeries series(sink);
  const std::string own_netns = rec.meta_or("netns", "");
  rec.query(
      "SELECT ts_ns, interval_ns, scope, id, netns, name, runq_wait_ns, runq_waits, "
      "involuntary_switches, oncpu_ns, tx_bytes, rx_bytes, io_bytes, read_bytes, write_bytes, "
      "io_ops, io_latency_ns, " +
          rec.columns_or("host_samples",
                         {"tcp_retransmits", "page_faults", "reclaim_ns", "pagein_bytes"}) +
          " FROM host_samples WHERE interval_ns > 0 ORDER BY ts_ns",
      [&](Statement& s) {
        uint64_t end = uint64_t(s.ns_at(0) + to_real), dt = uint64_t(s.ns_at(1));
        double per_s = 1e9 / double(dt), mb_per_s = per_s / 1e6;
        std::string scope(s.text_at(2)), name(s.text_at(5));
        auto put = [&](uint32_t pid, const std::string& track, double v) {
          series.add(pid, track, end, dt, v);
        };
        if (scope == "process") {
          uint32_t pid = uint32_t(s.int_at(3));
          double waits = double(s.int_at(7));
          put(pid, "cpu (%)", 100.0 * double(s.int_at(9)) / double(dt));
          put(pid, "run-queue wait, mean (us)", waits ? double(s.int_at(6)) / waits / 1e3 : 0);
          put(pid, "involuntary switches (/s)", double(s.int_at(8)) * per_s);
          put(pid, "socket tx (MB/s)", double(s.int_at(10)) * mb_per_s);
          put(pid, "socket rx (MB/s)", double(s.int_at(11)) * mb_per_s);
          put(pid, "block I/O (MB/s)", double(s.int_at(12)) * mb_per_s);
          put(pid, "TCP retransmits (/s)", double(s.int_at(17)) * per_s);
          put(pid, "page faults (/s)", double(s.int_at(18)) * per_s);
          put(pid, "memory reclaim (ms/s)", double(s.int_at(19)) / 1e6 * per_s);
          put(pid, "page-cache fills (MB/s)", double(s.int_at(20)) * mb_per_s);
        } else if (scope == "net") {
          if (std::to_string(s.int_at(4)) != own_netns)
            name += fmt::format(" (netns {})", s.int_at(4));
          put(0, name + " tx (MB/s)", double(s.int_at(10)) * mb_per_s);
          put(0, name + " rx (MB/s)", double(s.int_at(11)) * mb_per_s);
        } else if (scope == "disk") {
          double ops = double(s.int_at(15));
          put(0, name + " read (MB/s)", double(s.int_at(13)) * mb_per_s);
          put(0, name + " write (MB/s)", double(s.int_at(14)) * mb_per_s);
          put(0, name + " latency, mean (ms)", ops ? double(s.int_at(16)) / ops / 1e6 : 0);
        }
      });
  series.finish();
}

void add_gpu_counters(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  if (!rec.has_table("gpu_samples")) return;
  // Samples are instantaneous readings: each value holds until the next one.
  rec.query(
      "SELECT ts_ns, gpu, sm_util_pct, mem_util_pct, mem_used_bytes, temperature_c, power_w, "
      "sm_clock_mhz, mem_clock_mhz, pcie_tx_bytes_per_s, pcie_rx_bytes_per_s, "
      "nvlink_tx_bytes_per_s, nvlink_rx_bytes_per_s, throttle_reasons FROM gpu_samples "
      "ORDER BY ts_ns",
      [&](Statement& s) {
        uint64_t ts = uint64_t(s.ns_at(0) + to_real);
        std::string gpu = fmt::format("GPU {} ", s.int_at(1));
        auto put = [&](int col, const char* track, double scale) {
          if (!s.null_at(col)) sink.add_counter({ts, 0, gpu + track, s.double_at(col) * scale});
        };
        put(2, "SM util (%)", 1);
        put(3, "memory util (%)", 1);
        put(4, "memory used (GiB)", 1.0 / (1ull << 30));
        put(5, "temperature (C)", 1);
        put(6, "power (W)", 1);
        put(7, "SM clock (MHz)", 1);
        put(8, "memory clock (MHz)", 1);
        put(9, "PCIe tx (MB/s)", 1e-6);
        put(10, "PCIe rx (MB/s)", 1e-6);
        put(11, "NVLink tx (MB/s)", 1e-6);
        put(12, "NVLink rx (MB/s)", 1e-6);
        put(13, "throttle reasons (bits)", 1);
      });
  rec.query(
      "SELECT ts_ns, gpu, pid, sm_util_pct, mem_util_pct, used_memory_bytes "
      "FROM gpu_process_samples ORDER BY ts_ns",
      [&](Statement& s) {
        uint64_t ts = uint64_t(s.ns_at(0) + to_real);
        uint32_t pid = uint32_t(s.int_at(2));
        std::string gpu = fmt::format("GPU {} ", s.int_at(1));
        if (!s.null_at(3)) sink.add_counter({ts, pid, gpu + "SM util (%)", s.double_at(3)});
        if (!s.null_at(4)) sink.add_counter({ts, pid, gpu + "memory util (%)", s.double_at(4)});
        if (!s.null_at(5))
          sink.add_counter({ts, pid, gpu + "memory (MiB)", s.double_at(5) / (1 << 20)});
      });
  // An XID is an event: a spike to its number on the GPU's track, back to 0 just after.
  rec.query("SELECT ts_ns, gpu, xid FROM gpu_events ORDER BY ts_ns", [&](Statement& s) {
    uint64_t ts = uint64_t(s.ns_at(0) + to_real);
    std::string track = fmt::format("GPU {} XID", s.int_at(1));
    sink.add_counter({ts, 0, track, double(s.int_at(2))});
    sink.add_counter({ts + 1'000'000, 0, track, 0});
  });
}

// Anomalies from eacgm detect: a marker each on an "anomalies" track, with cause and score.
void add_anomalies(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  if (!rec.has_table("anomalies")) return;
  rec.query("SELECT ts_ns, dur_ns, layer, name, score, threshold, cause, features FROM anomalies "
            "ORDER BY ts_ns",
            [&](Statement& s) {
              TimelineInstant i;
              i.ts_ns = uint64_t(s.ns_at(0) + to_real);
              i.track = "anomalies";
              i.category = "anomaly";
              i.name = std::string(s.text_at(6));
              i.args = {{"layer", std::string(s.text_at(2))},
                        {"operation", std::string(s.text_at(3))},
                        {"duration_ns", s.int_at(1)},
                        {"score", s.double_at(4)},
                        {"threshold", s.double_at(5)},
                        {"features", std::string(s.text_at(7))}};
              sink.add_instant(i);
            });
}

}  // namespace

// The off-CPU profile's waits of a sampling period or more (all of them are recorded, whole) as
// slices on their thread, named by where the thread blocked: its innermost Python function,
// else its innermost native one; the stacks as arguments. Shorter waits are only sampled: the
// profile, not the timeline, shows them.
void add_offcpu_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real,
                       const PythonStacks& stacks) {
  if (!rec.has_table("offcpu_samples")) return;
  std::map<int64_t, std::string> native;  // id -> innermost frames, one a line
  if (rec.has_table("native_stacks"))
    rec.query("SELECT id, name, module FROM native_stacks WHERE depth < 8 ORDER BY id, depth",
              [&](Statement& s) {
                std::string& text = native[s.int_at(0)];
                text +=
                    fmt::format("{}{} ({})", text.empty() ? "" : "\n", s.text_at(1), s.text_at(2));
              });
  auto first_line = [](const std::string& text) {
    std::string line = text.substr(0, text.find('\n'));
    return line.substr(0, line.rfind(" ("));
  };
  rec.query(
      "SELECT ts_ns, dur_ns, pid, tid, native_stack, py_stack FROM offcpu_samples WHERE "
      "weight_ns = dur_ns AND dur_ns >= 0 ORDER BY ts_ns",
      [&](Statement& s) {
        TimelineSlice slice{uint64_t(s.int_at(0) + to_real),
                            uint64_t(s.int_at(1)),
                            uint32_t(s.int_at(2)),
                            uint32_t(s.int_at(3)),
                            "off-cpu",
                            "blocked",
                            {}};
        auto py = s.null_at(5) ? stacks.end() : stacks.find(s.int_at(5));
        auto nat = s.null_at(4) ? native.end() : native.find(s.int_at(4));
        if (py != stacks.end())
          slice.name = "blocked in " + first_line(py->second);
        else if (nat != native.end())
          slice.name = "blocked in " + first_line(nat->second);
        if (py != stacks.end()) slice.args.push_back({"python_stack", py->second});
        if (nat != native.end()) slice.args.push_back({"native_stack", nat->second});
        sink.add_slice(slice);
      });
}

// The CPU profile's samples (record --sample-hz), each with its Python and native stack.
void add_stack_samples(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  CpuProfile profile(rec);
  const auto& frames = profile.frames();
  for (size_t id = 0; id < profile.stacks().size(); ++id) {
    std::vector<TimelineFrame> stack;
    for (uint32_t f : profile.stacks()[id])
      stack.push_back({frames[f].name, frames[f].file, frames[f].line, frames[f].python});
    sink.add_stack(uint32_t(id), stack);
  }
  for (const auto& s : profile.samples())
    sink.add_stack_sample({uint64_t(int64_t(s.ts_ns) + to_real), s.pid, s.tid, s.stack});
}

void emit_timeline(const RecordingReader& rec, TimelineSink& sink) {
  int64_t to_real = rec.monotonic_to_realtime_ns();
  std::set<uint32_t> pids;
  // the latest row of a pid names it (after exec)
  // the latest row of a pid names it (after exec); merged recordings and ranks of a job say
  // where each process ran: "node-b rank 1: python3 train.py"
  rec.query("SELECT pid, COALESCE(NULLIF(command, ''), name), " +
                rec.columns_or("processes", {"host", "rank"}, "NULL") +
                " FROM processes ORDER BY rowid",
            [&](Statement& s) {
              uint32_t pid = uint32_t(s.int_at(0));
              pids.insert(pid);
              std::string where;
              if (!s.null_at(2)) where = std::string(s.text_at(2));
              if (!s.null_at(3))
                where += fmt::format("{}rank {}", where.empty() ? "" : " ", s.int_at(3));
              std::string name(s.text_at(1));
              sink.add_process({pid, where.empty() ? name : where + ": " + name});
            });
  // processes seen only through their calls (e.g. --all) still get a track
  rec.query("SELECT DISTINCT pid FROM threads", [&](Statement& s) {
    uint32_t pid = uint32_t(s.int_at(0));
    if (pids.insert(pid).second) sink.add_process({pid, fmt::format("pid {}", pid)});
  });
  // a thread's latest name (after an exec, the program it became)
  rec.query("SELECT pid, tid, name FROM threads WHERE rowid IN "
            "(SELECT max(rowid) FROM threads GROUP BY pid, tid)",
            [&](Statement& s) {
    sink.add_thread({uint32_t(s.int_at(0)), uint32_t(s.int_at(1)), std::string(s.text_at(2))});
  });
  PythonStacks stacks = python_stacks(rec);  // none in recordings made before the python layer
  add_cuda_slices(rec, sink, to_real, stacks);
  add_comm_slices(rec, sink, to_real, stacks);
  add_torch_slices(rec, sink, to_real, stacks);
  add_python_slices(rec, sink, to_real);
  add_offcpu_slices(rec, sink, to_real, stacks);
  add_host_counters(rec, sink, to_real);
  add_gpu_counters(rec, sink, to_real);
  add_anomalies(rec, sink, to_real);
  add_stack_samples(rec, sink, to_real);
}

void export_recording(const std::string& db, const std::string& out, ExportFormat format,
                      bool force) {
  RecordingReader rec(db);
  if (format == ExportFormat::Pprof) {
    check_output_file(out, force, "--pprof");
    CpuProfile profile(rec), off_cpu(rec, ProfileKind::OffCpu);
    if (profile.empty() && off_cpu.empty())
      fail("{} has no CPU profile: record it with --sample-hz above 0 (the default is 99; "
           "recordings from eacgm versions before profiles have none)",
           db);
    int64_t start = rec.meta_ns("start_monotonic_ns"), end = rec.meta_ns("end_monotonic_ns");
    std::string bytes = gzip(pprof_profile(
        profile, &off_cpu, start + rec.monotonic_to_realtime_ns(), end > start ? end - start : 0));
    write_then_rename(out, [&](std::ostream& file) { file.write(bytes.data(), std::streamsize(bytes.size())); });
    return;
  }
  check_output_file(out, force, format == ExportFormat::Perfetto ? "--perfetto" : "--chrome");
  write_then_rename(out, [&](std::ostream& file) {
    auto sink = format == ExportFormat::Perfetto ? make_perfetto_writer(file)
                                                 : make_chrome_json_writer(file);
    emit_timeline(rec, *sink);
    sink->finish();
  });
}

}  // namespace eacgm
