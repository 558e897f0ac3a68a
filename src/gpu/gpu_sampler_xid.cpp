// The GPU sampler's XID thread: waits on an NVML event set with a short timeout, so that stop()
// never waits long for it.
#include <pthread.h>

#include <algorithm>

#include "gpu/gpu_sampler.h"

namespace eacgm {

void GpuSampler::start_xid() {
  const NvmlApi& a = nvml_.api();
  stop_.reset();
  if (!options_.xid_events || states_.empty() || noted_[kXidEvents]) return;
  if (!ok(kXidEvents, 0, "nvmlEventSetCreate", a.event_set_create(&event_set_))) {
    event_set_ = nullptr;
    return;
  }
  size_t registered = 0;
  for (size_t i = 0; i < states_.size(); ++i) {
    // NOT_SUPPORTED (GeForce boards, some VMs) leaves that GPU out quietly.
    if (ok(kXidEvents, devices_[i].index, "nvmlDeviceRegisterEvents(XidCriticalError)",
           a.device_register_events(states_[i].handle, nvml::kEventTypeXidCriticalError,
                                    event_set_))) {
      ++registered;
    }
  }
  if (registered == 0) {
    a.event_set_free(event_set_);
    event_set_ = nullptr;
    return;
  }
  xid_thread_ = std::thread([this] { run_xid(); });
}

void GpuSampler::run_xid() {
  pthread_setname_np(pthread_self(), "eacgm-xid");
  const NvmlApi& a = nvml_.api();
  // Events end the wait at once; the timeout only bounds how long stop() takes, so it need
  // not follow the sampling interval (a 10 ms timeout would wake this thread 100 times a second).
  constexpr unsigned timeout_ms = 100;
  while (!stop_.requested()) {
    nvml::EventData data{};
    nvml::Return rc = a.event_set_wait(event_set_, &data, timeout_ms);
    if (rc == nvml::kErrorTimeout) continue;
    if (rc != nvml::kSuccess) {
      ok(kXidEvents, 0, "nvmlEventSetWait_v2", rc);
      // Do not spin on a failing wait: retry after a timeout's worth of time.
      stop_.sleep_for(std::chrono::milliseconds(timeout_ms));
      continue;
    }
    if (!(data.event_type & nvml::kEventTypeXidCriticalError)) continue;
    GpuXidEvent event;
    event.ts_ns = monotonic_now_ns();
    event.xid = data.event_data;
    bool known = false;
    for (size_t i = 0; i < states_.size() && !known; ++i) {
      known = states_[i].handle == data.device;
      if (known) event.gpu = devices_[i].index;
    }
    if (!known) continue;  // not a GPU we registered
    std::lock_guard lock(sink_mutex_);
    sink_.on_gpu_xid(event);
  }
}

}  // namespace eacgm
