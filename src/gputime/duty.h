// How much of the time the injection library keeps CUPTI's activity records on
// (EACGM_GPUTIME_DUTY): "full" (always), or ON/PERIOD, e.g. "1s/10s" (the first second of every
// ten). CUPTI's kernel records cost the launching thread 3-10 us per kernel (8-17% of a
// launch-bound training on an H200): a slice of every period keeps GPU time always-on at a
// tenth of that. Read by the library (cupti_injection.cpp) and checked by `record
// --gputime-duty` (one parser, so what record accepts is what the library does). Header-only
// and libc-only, as the library is.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace eacgm::gputime {

struct Duty {
  uint64_t on_ns = 0;      // 0: full (always on)
  uint64_t period_ns = 0;  // with on_ns: on_ns < period_ns
  bool full() const { return on_ns == 0; }
};

// The default of a job that names the library itself (the agent's, -p): a tenth of the time.
// `eacgm record` gives the command it launches "full" unless told otherwise.
inline constexpr const char* kDefaultDuty = "1s/10s";
inline constexpr uint64_t kMinSliceNs = 10'000'000;  // 10 ms: CUPTI's switching is not free

namespace duty_detail {
// "250ms", "1s", "1.5s" -> ns; 0 when it is not a duration of at most a day.
inline uint64_t duration_ns(const char* s, const char* end) {
  char text[32];
  size_t n = size_t(end - s);
  if (n == 0 || n >= sizeof(text)) return 0;
  memcpy(text, s, n);
  text[n] = 0;
  char* unit = nullptr;
  double v = strtod(text, &unit);
  if (unit == text || !(v > 0)) return 0;  // also NaN
  double scale = 0;
  if (!strcmp(unit, "ms")) scale = 1e6;
  else if (!strcmp(unit, "s")) scale = 1e9;
  else if (!strcmp(unit, "m") || !strcmp(unit, "min")) scale = 60e9;
  if (scale == 0 || v * scale > 86400e9) return 0;
  return uint64_t(v * scale);
}
}  // namespace duty_detail

// Parses a duty setting into `out`; false (with `out` unchanged) when it is not one: ON and
// PERIOD durations with units (ms, s, m), ON at least 10 ms and shorter than PERIOD.
inline bool parse_duty(const char* text, Duty& out) {
  if (!text) return false;
  if (!strcmp(text, "full")) {
    out = Duty{};
    return true;
  }
  const char* slash = strchr(text, '/');
  if (!slash) return false;
  uint64_t on = duty_detail::duration_ns(text, slash);
  uint64_t period = duty_detail::duration_ns(slash + 1, slash + 1 + strlen(slash + 1));
  if (!on || !period || on < kMinSliceNs || on >= period) return false;
  out = Duty{on, period};
  return true;
}

}  // namespace eacgm::gputime
