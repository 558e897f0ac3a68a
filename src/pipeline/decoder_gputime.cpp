// Decoding the gputime layer's batches (gputime/gpu_batch.h): CUPTI's records of when each
// kernel, copy and memset ran on the GPU, and of each kernel launch, into gpu_activity rows.
#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "gpu/gpu_samples.h"  // parse_ns_pid, read_ns_pid
#include "gputime/gpu_batch.h"
#include "pipeline/decoder.h"
#include "probe/comm_ops.h"
#include "probe/demangle.h"
#include "util/interner.h"

namespace eacgm {
namespace {

using namespace gputime;

// CUpti_ActivityMemcpyKind, named as cuda_calls names cudaMemcpyKind.
std::string_view copy_kind_name(uint8_t kind) {
  static constexpr std::string_view names[] = {"unknown",       "HostToDevice",  "DeviceToHost",
                                               "HostToArray",   "ArrayToHost",   "ArrayToArray",
                                               "ArrayToDevice", "DeviceToArray", "DeviceToDevice",
                                               "HostToHost",    "PeerToPeer"};
  return kind < std::size(names) ? names[kind] : "unknown";
}

// The runtime launch functions the library asks CUPTI for (cupti_injection.cpp).
std::string_view launch_api_name(uint32_t cbid) {
  static constexpr std::pair<uint32_t, std::string_view> names[] = {
      {211, "cudaLaunchKernel"},    {214, "cudaLaunchKernel_ptsz"},
      {430, "cudaLaunchKernelExC"}, {431, "cudaLaunchKernelExC_ptsz"},
      {505, "__cudaLaunchKernel"},  {506, "__cudaLaunchKernel_ptsz"}};
  for (const auto& [id, name] : names)
    if (id == cbid) return name;
  return "cuda runtime launch";
}

// Times further than this from when the batch arrived are not on the recording's clock (a CUPTI
// without the timestamp callback): such rows would land anywhere in the timeline.
constexpr uint64_t kOffClockNs = 600'000'000'000ull;

bool on_our_clock(uint64_t t, uint64_t arrived) {
  return t + kOffClockNs > arrived && t < arrived + kOffClockNs;
}

// An execution's row (a kernel named by the process's name ids).
GpuActivityRow execution_row(const GpuExecution& x, EntryKind kind, uint32_t pid,
                             const std::unordered_map<uint32_t, std::string_view>& names) {
  GpuActivityRow row;
  row.ts_ns = x.start_ns;
  row.dur_ns = x.end_ns > x.start_ns ? x.end_ns - x.start_ns : 0;
  row.pid = pid;
  row.device = x.device, row.context = x.context, row.stream = x.stream;
  row.correlation = x.correlation;
  if (kind == EntryKind::kernel) {
    row.kind = "kernel";
    auto name = names.find(x.name_id);
    row.name = name != names.end() ? name->second : "unknown kernel";
    for (int i = 0; i < 3; ++i) row.grid[i] = x.grid[i], row.block[i] = x.block[i];
    row.shared_mem = x.shared_bytes;
    row.registers = x.registers;
  } else {
    row.kind = kind == EntryKind::memcpy ? "memcpy" : "memset";
    if (kind == EntryKind::memcpy) row.name = copy_kind_name(x.copy_kind);
    row.bytes = int64_t(x.bytes);
  }
  return row;
}

// NCCL's datatype strings (ncclFloat32, ncclBfloat16, ...) as comm_calls names them, and their
// sizes; "" and 0 for a string NCCL does not define.
std::pair<std::string_view, uint32_t> nccl_datatype(std::string_view nccl) {
  static constexpr std::pair<std::string_view, std::pair<std::string_view, uint32_t>> kTypes[] = {
      {"ncclInt8", {"int8", 1}},         {"ncclUint8", {"uint8", 1}},
      {"ncclInt32", {"int32", 4}},       {"ncclUint32", {"uint32", 4}},
      {"ncclInt64", {"int64", 8}},       {"ncclUint64", {"uint64", 8}},
      {"ncclFloat16", {"float16", 2}},   {"ncclFloat32", {"float32", 4}},
      {"ncclFloat64", {"float64", 8}},   {"ncclBfloat16", {"bfloat16", 2}},
      {"ncclFloat8e4m3", {"float8e4m3", 1}}, {"ncclFloat8e5m2", {"float8e5m2", 1}}};
  for (const auto& [name, type] : kTypes)
    if (name == nccl) return type;
  return {"", 0};
}

// NCCL's operation names ("AllReduce", "Send") as the API's (ncclAllReduce, ncclSend), and
// what the nccl-tests formulas call them.
std::pair<std::string_view, Collective> nccl_api_of(std::string_view func) {
  for (const CommOp& op : comm_ops())
    if (op.kind == CommKind::Collective && op.symbol.size() == func.size() + 4 &&
        op.symbol.starts_with("nccl") && op.symbol.substr(4) == func)
      return {op.symbol, op.collective};
  return {"", Collective::None};
}

// The library's GpuCollective as a row: names from the process's name ids, bandwidths over the
// GPU's time by the formulas comm_calls uses over the call's.
GpuCollectiveRow collective_row(const GpuCollective& c, uint32_t pid, Interner& interned) {
  auto text = [&](const char* field, size_t size) -> std::string_view {
    size_t n = strnlen(field, size);
    return n ? interned.intern(std::string_view(field, n)) : std::string_view();
  };
#define EACGM_FIELD_TEXT(f) text(c.f, sizeof(c.f))
  GpuCollectiveRow row;
  row.ts_ns = c.enqueue_ns;
  row.dur_ns = c.completed_ns > c.enqueue_ns ? c.completed_ns - c.enqueue_ns : 0;
  row.pid = pid, row.tid = c.tid;
  std::string_view func = EACGM_FIELD_TEXT(func);
  auto [api, collective] = nccl_api_of(func);
  row.name = !api.empty() ? api : interned.intern("nccl" + std::string(func.empty() ? "?" : func));
  row.comm_hash = c.comm_hash;
  bool p2p = c.flags & kCollectiveP2p;
  row.seq = p2p ? -1 : int64_t(c.seq);
  row.rank = c.rank, row.nranks = c.nranks;
  row.peer = c.root_or_peer >= 0 ? c.root_or_peer : -1;
  row.count = int64_t(c.count);
  std::string_view nccl_type = EACGM_FIELD_TEXT(datatype);
  auto [datatype, size] = nccl_datatype(nccl_type);
  row.datatype = !datatype.empty() ? datatype : nccl_type;
  if (size) row.bytes = row.count * int64_t(size);
  row.algo = EACGM_FIELD_TEXT(algo), row.proto = EACGM_FIELD_TEXT(proto);
#undef EACGM_FIELD_TEXT
  row.channels = c.channels, row.channels_seen = c.channels_seen, row.warps = c.warps;
  row.enqueue_ns = c.enqueued_ns > c.enqueue_ns ? c.enqueued_ns - c.enqueue_ns : 0;
  if ((c.flags & kCollectiveGpuClock) && c.end_ns >= c.start_ns) {
    row.has_gpu_time = true;
    row.gpu_start_ns = c.start_ns;
    row.gpu_dur_ns = c.end_ns - c.start_ns;
  }
  uint32_t n = row.nranks > 0 ? uint32_t(row.nranks) : 0;
  if (row.has_gpu_time && row.gpu_dur_ns && row.bytes >= 0 && collective != Collective::None &&
      (n || collective == Collective::Broadcast || collective == Collective::Reduce ||
       collective == Collective::Send || collective == Collective::Recv)) {
    row.algbw_gbps = nccl_algo_bytes(collective, uint64_t(row.bytes), n) / double(row.gpu_dur_ns);
    row.busbw_gbps = row.algbw_gbps * nccl_bus_factor(collective, n);
  }
  return row;
}

}  // namespace

uint32_t EventDecoder::host_tid(ProcessState& st, uint32_t pid, uint32_t tid, uint64_t now_ns) {
  if (st.ns_pid < 0) st.ns_pid = read_ns_pid(pid).value_or(0);
  if (st.ns_pid == 0) return tid;
  // the main thread's id is the process's (and it is the one thread still known after the
  // process is gone: a short job's rows come at its exit)
  if (tid == uint64_t(st.ns_pid)) return pid;
  auto it = st.host_tids.find(tid);
  if (it != st.host_tids.end()) return it->second;
  // a thread not seen yet: the process's threads read again, at most once a second
  if (now_ns < st.host_tids_read_ns + 1'000'000'000ull && st.host_tids_read_ns) return tid;
  st.host_tids_read_ns = now_ns;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::ifstream in(task.path() / "status");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint32_t host = 0;
    std::string name = task.path().filename().string();
    std::from_chars(name.data(), name.data() + name.size(), host);
    if (auto inner = parse_ns_pid(text); inner && host) st.host_tids[*inner] = host;
  }
  it = st.host_tids.find(tid);
  return it != st.host_tids.end() ? it->second : tid;
}

void EventDecoder::decode_gpu_batch(const eacgm_gpu_batch_event& e) {
  static_assert(sizeof(e.data) == kGpuBatchBytes, "the library's batch and the probe's copy");
  const unsigned char* at = e.data;
  const unsigned char* end = e.data + std::min<uint32_t>(e.bytes, sizeof(e.data));
  if (e.bytes == 0) ++stats_.malformed;  // the probe could not read the library's buffer
  while (end - at >= ptrdiff_t(sizeof(EntryHeader))) {
    EntryHeader h;
    std::memcpy(&h, at, sizeof(h));
    if (h.bytes < sizeof(EntryHeader) || h.bytes % 8 || h.bytes > end - at) {
      ++stats_.malformed;  // a library of another version, or a torn buffer: skip the rest
      return;
    }
    decode_gpu_entry(e, h.kind, h.bytes, at);
    at += h.bytes;
  }
}

// One entry of a batch, `bytes` long (checked to lie within the batch).
void EventDecoder::decode_gpu_entry(const eacgm_gpu_batch_event& e, uint16_t kind, uint16_t bytes,
                                    const unsigned char* entry) {
  ProcessState& st = state_of(e.pid);
  switch (EntryKind(kind)) {
    case EntryKind::kernel:
    case EntryKind::memcpy:
    case EntryKind::memset: {
      if (bytes < sizeof(GpuExecution)) return;
      GpuExecution x;
      std::memcpy(&x, entry, sizeof(x));
      if (!on_our_clock(x.start_ns, e.ts_ns)) {
        ++stats_.gpu_off_clock;
        return;
      }
      ++stats_.gpu_activity;
      out_.add(execution_row(x, EntryKind(kind), e.pid, st.gpu_names));
      return;
    }
    case EntryKind::launch: {
      if (bytes < sizeof(GpuLaunch)) return;
      GpuLaunch l;
      std::memcpy(&l, entry, sizeof(l));
      if (!on_our_clock(l.start_ns, e.ts_ns)) {
        ++stats_.gpu_off_clock;
        return;
      }
      GpuActivityRow row;
      row.ts_ns = l.start_ns;
      row.dur_ns = l.end_ns > l.start_ns ? l.end_ns - l.start_ns : 0;
      row.pid = e.pid;
      row.tid = host_tid(st, e.pid, l.tid, e.ts_ns);
      row.kind = "launch";
      row.correlation = l.correlation;
      row.name = launch_api_name(l.cbid);
      ++stats_.gpu_activity;
      out_.add(row);
      return;
    }
    case EntryKind::collective: {
      if (bytes < sizeof(GpuCollective)) return;
      GpuCollective c;
      std::memcpy(&c, entry, sizeof(c));
      if (!on_our_clock(c.enqueue_ns, e.ts_ns)) {
        ++stats_.gpu_off_clock;
        return;
      }
      if ((c.flags & kCollectiveGpuClock) &&
          (!on_our_clock(c.start_ns, e.ts_ns) || !on_our_clock(c.end_ns, e.ts_ns)))
        c.flags &= uint8_t(~kCollectiveGpuClock);  // a GPU timer off the host's wall clock
      ++stats_.gpu_collectives;
      if (c.ns_pid) st.ns_pid = c.ns_pid == e.pid ? 0 : c.ns_pid;  // the library's own word
      c.tid = host_tid(st, e.pid, c.tid, e.ts_ns);
      out_.add(collective_row(c, e.pid, names_));
      return;
    }
    case EntryKind::name:
    case EntryKind::note: {
      GpuText t;
      std::memcpy(&t, entry, sizeof(t));
      const char* text = reinterpret_cast<const char*>(entry + sizeof(t));
      std::string_view s(text, strnlen(text, bytes - sizeof(t)));
      if (EntryKind(kind) == EntryKind::name) {
        // names that filled the library's limit were cut: demangle what leads them
        bool cut = s.size() >= kMaxTextBytes - 1;
        st.gpu_names[t.id] = names_.intern(cut ? demangle_truncated(s) : demangle(s));
      } else if (on_gpu_note) {
        on_gpu_note(e.pid, std::string(s));
      }
      return;
    }
    case EntryKind::slice: {
      if (bytes < sizeof(GpuSlice)) return;
      GpuSlice s;
      std::memcpy(&s, entry, sizeof(s));
      if (!on_our_clock(s.start_ns, e.ts_ns) || s.end_ns < s.start_ns) {
        ++stats_.gpu_off_clock;
        return;
      }
      ++stats_.gpu_slices;
      out_.add(GpuSliceRow{s.start_ns, s.end_ns - s.start_ns, e.pid,
                           s.next_ns > s.end_ns && on_our_clock(s.next_ns, e.ts_ns) ? s.next_ns : 0});
      return;
    }
    case EntryKind::dropped: {
      if (bytes < sizeof(GpuDropped)) return;
      GpuDropped d;
      std::memcpy(&d, entry, sizeof(d));
      stats_.gpu_dropped += d.records;
      return;
    }
    default:
      return;  // a kind a newer library added: its size is known, so it is skipped alone
  }
}

}  // namespace eacgm
