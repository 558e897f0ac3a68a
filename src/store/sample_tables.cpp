// Row-to-column mapping of the sampled layers' tables; columns that do not apply are NULL.
#include "store/sample_tables.h"

#include "store/sqlite_util.h"

namespace eacgm {

const char* host_scope_name(HostScope scope) {
  switch (scope) {
    case HostScope::Process: return "process";
    case HostScope::NetDevice: return "net";
    case HostScope::Disk: return "disk";
  }
  return "unknown";
}

bool write_host_samples(sqlite3* db, const std::vector<HostSampleRow>& rows) {
  if (rows.empty()) return true;
  Statement insert(db,
                   "INSERT INTO host_samples VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,"
                   "?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25)");
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
    }
    if (r.scope != HostScope::Disk) {
      num(14, r.tx_bytes);
      num(16, r.rx_bytes);
    }
    if (r.scope == HostScope::NetDevice) {
      num(15, r.tx_packets);
      num(17, r.rx_packets);
    }
    if (r.scope != HostScope::NetDevice) {
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

}  // namespace eacgm
