// A recording's CPU profile as pprof's profile.proto (what go tool pprof, Pyroscope, Parca and
// speedscope read), written with eacgm's own protobuf encoder and zlib's gzip.
#pragma once
#include <cstdint>
#include <string>

namespace eacgm {

class CpuProfile;

// The profile, not compressed: samples aggregated per (stack, pid, tid) with their count and CPU
// time (count x the sampling period) and pid/tid labels; Python frames with their file and line,
// native frames with their module as a mapping. With a non-empty `off_cpu` profile a third value,
// off_cpu/nanoseconds (time blocked), in samples of their own (0 in the first two); the default
// sample type stays cpu (go tool pprof -sample_index=off_cpu shows the waits).
// `start_realtime_ns`/`duration_ns` go to the profile's time fields (0: unknown).
std::string pprof_profile(const CpuProfile& cpu, const CpuProfile* off_cpu,
                          int64_t start_realtime_ns, int64_t duration_ns);

// `data` gzip-compressed (as pprof files are). Throws eacgm::Error if zlib fails.
std::string gzip(const std::string& data);

}  // namespace eacgm
