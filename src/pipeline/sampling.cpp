// Fixed-deadline sampling: late passes are skipped, not bunched up.
#include "pipeline/sampling.h"

#include <pthread.h>
#include <time.h>

#include <chrono>

namespace eacgm {
namespace {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

}  // namespace

SamplingThread::SamplingThread(HostTracer* host, GpuLayer* gpu, double interval_ms)
    : host_(host), gpu_(gpu), interval_ns_(uint64_t(interval_ms * 1e6)) {
  thread_ = std::thread([this] { run(); });
}

SamplingThread::~SamplingThread() { stop(); }

void SamplingThread::stop() {
  if (!thread_.joinable()) return;
  stop_.request();
  thread_.join();
  sample_host();
}

std::vector<HostSampleRow> SamplingThread::take_host_rows() {
  std::lock_guard lock(mu_);
  return std::move(rows_);
}

void SamplingThread::sample_host() {
  if (!host_) return;
  auto rows = host_->sample(monotonic_ns());
  std::lock_guard lock(mu_);
  for (auto& r : rows) rows_.push_back(std::move(r));
}

void SamplingThread::run() {
  pthread_setname_np(pthread_self(), "eacgm-sampler");  // as top -H and ps -L show it
  using Clock = std::chrono::steady_clock;              // CLOCK_MONOTONIC
  auto interval = std::chrono::nanoseconds(interval_ns_);
  auto next = Clock::now();
  for (;;) {
    sample_host();
    if (gpu_) gpu_->sample_once();
    next += interval;
    for (auto now = Clock::now(); next <= now;) next += interval;
    if (stop_.sleep_until(next)) return;
  }
}

}  // namespace eacgm
