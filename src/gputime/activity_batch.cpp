// CUPTI activity records into gputime batches (see activity_batch.h).
#include "gputime/activity_batch.h"

#include <cstring>

extern "C" __attribute__((visibility("default"), noinline, used)) void eacgm_gputime_batch(
    const void* batch, uint32_t bytes) {
  // Nothing to do: eacgm's uprobe reads the arguments. The barrier keeps the call and its
  // arguments from being optimised away.
  asm volatile("" : : "r"(batch), "r"(bytes) : "memory");
}

namespace eacgm::gputime {
namespace {

struct Lock {
  explicit Lock(pthread_mutex_t& m) : m_(m) { pthread_mutex_lock(&m_); }
  ~Lock() { pthread_mutex_unlock(&m_); }
  pthread_mutex_t& m_;
};

GpuExecution execution(EntryKind kind, uint32_t correlation, uint64_t start, uint64_t end,
                       uint32_t device, uint32_t context, uint32_t stream) {
  GpuExecution e{};
  e.h = {uint16_t(kind), uint16_t(sizeof(GpuExecution))};
  e.correlation = correlation;
  e.start_ns = start, e.end_ns = end;
  e.device = device, e.context = context, e.stream = stream;
  return e;
}

}  // namespace

// CUPTI writes each kind as the newest record version its release knows; the fields read here
// are at the same offsets in Kernel8-10 and Memcpy5-6 (CUDA 12 and 13; checked with offsetof
// against CUDA 13's headers, which keep the older versions in cupti_activity_deprecated.h).
void ActivityBatcher::add(const CUpti_Activity* record) {
  Lock lock(mu_);
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      GpuExecution e = execution(EntryKind::kernel, k->correlationId, k->start, k->end, k->deviceId,
                                 k->contextId, k->streamId);
      e.grid[0] = k->gridX, e.grid[1] = k->gridY, e.grid[2] = k->gridZ;
      e.block[0] = k->blockX, e.block[1] = k->blockY, e.block[2] = k->blockZ;
      e.shared_bytes = uint32_t(k->staticSharedMemory) + uint32_t(k->dynamicSharedMemory);
      e.registers = k->registersPerThread;
      e.name_id = name_id(k->name);
      put(&e, sizeof(e));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      GpuExecution e = execution(EntryKind::memcpy, m->correlationId, m->start, m->end, m->deviceId,
                                 m->contextId, m->streamId);
      e.bytes = m->bytes;
      e.copy_kind = m->copyKind;
      put(&e, sizeof(e));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      GpuExecution e = execution(EntryKind::memset, m->correlationId, m->start, m->end, m->deviceId,
                                 m->contextId, m->streamId);
      e.bytes = m->bytes;
      put(&e, sizeof(e));
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      GpuLaunch l{};
      l.h = {uint16_t(EntryKind::launch), uint16_t(sizeof(GpuLaunch))};
      l.correlation = a->correlationId;
      l.start_ns = a->start, l.end_ns = a->end;
      l.tid = a->threadId;
      l.cbid = a->cbid;
      put(&l, sizeof(l));
      break;
    }
    default:
      break;
  }
}

void ActivityBatcher::add(GpuCollective c, const char* func, const char* datatype,
                          const char* algo, const char* proto, uint64_t now_ns) {
  Lock lock(mu_);
  c.h = {uint16_t(EntryKind::collective), uint16_t(sizeof(GpuCollective))};
  auto copy = [](char* to, size_t size, const char* from) {
    size_t n = from ? strnlen(from, size - 1) : 0;
    memcpy(to, from ? from : "", n);
    memset(to + n, 0, size - n);
  };
  copy(c.func, sizeof(c.func), func);
  copy(c.datatype, sizeof(c.datatype), datatype);
  copy(c.algo, sizeof(c.algo), algo);
  copy(c.proto, sizeof(c.proto), proto);
  if (used_ + sizeof(c) > kGpuBatchBytes) flush_locked();
  if (!held_since_ns_) held_since_ns_ = now_ns ? now_ns : 1;
  put(&c, sizeof(c));
  if (now_ns >= held_since_ns_ + kMaxHoldNs) flush_locked();
}

uint32_t ActivityBatcher::name_id(const char* name) {
  if (!name) return 0;
  uint32_t slot = uint32_t((reinterpret_cast<uintptr_t>(name) >> 3) * 2654435761u) % kNameSlots;
  for (uint32_t i = 0; i < kNameSlots; ++i, slot = (slot + 1) % kNameSlots) {
    if (name_keys_[slot] == name) return name_ids_[slot];
    if (!name_keys_[slot]) {
      name_keys_[slot] = name;
      name_ids_[slot] = ++last_name_id_;
      put_text(EntryKind::name, name_ids_[slot], name);
      return name_ids_[slot];
    }
  }
  uint32_t id = ++last_name_id_;  // full: this use only
  put_text(EntryKind::name, id, name);
  return id;
}

void ActivityBatcher::note(const char* text) {
  Lock lock(mu_);
  put_text(EntryKind::note, 0, text);
}

void ActivityBatcher::dropped(uint64_t records) {
  Lock lock(mu_);
  GpuDropped d{};
  d.h = {uint16_t(EntryKind::dropped), uint16_t(sizeof(GpuDropped))};
  d.records = records;
  put(&d, sizeof(d));
}

void ActivityBatcher::slice(uint64_t start_ns, uint64_t end_ns, uint64_t next_ns) {
  Lock lock(mu_);
  GpuSlice s{};
  s.h = {uint16_t(EntryKind::slice), uint16_t(sizeof(GpuSlice))};
  s.start_ns = start_ns, s.end_ns = end_ns, s.next_ns = next_ns;
  put(&s, sizeof(s));
}

void ActivityBatcher::put_text(EntryKind kind, uint32_t id, const char* text) {
  size_t n = strnlen(text, kMaxTextBytes - 1);
  uint16_t bytes = entry_bytes(uint32_t(sizeof(GpuText) + n + 1));
  alignas(8) unsigned char entry[sizeof(GpuText) + kMaxTextBytes + 8] = {};
  GpuText t{{uint16_t(kind), bytes}, id};
  memcpy(entry, &t, sizeof(t));
  memcpy(entry + sizeof(t), text, n);  // its NUL and the padding: zeroed above
  put(entry, bytes);
}

void ActivityBatcher::put(const void* entry, uint32_t bytes) {
  if (used_ + bytes > kGpuBatchBytes) flush_locked();
  memcpy(buffer_ + used_, entry, bytes);
  used_ += bytes;
}

void ActivityBatcher::flush() {
  Lock lock(mu_);
  flush_locked();
}

void ActivityBatcher::flush_locked() {
  if (used_ == 0) return;
  // The probe copies the whole buffer and cannot fault pages in: touch every page of the unused
  // tail (a static batcher's buffer starts in pages never written).
  auto* tail = reinterpret_cast<volatile unsigned char*>(buffer_);
  for (uint32_t at = used_; at < kGpuBatchBytes; at += 4096) tail[at] = 0;
  tail[kGpuBatchBytes - 1] = 0;
  eacgm_gputime_batch(buffer_, used_);
  used_ = 0;
  held_since_ns_ = 0;
}

}  // namespace eacgm::gputime
