// Reads the recording's tables back as rows: see table_readers.h.
#include "store/table_readers.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "store/reader.h"
#include "store/sqlite_util.h"

namespace eacgm {
namespace {

// "SELECT <columns> FROM table ...", each column the table lacks (older recordings) as NULL
std::string select(const RecordingReader& rec, const std::string& table,
                   const std::vector<std::string>& columns, const std::string& rest) {
  return "SELECT " + rec.columns_or(table, columns, "NULL") + " FROM " + table + " " + rest;
}

// NULL is the writer's "unknown": -1 for counts, sizes, ranks and waits
int64_t or_unknown(const Statement& s, int col) { return s.null_at(col) ? -1 : s.int_at(col); }

// ts_ns, dur_ns, pid, tid, name: the first five columns of every call table
template <typename Row>
void read_call(const Statement& s, Row& r) {
  r.ts_ns = uint64_t(s.ns_at(0));
  r.dur_ns = uint64_t(s.ns_at(1));
  r.pid = uint32_t(s.int_at(2));
  r.tid = uint32_t(s.int_at(3));
  r.name = s.text_at(4);
}

}  // namespace

void each_cuda_call(const RecordingReader& rec,
                    const std::function<void(const CudaCallRow&)>& row) {
  if (!rec.has_table("cuda_calls")) return;
  rec.query(select(rec, "cuda_calls",
                   {"ts_ns", "dur_ns", "pid", "tid", "name", "ret", "bytes", "memcpy_kind",
                    "stream", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                    "shared_mem", "kernel", "address", "py_stack", "runq_ns"},
                   "ORDER BY ts_ns"),
            [&](Statement& s) {
              CudaCallRow r;
              read_call(s, r);
              r.ret = s.int_at(5);
              r.bytes = or_unknown(s, 6);
              r.memcpy_kind = s.text_at(7);
              r.has_stream = !s.null_at(8);
              r.stream = uint64_t(s.int_at(8));
              r.is_launch = !s.null_at(9);
              for (int i = 0; i < 3; ++i) {
                r.grid[i] = uint32_t(s.int_at(9 + i));
                r.block[i] = uint32_t(s.int_at(12 + i));
              }
              r.shared_mem = uint64_t(s.int_at(15));
              r.kernel = s.text_at(16);
              r.address = uint64_t(s.int_at(17));
              r.py_stack = s.int_at(18);
              r.runq_ns = or_unknown(s, 19);
              row(r);
            });
}

void each_comm_call(const RecordingReader& rec,
                    const std::function<void(const CommCallRow&)>& row) {
  if (!rec.has_table("comm_calls")) return;
  rec.query(select(rec, "comm_calls",
                   {"ts_ns", "dur_ns", "pid", "tid", "name", "ret", "count", "datatype", "bytes",
                    "redop", "peer", "comm", "rank", "nranks", "stream", "algbw_gbps",
                    "busbw_gbps", "py_stack", "runq_ns", "entry_run_delay_ns", "comm_id",
                    "comm_seq"},
                   "ORDER BY ts_ns"),
            [&](Statement& s) {
              CommCallRow r;
              read_call(s, r);
              r.ret = s.int_at(5);
              r.count = or_unknown(s, 6);
              r.datatype = s.text_at(7);
              r.bytes = or_unknown(s, 8);
              r.redop = s.text_at(9);
              r.peer = or_unknown(s, 10);
              r.comm = uint64_t(s.int_at(11));
              r.rank = or_unknown(s, 12);
              r.nranks = or_unknown(s, 13);
              r.has_stream = !s.null_at(14);
              r.stream = uint64_t(s.int_at(14));
              r.algbw_gbps = s.null_at(15) ? -1 : s.double_at(15);
              r.busbw_gbps = s.null_at(16) ? -1 : s.double_at(16);
              r.py_stack = s.int_at(17);
              r.runq_ns = or_unknown(s, 18);
              r.entry_run_delay_ns = or_unknown(s, 19);
              r.comm_id = uint64_t(s.int_at(20));
              r.seq = or_unknown(s, 21);
              row(r);
            });
}

void each_torch_call(const RecordingReader& rec,
                     const std::function<void(const TorchCallRow&)>& row) {
  if (!rec.has_table("torch_calls")) return;
  rec.query(select(rec, "torch_calls", {"ts_ns", "dur_ns", "pid", "tid", "name", "py_stack", "runq_ns"},
                   "ORDER BY ts_ns, dur_ns DESC"),
            [&](Statement& s) {
              TorchCallRow r;
              read_call(s, r);
              r.py_stack = s.int_at(5);
              r.runq_ns = or_unknown(s, 6);
              row(r);
            });
}

void each_python_call(const RecordingReader& rec,
                      const std::function<void(const PythonCallRow&)>& row) {
  if (!rec.has_table("python_calls")) return;
  rec.query(select(rec, "python_calls",
                   {"ts_ns", "dur_ns", "pid", "tid", "name", "file", "line", "depth", "runq_ns"},
                   "ORDER BY ts_ns"),
            [&](Statement& s) {
              PythonCallRow r;
              read_call(s, r);
              r.file = s.text_at(5);
              r.line = s.int_at(6);
              r.depth = uint32_t(s.int_at(7));
              r.runq_ns = or_unknown(s, 8);
              row(r);
            });
}

void each_python_frame(const RecordingReader& rec,
                       const std::function<void(const PythonStackFrameRow&)>& row) {
  if (!rec.has_table("python_stacks")) return;
  rec.query("SELECT id, depth, name, file, line FROM python_stacks ORDER BY id, depth",
            [&](Statement& s) {
              PythonStackFrameRow r;
              r.id = s.int_at(0);
              r.depth = uint32_t(s.int_at(1));
              r.name = s.text_at(2);
              r.file = s.text_at(3);
              r.line = or_unknown(s, 4);
              row(r);
            });
}

void each_native_frame(const RecordingReader& rec, uint32_t max_depth,
                       const std::function<void(const NativeFrameRow&)>& row) {
  if (!rec.has_table("native_stacks")) return;
  rec.query("SELECT id, depth, name, module FROM native_stacks WHERE depth < " +
                std::to_string(max_depth) + " ORDER BY id, depth",
            [&](Statement& s) {
              NativeFrameRow r;
              r.id = s.int_at(0);
              r.depth = uint32_t(s.int_at(1));
              r.name = s.text_at(2);
              r.module = s.text_at(3);
              row(r);
            });
}

void each_stack_sample(const RecordingReader& rec,
                       const std::function<void(const StackSampleRow&)>& row) {
  if (!rec.has_table("stack_samples")) return;
  rec.query("SELECT ts_ns, pid, tid, native_stack, py_stack FROM stack_samples ORDER BY ts_ns",
            [&](Statement& s) {
              row(StackSampleRow{uint64_t(s.ns_at(0)), uint32_t(s.int_at(1)),
                                 uint32_t(s.int_at(2)), s.int_at(3), s.int_at(4)});
            });
}

namespace {

void offcpu_samples(const RecordingReader& rec, const char* where,
                    const std::function<void(const OffCpuSampleRow&)>& row) {
  if (!rec.has_table("offcpu_samples")) return;
  rec.query(std::string("SELECT ts_ns, dur_ns, weight_ns, pid, tid, native_stack, py_stack FROM "
                        "offcpu_samples ") +
                where + " ORDER BY ts_ns",
            [&](Statement& s) {
              OffCpuSampleRow r;
              r.ts_ns = uint64_t(s.ns_at(0));
              r.dur_ns = uint64_t(s.ns_at(1));
              r.weight_ns = uint64_t(s.ns_at(2));
              r.pid = uint32_t(s.int_at(3));
              r.tid = uint32_t(s.int_at(4));
              r.native_stack = s.int_at(5);
              r.py_stack = s.int_at(6);
              row(r);
            });
}

}  // namespace

void each_offcpu_sample(const RecordingReader& rec,
                        const std::function<void(const OffCpuSampleRow&)>& row) {
  offcpu_samples(rec, "", row);
}

void each_whole_offcpu_wait(const RecordingReader& rec,
                            const std::function<void(const OffCpuSampleRow&)>& row) {
  offcpu_samples(rec, "WHERE weight_ns = dur_ns AND dur_ns >= 0", row);
}

void each_host_sample(const RecordingReader& rec,
                      const std::function<void(const HostSampleRow&)>& row, SampleOrder order) {
  if (!rec.has_table("host_samples")) return;
  // A process's samples carry its name at each sample: one that exec'd (a Python program
  // started through a shell wrapper, as pyenv's python3) would be two processes in every
  // table and chart, "bash" for its first interval; they all take the name it ended with.
  std::map<uint64_t, std::string> last_name;
  each_process(rec, [&](const RecordedProcess& p) {
    if (!p.name.empty()) last_name[p.pid] = p.name;
  });
  rec.query(
      select(rec, "host_samples",
             {"ts_ns", "interval_ns", "scope", "id", "netns", "name", "runq_wait_ns",
              "runq_waits", "runq_max_ns", "voluntary_switches", "involuntary_switches",
              "offcpu_ns", "oncpu_ns", "tx_bytes", "tx_packets", "rx_bytes", "rx_packets",
              "io_ops", "io_bytes", "read_ops", "read_bytes", "write_ops", "write_bytes",
              "io_latency_ns", "io_latency_max_ns", "tcp_retransmits", "page_faults",
              "reclaim_ns", "reclaims", "pagein_bytes", "stall_ns",
              "stall_end_ns", "stalls", "taker_name", "taker_ns", "taker_procs", "taker_pid"},
             order == SampleOrder::by_time ? "ORDER BY ts_ns" : "ORDER BY scope, id, ts_ns"),
      [&](Statement& s) {
        HostSampleRow r;
        std::string_view scope = s.text_at(2);
        if (scope == "process")
          r.scope = HostScope::Process;
        else if (scope == "net")
          r.scope = HostScope::NetDevice;
        else if (scope == "disk")
          r.scope = HostScope::Disk;
        else if (scope == "cpu")
          r.scope = HostScope::Cpu;
        else
          return;  // a scope of a later version
        auto u = [&](int col) { return uint64_t(s.int_at(col)); };
        r.ts_ns = uint64_t(s.ns_at(0));
        r.interval_ns = uint64_t(s.ns_at(1));
        r.id = u(3);
        r.netns = uint32_t(s.int_at(4));
        auto named = r.scope == HostScope::Process ? last_name.find(r.id) : last_name.end();
        r.name = named != last_name.end() ? named->second : std::string(s.text_at(5));
        uint64_t* fields[] = {&r.runq_wait_ns,   &r.runq_waits,     &r.runq_max_ns,
                              &r.voluntary_switches, &r.involuntary_switches, &r.offcpu_ns,
                              &r.oncpu_ns,       &r.tx_bytes,       &r.tx_packets,
                              &r.rx_bytes,       &r.rx_packets,     &r.io_ops,
                              &r.io_bytes,       &r.read_ops,       &r.read_bytes,
                              &r.write_ops,      &r.write_bytes,    &r.io_latency_ns,
                              &r.io_latency_max_ns, &r.tcp_retransmits, &r.page_faults,
                              &r.reclaim_ns,     &r.reclaims,       &r.pagein_bytes,
                              &r.stall_ns,       &r.stall_end_ns,   &r.stalls};
        for (int i = 0; i < int(std::size(fields)); ++i) *fields[i] = u(6 + i);
        const int kTaker = 6 + int(std::size(fields));  // (after the counts)
        r.taker_name = std::string(s.text_at(kTaker));
        r.taker_ns = u(kTaker + 1);
        r.taker_procs = uint32_t(s.int_at(kTaker + 2));
        r.taker_pid = uint32_t(s.int_at(kTaker + 3));
        row(r);
      });
}

namespace {

void anomalies_in(const RecordingReader& rec, const std::string& order,
                  const std::function<void(const AnomalyRow&)>& row) {
  if (!rec.has_table("anomalies")) return;
  rec.query("SELECT ts_ns, dur_ns, layer, name, score, threshold, cause, features FROM anomalies " +
                order,
            [&](Statement& s) {
              AnomalyRow r;
              r.ts_ns = uint64_t(s.ns_at(0));
              r.dur_ns = uint64_t(s.ns_at(1));
              r.layer = std::string(s.text_at(2));
              r.name = std::string(s.text_at(3));
              r.score = s.null_at(4) ? std::nan("") : s.double_at(4);  // (SQLite's NaN)
              r.threshold = s.null_at(5) ? std::nan("") : s.double_at(5);
              r.cause = std::string(s.text_at(6));
              r.features = std::string(s.text_at(7));
              row(r);
            });
}

}  // namespace

void each_anomaly(const RecordingReader& rec, const std::function<void(const AnomalyRow&)>& row) {
  anomalies_in(rec, "ORDER BY ts_ns", row);
}

std::vector<AnomalyRow> strongest_anomalies(const RecordingReader& rec, size_t limit) {
  std::vector<AnomalyRow> out;
  // (those without a score, late joins no model judged, after every scored one)
  anomalies_in(rec, "ORDER BY score IS NULL, score - threshold LIMIT " + std::to_string(limit),
               [&](const AnomalyRow& a) { out.push_back(a); });
  return out;
}

std::vector<std::pair<std::string, size_t>> anomaly_cause_counts(const RecordingReader& rec) {
  std::vector<std::pair<std::string, size_t>> counts;
  if (!rec.has_table("anomalies")) return counts;
  rec.query("SELECT cause, count(*) FROM anomalies GROUP BY cause", [&](Statement& s) {
    counts.emplace_back(std::string(s.text_at(0)), size_t(s.int_at(1)));
  });
  return counts;
}

void each_traced_call(const RecordingReader& rec, const std::function<void(const TracedCall&)>& row,
                      bool in_time_order) {
  rec.query(select(rec, "trace",
                   {"layer", "name", "ts_ns", "dur_ns", "pid", "tid", "bytes", "ret", "runq_ns"},
                   in_time_order ? "ORDER BY ts_ns" : ""),
            [&](Statement& s) {
              TracedCall c;
              c.layer = s.text_at(0);
              c.name = s.text_at(1);
              c.ts_ns = uint64_t(s.ns_at(2));
              c.dur_ns = uint64_t(s.ns_at(3));
              c.pid = uint32_t(s.int_at(4));
              c.tid = uint32_t(s.int_at(5));
              c.bytes = or_unknown(s, 6);
              c.ret = s.int_at(7);
              c.runq_ns = s.null_at(8) ? -1 : s.ns_at(8);
              row(c);
            });
}

void each_call_in_layer(const RecordingReader& rec, const std::string& layer,
                        const std::function<void(const TracedCall&)>& row) {
  static const std::set<std::string> layers = {"cuda", "comm", "torch", "python"};
  std::string table = layer + "_calls";
  if (!layers.count(layer) || !rec.has_table(table)) return;
  rec.query("SELECT ts_ns, dur_ns, pid, tid, name FROM " + table, [&](Statement& s) {
    TracedCall c;
    read_call(s, c);
    c.layer = layer;
    row(c);
  });
}

std::pair<int64_t, int64_t> recorded_extent(const RecordingReader& rec) {
  int64_t first = INT64_MAX, last = 0;
  auto extent = [&](const std::string& table, const std::string& end) {
    if (!rec.has_table(table)) return;
    rec.query("SELECT min(ts_ns), max(" + end + ") FROM " + table, [&](Statement& s) {
      if (s.null_at(0)) return;
      first = std::min(first, s.ns_at(0));
      last = std::max(last, s.ns_at(1));
    });
  };
  for (const char* t :
       {"cuda_calls", "comm_calls", "torch_calls", "python_calls", "gpu_activity", "gpu_collectives"})
    extent(t, "ts_ns + dur_ns");
  for (const char* t : {"host_samples", "gpu_samples"}) extent(t, "ts_ns");
  return {first, last};
}

size_t anomaly_count(const RecordingReader& rec) {
  size_t n = 0;
  if (rec.has_table("anomalies"))
    rec.query("SELECT count(*) FROM anomalies", [&](Statement& s) { n = size_t(s.int_at(0)); });
  return n;
}

std::map<std::string, int64_t> usual_python_stacks(const RecordingReader& rec,
                                                   const std::string& layer,
                                                   bool launches_by_kernel) {
  std::map<std::string, int64_t> out;
  std::string table = layer + "_calls";
  if (!rec.has_table(table) || !rec.has_table("python_stacks") ||
      rec.column_or(table, "py_stack", "") != "py_stack")
    return out;
  if (launches_by_kernel && layer != "cuda") return out;
  std::string key = launches_by_kernel ? "kernel" : "name";
  std::string filter = launches_by_kernel ? " AND grid_x IS NOT NULL" : "";
  std::map<std::string, int64_t> calls;  // name -> calls from its usual stack
  rec.query("SELECT " + key + ", py_stack, count(*) FROM " + table +
                " WHERE py_stack IS NOT NULL AND " + key + " IS NOT NULL" + filter + " GROUP BY " +
                key + ", py_stack",
            [&](Statement& s) {
              std::string name(s.text_at(0));
              int64_t& most = calls[name];
              if (s.int_at(2) > most) most = s.int_at(2), out[name] = s.int_at(1);
            });
  return out;
}

std::vector<PythonFrame> python_stack(const RecordingReader& rec, int64_t id, size_t limit) {
  std::vector<PythonFrame> out;
  if (!rec.has_table("python_stacks")) return out;
  rec.query("SELECT name, file, line FROM python_stacks WHERE id = " + std::to_string(id) +
                " ORDER BY depth LIMIT " + std::to_string(limit),
            [&](Statement& s) {
              out.push_back({std::string(s.text_at(0)), std::string(s.text_at(1)), or_unknown(s, 2)});
            });
  return out;
}

std::map<std::string, std::pair<std::string, int64_t>> python_definitions(const RecordingReader& rec) {
  std::map<std::string, std::pair<std::string, int64_t>> out;
  if (!rec.has_table("python_calls")) return out;
  rec.query("SELECT name, file, min(line) FROM python_calls WHERE file IS NOT NULL GROUP BY "
            "name, file",
            [&](Statement& s) {
              out.try_emplace(std::string(s.text_at(0)), std::string(s.text_at(1)), s.int_at(2));
            });
  return out;
}

bool host_samples_have(const RecordingReader& rec, const std::string& column) {
  return rec.has_table("host_samples") && rec.column_or("host_samples", column, "") == column;
}

std::vector<KernelLaunches> kernel_launches(const RecordingReader& rec) {
  std::vector<KernelLaunches> out;
  rec.query("SELECT kernel, name LIKE 'cuda%' AS runtime, count(*), sum(dur_ns) FROM cuda_calls "
            "WHERE kernel IS NOT NULL AND grid_x IS NOT NULL GROUP BY kernel, runtime "
            "ORDER BY runtime",
            [&](Statement& s) {
              out.push_back({std::string(s.text_at(0)), s.int_at(1) != 0, uint64_t(s.int_at(2)),
                             uint64_t(s.int_at(3))});
            });
  return out;
}

namespace {

template <typename T>
std::optional<T> opt(const Statement& s, int col) {
  if (s.null_at(col)) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>)
    return T(s.double_at(col));
  else
    return T(s.int_at(col));
}

}  // namespace

