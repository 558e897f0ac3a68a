// What the host did to a process while one of its calls ran: a slow call is not always slow
// code. From the host layer's per-process samples, prorated to the call's span.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "detect/detector.h"

namespace eacgm {
class Collectives;
struct HostSampleRow;
struct PeerWait;
class RecordingReader;
}

namespace eacgm::detect {

// Host activity of one process over an interval, in ns and counts.
struct HostContext {
  double reclaim_ns = 0;   // reclaiming memory
  double retransmits = 0;  // TCP segments its sockets sent again
  double stall_ns = 0;     // the CPU under a thread of it stopped (HostSampleRow::stall_ns)
  double oncpu_ns = 0;     // its threads' CPU time
  double runq_ns = 0;      // its threads' waits for a CPU
  // who had the CPUs its threads waited for the most, by process name (HostSampleRow::taker_*):
  // the wait charged to it, how many processes of that name, the one charged the most; "": none
  std::string taker_name;
  double taker_ns = 0;
  uint32_t taker_procs = 0, taker_pid = 0;
};

class CallContext {
 public:
  // Reads the process samples of `host_samples` (none: every context is empty).
  explicit CallContext(const RecordingReader& rec);
  // Samples added as they come (the agent's: detect's rule online), and the old ones dropped.
  CallContext() = default;
  void add(const HostSampleRow& r);  // a process's sample; others are ignored
  void forget_before(uint64_t end_ns);  // samples that ended before
  void forget(uint32_t pid) { by_pid_.erase(pid); }

  // Each sample's counts spread evenly over its interval, and the share that overlaps
  // [ts_ns, ts_ns + dur_ns) summed.
  HostContext over(uint32_t pid, uint64_t ts_ns, uint64_t dur_ns) const;

  // Adds the host's part to the cause of each call anomaly where it explains a quarter or more
  // of the call's duration, or where a collective's sockets retransmitted, e.g. "slow operator:
  // aten::gelu; preempted: waited 4.1 ms for a CPU (CPU interference)". The wait for a CPU is
  // the calling thread's own, measured over the call (Anomaly::runq_ns), and must also be over
  // twice what the operation's training calls waited (Anomaly::runq_tail_us) and 1 ms more;
  // reclaim and retransmits are the process's, prorated from its samples. Calls the host does
  // not explain keep their cause: slow code. First of all a CPU stall (the CPU under one of the
  // process's threads stopped: a vCPU its hypervisor did not run): "slow operator: aten::mm;
  // its CPU stopped for 96.3 ms (CPU stall)", the thread's own CPU or the one a thread it waited
  // for ran on (an OpenBLAS worker of the operator; any thread of the process is charged). A
  // window (of the processes `pids`, or of every process with `all`) gains the stops of its span
  // where they are kWindowStallShare or more of the CPU time its processes had in it: "slow
  // operators; its CPUs stopped for 98.3 ms (CPU stall)" (its kind stays first).
  //
  // A wait for a CPU names who had the CPUs the most, by process name, where that was half or
  // more of the process's waits in the samples around it (HostSampleRow::taker_*): "slow
  // operator: aten::mm; preempted: waited 8.1 ms for a CPU (CPU interference), mostly behind
  // cc1plus (pid 4242)", or "(3 processes, pid 4242 the most)". A window of CPU interference
  // the same, over its span and processes: "...; mostly behind cc1plus (pid 4242): 1.2 s of
  // the 1.4 s its threads waited for a CPU".
  void explain(std::vector<Anomaly>& anomalies) const;
  void explain_window(Anomaly& window, const std::vector<uint32_t>& pids, bool all) const;
  static constexpr double kWindowStallShare = 0.03;
  static constexpr uint64_t kLongestStopNs = 1'000'000'000;  // stops looked for past a span

 private:
  struct Sample {
    uint64_t end_ns, interval_ns;
    HostContext v;
    uint64_t stall_end_ns;  // its one stop ended here (0: spread, as the rest: several, or unknown)
  };
  std::map<uint32_t, std::vector<Sample>> by_pid_;  // each sorted by end_ns
};

// Adds the late rank to the cause of each collective anomaly that spent a quarter or more of
// its duration waiting for it, when it straggled ("...; rank 1 (pid 4242) joined 10.1 ms late
// (straggler)") or was kept off a CPU ("..., kept off a CPU (CPU interference)"). A wait that
// the previous collective's late completion explains adds nothing: that one was slow.
void explain_waits(const Collectives& collectives, std::vector<Anomaly>& anomalies);
// The same for one collective anomaly and its peer wait (detect's and the agent's one rule):
// the cause gains the late rank ("; rank 1 (pid 4242 on host h) joined ..."), except a "slow
// collective", which was judged on its duration net of that wait (the lateness did not stand
// out: its own time did). `on_host`: " on host NAME" or "".
void explain_wait(const PeerWait& w, const std::string& on_host, Anomaly& a);

// Points each call anomaly that encloses others on its thread (a Python function around a slow
// operator, an operator around a slow CUDA call) to the innermost one, the likelier root:
// "slow Python function: Block.forward; inside it: slow operator: aten::gelu". The inner
// cause is named without its own context (after "; "). Calls with the same span as another
// are not inside it.
void attribute_nested(std::vector<Anomaly>& anomalies);

// Names the straggler behind each window flagged for slow collectives or slow operators (a job
// held up by a late rank calls and sends less, and its collectives last longer): where
// collectives that waited for a late rank (`calls`, explained by explain_wait) lie in the
// window, its cause gains the rank most often late there, with the most it was late: "slow
// collectives: rank 1 (pid 4242) joined 52.1 ms late (straggler)" (the kind stays the label).
void attribute_windows(std::vector<Anomaly>& anomalies, const std::vector<Anomaly>& calls);

}  // namespace eacgm::detect
