// Pure helpers of the GPU layer: reason bit names, clocks, the NSpid of a process.
#include "gpu/gpu_samples.h"

#include <fmt/format.h>
#include <time.h>

#include <array>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>

namespace eacgm {
namespace {

// Bit i of nvmlClocksEventReasons (nvmlClocksEventReason* / nvmlClocksThrottleReason*).
constexpr std::array<const char*, 9> kReasonNames = {
    "gpu_idle",                     // 0x001
    "applications_clocks_setting",  // 0x002
    "sw_power_cap",                 // 0x004
    "hw_slowdown",                  // 0x008
    "sync_boost",                   // 0x010
    "sw_thermal_slowdown",          // 0x020
    "hw_thermal_slowdown",          // 0x040
    "hw_power_brake_slowdown",      // 0x080
    "display_clock_setting",        // 0x100
};

uint64_t clock_now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace

std::vector<std::string> throttle_reason_names(uint64_t mask) {
  std::vector<std::string> names;
  for (unsigned bit = 0; bit < 64; ++bit) {
    uint64_t b = uint64_t(1) << bit;
    if (!(mask & b)) continue;
    if (bit < kReasonNames.size()) {
      names.emplace_back(kReasonNames[bit]);
    } else {
      names.push_back(fmt::format("0x{:x}", b));
    }
  }
  return names;
}

std::string throttle_reasons_text(uint64_t mask) {
  if (mask == 0) return "none";
  std::string out;
  for (const std::string& name : throttle_reason_names(mask)) {
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

std::optional<uint64_t> realtime_us_to_monotonic_ns(uint64_t realtime_us,
                                                    int64_t realtime_minus_mono_ns) {
  int64_t mono = int64_t(realtime_us * 1000) - realtime_minus_mono_ns;
  if (mono <= 0) return std::nullopt;
  return uint64_t(mono);
}

std::optional<uint32_t> parse_ns_pid(std::string_view text) {
  constexpr std::string_view kKey = "NSpid:";
  size_t at = text.find(kKey);
  while (at != std::string_view::npos && at != 0 && text[at - 1] != '\n') {
    at = text.find(kKey, at + 1);
  }
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view line = text.substr(at + kKey.size());
  line = line.substr(0, line.find('\n'));
  std::optional<uint32_t> last;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    uint32_t v = 0;
    auto [end, ec] = std::from_chars(line.data() + i, line.data() + line.size(), v);
    if (ec != std::errc()) break;
    last = v;
    i = size_t(end - line.data());
  }
  return last;
}

std::optional<uint32_t> read_ns_pid(uint32_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  std::optional<uint32_t> inner = parse_ns_pid(text.str());
  if (!inner || *inner == pid) return std::nullopt;
  return inner;
}

uint64_t monotonic_now_ns() { return clock_now_ns(CLOCK_MONOTONIC); }
uint64_t realtime_now_ns() { return clock_now_ns(CLOCK_REALTIME); }

int64_t realtime_minus_monotonic_ns() {
  // A realtime read bracketed by two monotonic reads, the tightest bracket of a few: one pair
  // read apart can be preempted between its reads (hundreds of us on a busy 2-core machine),
  // which would misplace every wall-clock time of a recording by that much.
  int64_t best = 0;
  uint64_t best_gap = UINT64_MAX;
  for (int i = 0; i < 5; ++i) {
    uint64_t before = monotonic_now_ns();
    uint64_t real = realtime_now_ns();
    uint64_t after = monotonic_now_ns();
    if (after - before < best_gap) {
      best_gap = after - before;
      best = int64_t(real) - int64_t(before + (after - before) / 2);
    }
  }
  return best;
}

}  // namespace eacgm
