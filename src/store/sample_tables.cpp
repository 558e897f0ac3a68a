// Row-to-column mapping of the sampled layers' tables; columns that do not apply are NULL.
#include "store/sample_tables.h"

#include <type_traits>

#include "store/sqlite_util.h"

namespace eacgm {

namespace {

// The columns every call table starts with: ts_ns, dur_ns, pid, tid, name.
template <typename Row>
void bind_call(Statement& insert, const Row& c) {
  insert.bind(1, static_cast<int64_t>(c.ts_ns));
  insert.bind(2, static_cast<int64_t>(c.dur_ns));
  insert.bind(3, int64_t(c.pid));
  insert.bind(4, int64_t(c.tid));
  insert.bind(5, c.name);
}

}  // namespace

const char* host_scope_name(HostScope scope) {
  switch (scope) {
    case HostScope::Process: return "process";
    case HostScope::NetDevice: return "net";
    case HostScope::Disk: return "disk";
    case HostScope::Cpu: return "cpu";
  }
  return "unknown";
}

bool write_host_samples(Statements& db, const std::vector<HostSampleRow>& rows) {
  if (rows.empty()) return true;
  Statement& insert =
      db("INSERT INTO host_samples VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,"
         "?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,?26,?27,?28,?29,?30,?31,?32,?33,?34,?35,?36,"
         "?37)");
  auto num = [&](int col, uint64_t v) { insert.bind(col, static_cast<int64_t>(v)); };
  for (const auto& r : rows) {
    num(1, r.ts_ns);
    num(2, r.interval_ns);
    insert.bind(3, std::string_view(host_scope_name(r.scope)));
    num(4, r.id);
    if (r.scope == HostScope::NetDevice) num(5, r.netns);
    insert.bind(6, r.name);
    if (r.scope == HostScope::Process) {
      num(7, r.runq_wait_ns);
      num(8, r.runq_waits);
      num(9, r.runq_max_ns);
      num(10, r.voluntary_switches);
      num(11, r.involuntary_switches);
      num(12, r.offcpu_ns);
      num(13, r.oncpu_ns);
      num(26, r.tcp_retransmits);
      num(27, r.page_faults);
      num(28, r.reclaim_ns);
      num(29, r.reclaims);
      num(30, r.pagein_bytes);
      if (r.taker_ns) {
        insert.bind(34, r.taker_name);
        num(35, r.taker_ns);
        num(36, r.taker_procs);
        num(37, r.taker_pid);
      }
    }
    if (r.scope == HostScope::Process || r.scope == HostScope::Cpu) {
      num(31, r.stall_ns);
      if (r.stall_ns) num(32, r.stall_end_ns);
      num(33, r.stalls);
    }
    if (r.scope == HostScope::Process || r.scope == HostScope::NetDevice) {
      num(14, r.tx_bytes);
      num(16, r.rx_bytes);
    }
    if (r.scope == HostScope::NetDevice) {
      num(15, r.tx_packets);
      num(17, r.rx_packets);
    }
    if (r.scope == HostScope::Process || r.scope == HostScope::Disk) {
      num(18, r.io_ops);
      num(19, r.io_bytes);
    }
    if (r.scope == HostScope::Disk) {
      num(20, r.read_ops);
      num(21, r.read_bytes);
      num(22, r.write_ops);
      num(23, r.write_bytes);
      num(24, r.io_latency_ns);
      num(25, r.io_latency_max_ns);
    }
    if (insert.run() != SQLITE_DONE) return false;
  }
  return true;
}

namespace {

template <typename T>
void bind_opt(Statement& st, int col, const std::optional<T>& v) {
  if (!v) return;  // left NULL
  if constexpr (std::is_floating_point_v<T>) {
    st.bind_double(col, *v);
  } else {
    st.bind(col, static_cast<int64_t>(*v));
  }
}

}  // namespace

bool write_comm_calls(Statements& db, const std::vector<CommCallRow>& rows) {
  if (rows.empty()) return true;
  Statement& insert = db("INSERT INTO comm_calls VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,"
                         "?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22)");
  for (const auto& c : rows) {
    bind_call(insert, c);
    insert.bind(6, c.ret);
    if (c.count >= 0) insert.bind(7, c.count);
    if (!c.datatype.empty()) insert.bind(8, c.datatype);
    if (c.bytes >= 0) insert.bind(9, c.bytes);
    if (!c.redop.empty()) insert.bind(10, c.redop);
    if (c.peer >= 0) insert.bind(11, c.peer);
    if (c.comm) insert.bind(12, static_cast<int64_t>(c.comm));
    if (c.rank >= 0) insert.bind(13, c.rank);
    if (c.nranks >= 0) insert.bind(14, c.nranks);
    if (c.has_stream) insert.bind(15, static_cast<int64_t>(c.stream));
    if (c.algbw_gbps >= 0) insert.bind_double(16, c.algbw_gbps);
    if (c.busbw_gbps >= 0) insert.bind_double(17, c.busbw_gbps);
    if (c.py_stack) insert.bind(18, c.py_stack);
    if (c.runq_ns >= 0) insert.bind(19, c.runq_ns);
    if (c.entry_run_delay_ns >= 0) insert.bind(20, c.entry_run_delay_ns);
    if (c.comm_id) insert.bind(21, static_cast<int64_t>(c.comm_id));
    if (c.seq >= 0) insert.bind(22, c.seq);
    if (insert.run() != SQLITE_DONE) return false;
  }
  return true;
}

bool write_torch_calls(Statements& db, const std::vector<TorchCallRow>& rows) {
  if (rows.empty()) return true;
  Statement& insert = db("INSERT INTO torch_calls VALUES(?1,?2,?3,?4,?5,?6,?7)");
  for (const auto& c : rows) {
    bind_call(insert, c);
    if (c.py_stack) insert.bind(6, c.py_stack);
    if (c.runq_ns >= 0) insert.bind(7, c.runq_ns);
    if (insert.run() != SQLITE_DONE) return false;
  }
  return true;
}

bool write_gpu_rows(Statements& db, const std::vector<GpuDevice>& devices,
                    const std::vector<GpuSample>& samples,
                    const std::vector<GpuProcessSample>& processes,
                    const std::vector<GpuXidEvent>& xids) {
  if (!devices.empty()) {
    Statement& insert = db("INSERT OR REPLACE INTO gpu_devices VALUES(?1,?2,?3,?4)");
    for (const auto& d : devices) {
      insert.bind(1, int64_t(d.index));
      insert.bind(2, d.name);
      if (!d.uuid.empty()) insert.bind(3, d.uuid);
      if (!d.pci_bus_id.empty()) insert.bind(4, d.pci_bus_id);
      if (insert.run() != SQLITE_DONE) return false;
    }
  }
  if (!samples.empty()) {
    Statement& insert = db("INSERT INTO gpu_samples VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,"
                           "?12,?13,?14,?15,?16,?17,?18,?19)");
    for (const auto& g : samples) {
      insert.bind(1, static_cast<int64_t>(g.ts_ns));
      insert.bind(2, int64_t(g.gpu));
      bind_opt(insert, 3, g.sm_util_pct);
      bind_opt(insert, 4, g.mem_util_pct);
      bind_opt(insert, 5, g.mem_used_bytes);
      bind_opt(insert, 6, g.mem_total_bytes);
      bind_opt(insert, 7, g.temperature_c);
      bind_opt(insert, 8, g.power_w);
      bind_opt(insert, 9, g.power_limit_w);
      bind_opt(insert, 10, g.sm_clock_mhz);
      bind_opt(insert, 11, g.mem_clock_mhz);
      bind_opt(insert, 12, g.pcie_tx_bytes_per_s);
      bind_opt(insert, 13, g.pcie_rx_bytes_per_s);
      bind_opt(insert, 14, g.throttle_reasons);
      std::string reasons;
      if (g.throttle_reasons) reasons = throttle_reasons_text(*g.throttle_reasons);
      if (g.throttle_reasons) insert.bind(15, reasons);
      bind_opt(insert, 16, g.ecc_corrected);
      bind_opt(insert, 17, g.ecc_uncorrected);
      bind_opt(insert, 18, g.nvlink_tx_bytes_per_s);
      bind_opt(insert, 19, g.nvlink_rx_bytes_per_s);
      if (insert.run() != SQLITE_DONE) return false;
    }
  }
  if (!processes.empty()) {
    Statement& insert =
        db("INSERT INTO gpu_process_samples VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)");
    for (const auto& p : processes) {
      insert.bind(1, static_cast<int64_t>(p.ts_ns));
      insert.bind(2, int64_t(p.gpu));
      insert.bind(3, int64_t(p.pid));
      bind_opt(insert, 4, p.ns_pid);
      bind_opt(insert, 5, p.util_ts_ns);
      bind_opt(insert, 6, p.sm_util_pct);
      bind_opt(insert, 7, p.mem_util_pct);
      bind_opt(insert, 8, p.enc_util_pct);
      bind_opt(insert, 9, p.dec_util_pct);
      bind_opt(insert, 10, p.used_memory_bytes);
      if (insert.run() != SQLITE_DONE) return false;
    }
  }
  if (!xids.empty()) {
    Statement& insert = db("INSERT INTO gpu_events VALUES(?1,?2,?3)");
    for (const auto& x : xids) {
      insert.bind(1, static_cast<int64_t>(x.ts_ns));
      insert.bind(2, int64_t(x.gpu));
      insert.bind(3, static_cast<int64_t>(x.xid));
      if (insert.run() != SQLITE_DONE) return false;
    }
  }
  return true;
}

bool write_gpu_activity(Statements& db, const std::vector<GpuActivityRow>& rows) {
  if (rows.empty()) return true;
  Statement& insert = db("INSERT INTO gpu_activity VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,"
                         "?13,?14,?15,?16,?17,?18,?19)");
  for (const auto& r : rows) {
    insert.bind(1, static_cast<int64_t>(r.ts_ns));
    insert.bind(2, static_cast<int64_t>(r.dur_ns));
    insert.bind(3, int64_t(r.pid));
    if (r.tid) insert.bind(4, int64_t(r.tid));
    insert.bind(5, r.kind);
    insert.bind(6, int64_t(r.device));
    insert.bind(7, int64_t(r.context));
    insert.bind(8, int64_t(r.stream));
    insert.bind(9, int64_t(r.correlation));
    if (!r.name.empty()) insert.bind(10, r.name);
    if (r.bytes >= 0) insert.bind(11, r.bytes);
    if (r.kind == "kernel") {
      for (int i = 0; i < 3; ++i) insert.bind(12 + i, int64_t(r.grid[i]));
      for (int i = 0; i < 3; ++i) insert.bind(15 + i, int64_t(r.block[i]));
      insert.bind(18, int64_t(r.shared_mem));
      insert.bind(19, int64_t(r.registers));
    }
    if (insert.run() != SQLITE_DONE) return false;
  }
  return true;
}

bool write_gpu_slices(Statements& db, const std::vector<GpuSliceRow>& rows) {
  if (rows.empty()) return true;
  Statement& insert = db("INSERT INTO gpu_time_slices VALUES(?1,?2,?3)");
  for (const auto& r : rows) {
    insert.bind(1, static_cast<int64_t>(r.ts_ns));
    insert.bind(2, static_cast<int64_t>(r.dur_ns));
    insert.bind(3, int64_t(r.pid));
    if (insert.run() != SQLITE_DONE) return false;
  }
  return true;
}

bool write_gpu_collectives(Statements& db, const std::vector<GpuCollectiveRow>& rows) {
  if (rows.empty()) return true;
  Statement& insert = db("INSERT INTO gpu_collectives VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,"
                         "?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23)");
  auto known = [&](int column, int64_t v) {
    if (v >= 0) insert.bind(column, v);
  };
  auto text = [&](int column, std::string_view v) {
    if (!v.empty()) insert.bind(column, v);
  };
  for (const auto& r : rows) {
    insert.bind(1, static_cast<int64_t>(r.ts_ns));
    insert.bind(2, static_cast<int64_t>(r.dur_ns));
    insert.bind(3, int64_t(r.pid));
    insert.bind(4, int64_t(r.tid));
    insert.bind(5, r.name);
    // NCCL's hash uses all 64 bits; SQLite integers are signed: stored as the same bits
    insert.bind(6, static_cast<int64_t>(r.comm_hash));
    known(7, r.seq);
    known(8, r.rank);
    known(9, r.nranks);
    known(10, r.peer);
    known(11, r.count);
    text(12, r.datatype);
    known(13, r.bytes);
    text(14, r.algo);
    text(15, r.proto);
    insert.bind(16, int64_t(r.channels));
    insert.bind(17, int64_t(r.channels_seen));
    insert.bind(18, int64_t(r.warps));
    insert.bind(19, static_cast<int64_t>(r.enqueue_ns));
    if (r.has_gpu_time) {
      insert.bind(20, static_cast<int64_t>(r.gpu_start_ns));
      insert.bind(21, static_cast<int64_t>(r.gpu_dur_ns));
    }
    if (r.algbw_gbps >= 0) insert.bind_double(22, r.algbw_gbps);
    if (r.busbw_gbps >= 0) insert.bind_double(23, r.busbw_gbps);
    if (insert.run() != SQLITE_DONE) return false;
  }
  return true;
}

}  // namespace eacgm
