// The gputime layer on `eacgm report --html`: when each GPU stream and NCCL communicator was
// busy, how busy each GPU was, and which kernels took its time, over the recording's time line.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace eacgm {

class RecordingReader;

struct GpuTimelineOptions {
  // The time line is cut into this many buckets; per lane and bucket the page gets the time it
  // was busy and the names that ran longest, so its size does not grow with the kernels'.
  size_t buckets = 2000;
  size_t lanes = 24;       // streams drawn (the busiest); NCCL communicators: a third of that
  size_t top_kernels = 8;  // kernels drawn over time by name (the most GPU time); the rest as one
  size_t names_per_bucket = 3;
};

// From gpu_activity and gpu_collectives on [t0_ns, t0_ns + span_ns); null where the recording
// has no execution. What was merged or left out is added to `notes`.
nlohmann::json gpu_timeline_section(const RecordingReader& rec, int64_t t0_ns, int64_t span_ns,
                                    const GpuTimelineOptions& options, nlohmann::json& notes);

}  // namespace eacgm