void each_gpu_device(const RecordingReader& rec, const std::function<void(const GpuDevice&)>& row) {
  if (!rec.has_table("gpu_devices")) return;
  rec.query("SELECT gpu, name, uuid, pci_bus_id FROM gpu_devices ORDER BY gpu", [&](Statement& s) {
    row(GpuDevice{uint32_t(s.int_at(0)), std::string(s.text_at(1)), std::string(s.text_at(2)),
                  std::string(s.text_at(3))});
  });
}

void each_gpu_sample(const RecordingReader& rec, const std::function<void(const GpuSample&)>& row,
                     SampleOrder order) {
  if (!rec.has_table("gpu_samples")) return;
  rec.query(select(rec, "gpu_samples",
                   {"ts_ns", "gpu", "sm_util_pct", "mem_util_pct", "mem_used_bytes",
                    "mem_total_bytes", "temperature_c", "power_w", "power_limit_w",
                    "sm_clock_mhz", "mem_clock_mhz", "pcie_tx_bytes_per_s",
                    "pcie_rx_bytes_per_s", "throttle_reasons", "ecc_corrected",
                    "ecc_uncorrected", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"},
                   order == SampleOrder::by_time ? "ORDER BY ts_ns" : "ORDER BY gpu, ts_ns"),
            [&](Statement& s) {
              GpuSample g;
              g.ts_ns = uint64_t(s.ns_at(0));
              g.gpu = uint32_t(s.int_at(1));
              g.sm_util_pct = opt<uint32_t>(s, 2);
              g.mem_util_pct = opt<uint32_t>(s, 3);
              g.mem_used_bytes = opt<uint64_t>(s, 4);
              g.mem_total_bytes = opt<uint64_t>(s, 5);
              g.temperature_c = opt<uint32_t>(s, 6);
              g.power_w = opt<double>(s, 7);
              g.power_limit_w = opt<double>(s, 8);
              g.sm_clock_mhz = opt<uint32_t>(s, 9);
              g.mem_clock_mhz = opt<uint32_t>(s, 10);
              g.pcie_tx_bytes_per_s = opt<uint64_t>(s, 11);
              g.pcie_rx_bytes_per_s = opt<uint64_t>(s, 12);
              g.throttle_reasons = opt<uint64_t>(s, 13);
              g.ecc_corrected = opt<uint64_t>(s, 14);
              g.ecc_uncorrected = opt<uint64_t>(s, 15);
              g.nvlink_tx_bytes_per_s = opt<double>(s, 16);
              g.nvlink_rx_bytes_per_s = opt<double>(s, 17);
              row(g);
            });
}

void each_gpu_process_sample(const RecordingReader& rec,
                             const std::function<void(const GpuProcessSample&)>& row,
                             SampleOrder order) {
  if (!rec.has_table("gpu_process_samples")) return;
  rec.query(select(rec, "gpu_process_samples",
                   {"ts_ns", "gpu", "pid", "ns_pid", "util_ts_ns", "sm_util_pct", "mem_util_pct",
                    "enc_util_pct", "dec_util_pct", "used_memory_bytes"},
                   order == SampleOrder::by_time ? "ORDER BY ts_ns" : "ORDER BY gpu, pid, ts_ns"),
            [&](Statement& s) {
              GpuProcessSample p;
              p.ts_ns = uint64_t(s.ns_at(0));
              p.gpu = uint32_t(s.int_at(1));
              p.pid = uint32_t(s.int_at(2));
              p.ns_pid = opt<uint32_t>(s, 3);
              p.util_ts_ns = opt<uint64_t>(s, 4);
              p.sm_util_pct = opt<uint32_t>(s, 5);
              p.mem_util_pct = opt<uint32_t>(s, 6);
              p.enc_util_pct = opt<uint32_t>(s, 7);
              p.dec_util_pct = opt<uint32_t>(s, 8);
              p.used_memory_bytes = opt<uint64_t>(s, 9);
              row(p);
            });
}

void each_gpu_activity(const RecordingReader& rec,
                       const std::function<void(const GpuActivityRow&)>& row) {
  if (!rec.has_table("gpu_activity")) return;
  rec.query(select(rec, "gpu_activity",
                   {"ts_ns", "dur_ns", "pid", "tid", "kind", "device", "context", "stream",
                    "correlation", "name", "bytes", "grid_x", "grid_y", "grid_z", "block_x",
                    "block_y", "block_z", "shared_mem", "registers"},
                   "ORDER BY ts_ns"),
            [&](Statement& s) {
              GpuActivityRow r;
              r.ts_ns = uint64_t(s.ns_at(0));
              r.dur_ns = uint64_t(s.ns_at(1));
              r.pid = uint32_t(s.int_at(2));
              r.tid = uint32_t(s.int_at(3));
              r.kind = s.text_at(4);
              r.device = uint32_t(s.int_at(5));
              r.context = uint32_t(s.int_at(6));
              r.stream = uint32_t(s.int_at(7));
              r.correlation = uint32_t(s.int_at(8));
              r.name = s.text_at(9);
              r.bytes = or_unknown(s, 10);
              for (int i = 0; i < 3; ++i) {
                r.grid[i] = int32_t(s.int_at(11 + i));
                r.block[i] = int32_t(s.int_at(14 + i));
              }
              r.shared_mem = uint32_t(s.int_at(17));
              r.registers = uint32_t(s.int_at(18));
              row(r);
            });
}

void each_gpu_collective(const RecordingReader& rec,
                         const std::function<void(const GpuCollectiveRow&)>& row) {
  if (!rec.has_table("gpu_collectives")) return;
  rec.query(select(rec, "gpu_collectives",
                   {"ts_ns", "dur_ns", "pid", "tid", "name", "comm_hash", "seq", "rank", "nranks",
                    "peer", "count", "datatype", "bytes", "algo", "proto", "channels",
                    "channels_seen", "warps", "enqueue_ns", "gpu_start_ns", "gpu_dur_ns",
                    "algbw_gbps", "busbw_gbps"},
                   "ORDER BY ts_ns"),
            [&](Statement& s) {
              GpuCollectiveRow r;
              read_call(s, r);
              r.comm_hash = uint64_t(s.int_at(5));
              r.seq = or_unknown(s, 6);
              r.rank = or_unknown(s, 7);
              r.nranks = or_unknown(s, 8);
              r.peer = or_unknown(s, 9);
              r.count = or_unknown(s, 10);
              r.datatype = s.text_at(11);
              r.bytes = or_unknown(s, 12);
              r.algo = s.text_at(13);
              r.proto = s.text_at(14);
              r.channels = uint32_t(s.int_at(15));
              r.channels_seen = uint32_t(s.int_at(16));
              r.warps = uint32_t(s.int_at(17));
              r.enqueue_ns = uint64_t(s.ns_at(18));
              r.has_gpu_time = !s.null_at(19);
              r.gpu_start_ns = uint64_t(s.ns_at(19));
              r.gpu_dur_ns = uint64_t(s.ns_at(20));
              r.algbw_gbps = s.null_at(21) ? -1 : s.double_at(21);
              r.busbw_gbps = s.null_at(22) ? -1 : s.double_at(22);
              row(r);
            });
}

void each_gpu_slice(const RecordingReader& rec,
                    const std::function<void(const GpuSliceRow&)>& row) {
  if (!rec.has_table("gpu_time_slices")) return;
  rec.query("SELECT ts_ns, dur_ns, pid FROM gpu_time_slices ORDER BY ts_ns", [&](Statement& s) {
    row(GpuSliceRow{uint64_t(s.ns_at(0)), uint64_t(s.ns_at(1)), uint32_t(s.int_at(2))});
  });
}

void each_gpu_xid(const RecordingReader& rec, const std::function<void(const GpuXidEvent&)>& row) {
  if (!rec.has_table("gpu_events")) return;
  rec.query("SELECT ts_ns, gpu, xid FROM gpu_events ORDER BY ts_ns", [&](Statement& s) {
    row(GpuXidEvent{uint64_t(s.ns_at(0)), uint32_t(s.int_at(1)), uint64_t(s.int_at(2))});
  });
}

void each_process(const RecordingReader& rec,
                  const std::function<void(const RecordedProcess&)>& row) {
  if (!rec.has_table("processes")) return;
  rec.query(select(rec, "processes",
                   {"pid", "ppid", "name", "command", "start_ns", "end_ns", "exit_code", "job_id",
                    "rank", "local_rank", "world_size", "host", "host_pid"},
                   "WHERE rowid IN (SELECT max(rowid) FROM processes GROUP BY pid) ORDER BY pid"),
            [&](Statement& s) {
              RecordedProcess p;
              p.pid = uint32_t(s.int_at(0));
              p.ppid = uint32_t(s.int_at(1));
              p.name = std::string(s.text_at(2));
              p.command = std::string(s.text_at(3));
              p.start_ns = uint64_t(s.ns_at(4));
              p.end_ns = uint64_t(s.ns_at(5));
              p.exit_code = or_unknown(s, 6);
              p.job_id = std::string(s.text_at(7));
              p.rank = or_unknown(s, 8);
              p.local_rank = or_unknown(s, 9);
              p.world_size = or_unknown(s, 10);
              p.host = std::string(s.text_at(11));
              p.host_pid = or_unknown(s, 12);
              row(p);
            });
}

void each_thread(const RecordingReader& rec, const std::function<void(const ThreadRow&)>& row) {
  if (!rec.has_table("threads")) return;
  rec.query("SELECT pid, tid, name FROM threads WHERE rowid IN "
            "(SELECT max(rowid) FROM threads GROUP BY pid, tid) ORDER BY pid, tid",
            [&](Statement& s) {
              row(ThreadRow{uint32_t(s.int_at(0)), uint32_t(s.int_at(1)), std::string(s.text_at(2))});
            });
}

}  // namespace eacgm
