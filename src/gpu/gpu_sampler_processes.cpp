// The GPU sampler's per-process half: utilization and memory of the kept pids, joined per pass.
#include "gpu/gpu_sampler.h"

namespace eacgm {
namespace {

// One call of a nvmlDeviceGetComputeRunningProcesses variant into a reused buffer, grown once
// when NVML says it is too small (new processes since the last pass).
template <typename Info>
nvml::Return running_processes(nvml::Return (*fn)(nvml::Device, unsigned*, Info*), nvml::Device h,
                               std::vector<Info>& buffer, unsigned& count) {
  count = unsigned(buffer.size());
  nvml::Return rc = fn(h, &count, buffer.data());
  if (rc == nvml::kErrorInsufficientSize) {
    buffer.resize(std::max<size_t>(count + 16, buffer.size() * 2));
    count = unsigned(buffer.size());
    rc = fn(h, &count, buffer.data());
  }
  if (rc != nvml::kSuccess) count = 0;
  count = std::min<unsigned>(count, unsigned(buffer.size()));
  return rc;
}

}  // namespace

GpuProcessSample* GpuSampler::process_row(uint32_t pid) {
  for (GpuProcessSample& row : rows_) {
    if (row.pid == pid) return &row;
  }
  if (options_.keep_pid && !options_.keep_pid(pid)) return nullptr;
  GpuProcessSample& row = rows_.emplace_back();
  row.ts_ns = pass_ts_ns_;
  row.gpu = pass_gpu_;
  row.pid = pid;
  return &row;
}

void GpuSampler::read_process_memory(DeviceState& d, uint32_t gpu) {
  const NvmlApi& a = nvml_.api();
  unsigned n = 0;
  // The same pid can appear once per MIG instance: its memory is the sum.
  auto add = [this](uint32_t pid, unsigned long long used) {
    GpuProcessSample* row = process_row(pid);
    if (!row || used == nvml::kValueNotAvailable) return;
    row->used_memory_bytes = row->used_memory_bytes.value_or(0) + used;
  };
  if (a.device_get_compute_running_processes_v2) {
    nvml::Return rc =
        running_processes(a.device_get_compute_running_processes_v2, d.handle, procs_v2_buffer_, n);
    if (!ok(kProcessMemory, gpu, "nvmlDeviceGetComputeRunningProcesses_v3", rc)) return;
    for (unsigned i = 0; i < n; ++i)
      add(procs_v2_buffer_[i].pid, procs_v2_buffer_[i].used_gpu_memory);
  } else if (a.device_get_compute_running_processes_v1) {
    nvml::Return rc =
        running_processes(a.device_get_compute_running_processes_v1, d.handle, procs_v1_buffer_, n);
    if (!ok(kProcessMemory, gpu, "nvmlDeviceGetComputeRunningProcesses", rc)) return;
    for (unsigned i = 0; i < n; ++i)
      add(procs_v1_buffer_[i].pid, procs_v1_buffer_[i].used_gpu_memory);
  }
}

// NVML keeps a buffer of per-process samples; passing the newest timestamp seen so far returns
// only newer ones (NOT_FOUND when there are none, which is normal for an idle GPU).
void GpuSampler::read_process_utilization(DeviceState& d, uint32_t gpu, int64_t rt_minus_mono) {
  auto fn = nvml_.api().device_get_process_utilization;
  if (!fn) return;
  unsigned n = unsigned(util_buffer_.size());
  nvml::Return rc = fn(d.handle, util_buffer_.data(), &n, d.last_seen_us);
  if (rc == nvml::kErrorInsufficientSize) {
    util_buffer_.resize(std::max<size_t>(n + 16, util_buffer_.size() * 2));
    n = unsigned(util_buffer_.size());
    rc = fn(d.handle, util_buffer_.data(), &n, d.last_seen_us);
  }
  if (rc == nvml::kErrorNotFound) return;
  if (!ok(kProcessUtilization, gpu, "nvmlDeviceGetProcessUtilization", rc)) return;
  n = std::min<unsigned>(n, unsigned(util_buffer_.size()));
  unsigned long long newest = d.last_seen_us;
  for (unsigned i = 0; i < n; ++i) {
    const nvml::ProcessUtilizationSample& u = util_buffer_[i];
    if (u.timestamp_us <= d.last_seen_us) continue;  // older drivers may repeat old samples
    newest = std::max(newest, u.timestamp_us);
    GpuProcessSample* row = process_row(u.pid);
    if (!row) continue;
    std::optional<uint64_t> ts = realtime_us_to_monotonic_ns(u.timestamp_us, rt_minus_mono);
    if (row->util_ts_ns && ts && *ts < *row->util_ts_ns) continue;  // keep the newest
    row->util_ts_ns = ts;
    row->sm_util_pct = u.sm_util;
    row->mem_util_pct = u.mem_util;
    row->enc_util_pct = u.enc_util;
    row->dec_util_pct = u.dec_util;
  }
  d.last_seen_us = newest;
}

std::optional<uint32_t> GpuSampler::ns_pid_of(uint32_t pid) {
  auto it = ns_pid_cache_.find(pid);
  if (it == ns_pid_cache_.end()) {
    if (ns_pid_cache_.size() >= 4096) ns_pid_cache_.clear();  // pids of long-gone processes
    it = ns_pid_cache_.emplace(pid, read_ns_pid(pid).value_or(0)).first;
  }
  if (it->second == 0) return std::nullopt;
  return it->second;
}

void GpuSampler::sample_processes(DeviceState& d, uint32_t gpu, uint64_t ts_ns,
                                  int64_t rt_minus_mono) {
  rows_.clear();
  pass_ts_ns_ = ts_ns;
  pass_gpu_ = gpu;
  read_process_memory(d, gpu);
  read_process_utilization(d, gpu, rt_minus_mono);
  if (rows_.empty()) return;
  for (GpuProcessSample& row : rows_) row.ns_pid = ns_pid_of(row.pid);
  std::lock_guard lock(sink_mutex_);
  for (const GpuProcessSample& row : rows_) sink_.on_gpu_process_sample(row);
}

}  // namespace eacgm
