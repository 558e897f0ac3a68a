// The agent's duty cycle of its hot call probes; see call_duty.h.
#include "agent/call_duty.h"

#include <algorithm>

namespace eacgm {

bool parse_call_duty(const std::string& text, CallDutySetting& out, std::string& why) {
  CallDutySetting s;
  s.automatic = text == "auto";
  if (!gputime::parse_duty(s.automatic ? kAutoDuty : text.c_str(), s.duty)) {
    why = "not auto, full or ON/PERIOD (durations with a unit, ms, s or m, of at most a day; "
          "ON shorter than PERIOD; e.g. 2s/20s)";
    return false;
  }
  if (!s.duty.full() && s.duty.on_ns < 500'000'000) {
    why = "ON must be at least 500ms (taking the probes off and back takes tens of ms)";
    return false;
  }
  out = s;
  return true;
}

void CallHeat::count(uint32_t tid, uint64_t ts_ns) {
  uint64_t second = ts_ns / 1'000'000'000;
  if (second < second_) return;  // (late: its second was counted)
  if (second > second_) {
    counts_.clear();
    second_ = second;
  }
  hottest_ = std::max(hottest_, ++counts_[tid]);
}

CallDutyCycle::Action CallDutyCycle::step(uint64_t now_ns) {
  const gputime::Duty& d = setting_.duty;
  if (d.full()) return Action::None;
  if (!setting_.automatic) {
    cycling_ = true;
  } else if (!cycling_) {
    if (last_look_ && now_ns - last_look_ < 1'000'000'000) return Action::None;
    last_look_ = now_ns;
    if (heat_.take() < kHotCallsPerSecond) return Action::None;
    cycling_ = true;
    judge_heat_ = false;  // (the on phase now ending began before: not one to judge by)
  }
  bool want = now_ns % d.period_ns < d.on_ns;
  if (want == on_) return Action::None;
  if (!want) {
    // the end of an on phase: a whole one whose hottest thread made under half the heat that
    // started the cycle means the jobs are light again: every call from now on
    if (setting_.automatic && judge_heat_ && heat_.take() < kHotCallsPerSecond / 2) {
      cycling_ = false;
      last_look_ = now_ns;
      return Action::None;
    }
    on_ = false;
    return Action::Pause;
  }
  heat_.take();  // (what came while off: calls in flight at the pause)
  judge_heat_ = true;
  on_ = true;
  return Action::Resume;
}

double CallDutyCycle::ratio() const {
  return cycling_ ? double(setting_.duty.on_ns) / double(setting_.duty.period_ns) : 1.0;
}

}  // namespace eacgm
