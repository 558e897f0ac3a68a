// The agent's duty cycle of its hot call probes (--call-duty): the torch layer's operators and
// the cuda layer's launches, copies, sets and synchronisations (ProbeSet::duty_cycled), taken
// off and put back (CallTracer::pause_calls). A traced call costs the thread that makes it two
// uprobe traps and the programs, ~1-3 us here: a CPU training's thread making ~9,000 operators
// a second pays ~3% of its CPU for them, always, beside an always-on agent. On for ON of every
// PERIOD it pays that share of it.
//
// "auto" (the default) keeps every call while the jobs are light and cycles (kAutoDuty) only
// while some traced thread is hot: more than kHotCallsPerSecond such calls in a second (~1-1.5%
// of its CPU at that rate); it goes back to every call once the hottest thread of an on phase
// made fewer than half that.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>

#include "gputime/duty.h"
#include "store/sink.h"

namespace eacgm {

struct CallDutySetting {
  bool automatic = true;
  gputime::Duty duty;  // what is cycled (automatic: kAutoDuty); full: never
};
inline constexpr const char* kAutoDuty = "2s/20s";
inline constexpr uint32_t kHotCallsPerSecond = 5000;

// "auto", "full" or ON/PERIOD (gputime::parse_duty's, ON at least 500 ms): false, with why in
// one phrase, when it is none of those.
bool parse_call_duty(const std::string& text, CallDutySetting& out, std::string& why);

// How hot the duty-cycled calls run: the most such calls one thread made in one second (by the
// calls' own times), since the last take().
class CallHeat final : public Sink {
 public:
  void add(const CudaCallRow& r) override { count(r.tid, r.ts_ns); }
  void add(const TorchCallRow& r) override { count(r.tid, r.ts_ns); }
  uint32_t take() {
    uint32_t h = hottest_;
    hottest_ = 0;
    return h;
  }

 private:
  void count(uint32_t tid, uint64_t ts_ns);
  uint64_t second_ = 0;
  std::unordered_map<uint32_t, uint32_t> counts_;  // this second's, by thread
  uint32_t hottest_ = 0;
};

class CallDutyCycle {
 public:
  CallDutyCycle(CallDutySetting setting, CallHeat& heat) : setting_(setting), heat_(heat) {}
  enum class Action { None, Pause, Resume };
  // What to do with the probes at `now` (CLOCK_MONOTONIC): phases are aligned on it, ON from
  // each multiple of PERIOD, as the windows are.
  Action step(uint64_t now_ns);
  // The share of the time the probes are on now: 1 when they are not cycled.
  double ratio() const;
  bool cycling() const { return cycling_; }

 private:
  CallDutySetting setting_;
  CallHeat& heat_;
  bool on_ = true;  // the probes (attached as the processes are found)
  bool cycling_ = false;
  bool judge_heat_ = false;  // the on phase under way is a whole one of the cycle
  uint64_t last_look_ = 0;  // auto, while not cycling: when the heat was last taken
};

}  // namespace eacgm
