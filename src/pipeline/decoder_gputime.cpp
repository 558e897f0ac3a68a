// Decoding the gputime layer's batches (gputime/gpu_batch.h): CUPTI's records of when each
// kernel, copy and memset ran on the GPU, and of each kernel launch, into gpu_activity rows.
#include <cstring>
#include <iterator>
#include <utility>

#include "gputime/gpu_batch.h"
#include "pipeline/decoder.h"
#include "probe/demangle.h"

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

}  // namespace

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
      row.tid = l.tid;
      row.kind = "launch";
      row.correlation = l.correlation;
      row.name = launch_api_name(l.cbid);
      ++stats_.gpu_activity;
      out_.add(row);
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
