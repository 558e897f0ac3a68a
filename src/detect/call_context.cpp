// Prorates per-process host samples over a call's span to tell a call slowed by the host from a
// slow one.
#include "detect/call_context.h"

#include <algorithm>
#include <iterator>
#include <map>

#include <fmt/format.h>

#include "report/collectives.h"
#include "store/reader.h"
#include "store/table_readers.h"

namespace eacgm::detect {

CallContext::CallContext(const RecordingReader& rec) {
  each_host_sample(rec, [&](const HostSampleRow& r) { add(r); });
}

void CallContext::add(const HostSampleRow& r) {
  if (r.scope != HostScope::Process || r.interval_ns == 0) return;
  auto& samples = by_pid_[uint32_t(r.id)];
  // (a row of one stop knows its span; of several, or of an older recording, not: spread)
  Sample s{r.ts_ns, r.interval_ns,
           {double(r.reclaim_ns), double(r.tcp_retransmits), double(r.stall_ns),
            double(r.oncpu_ns), double(r.runq_wait_ns), r.taker_name, double(r.taker_ns),
            r.taker_procs, r.taker_pid},
           r.stall_ns && r.stalls == 1 ? r.stall_end_ns : 0};
  // (in order of their ends: a sample that comes late goes to its place)
  auto at = std::upper_bound(samples.begin(), samples.end(), s.end_ns,
                             [](uint64_t t, const Sample& x) { return t < x.end_ns; });
  samples.insert(at, s);
}

void CallContext::forget_before(uint64_t end_ns) {
  for (auto it = by_pid_.begin(); it != by_pid_.end();) {
    auto& v = it->second;
    v.erase(v.begin(), std::lower_bound(v.begin(), v.end(), end_ns,
                                        [](const Sample& x, uint64_t t) { return x.end_ns < t; }));
    it = v.empty() ? by_pid_.erase(it) : std::next(it);
  }
}

namespace {

// Adds a wait charged to processes of one name to `takers` (by name): the processes, as many as
// the most any sample had; the pid, the one of the sample that charged them the most.
void add_taker(std::vector<HostContext>& takers, const std::string& name, double ns,
               uint32_t procs, uint32_t pid) {
  auto t = std::find_if(takers.begin(), takers.end(),
                        [&](const HostContext& x) { return x.taker_name == name; });
  if (t == takers.end()) {
    HostContext n;
    n.taker_name = name;
    n.taker_pid = pid;
    n.runq_ns = ns;  // (here: the most one sample charged)
    n.taker_ns = ns;
    n.taker_procs = procs;
    takers.push_back(std::move(n));
    return;
  }
  t->taker_ns += ns;
  t->taker_procs = std::max(t->taker_procs, procs);
  if (ns > t->runq_ns) t->runq_ns = ns, t->taker_pid = pid;
}

// The taker charged the most, into `sum`'s taker fields.
void top_taker(const std::vector<HostContext>& takers, HostContext& sum) {
  for (const HostContext& t : takers)
    if (t.taker_ns > sum.taker_ns) {
      sum.taker_name = t.taker_name;
      sum.taker_ns = t.taker_ns;
      sum.taker_procs = t.taker_procs;
      sum.taker_pid = t.taker_pid;
    }
}

}  // namespace

HostContext CallContext::over(uint32_t pid, uint64_t ts_ns, uint64_t dur_ns) const {
  HostContext sum;
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) return sum;
  // the takers' waits, prorated as the rest (a few: one a sample, the top of its interval)
  std::vector<HostContext> takers;
  const auto& samples = it->second;
  uint64_t end = ts_ns + dur_ns;
  // the first sample that ends after the call starts
  auto s = std::upper_bound(samples.begin(), samples.end(), ts_ns,
                            [](uint64_t t, const Sample& x) { return t < x.end_ns; });
  // (a stop counts in the sample it ended in: one that began before `end` may be in a sample
  // that begins after it, up to a second on)
  for (; s != samples.end() && s->end_ns - s->interval_ns < end + kLongestStopNs; ++s) {
    if (s->stall_end_ns) {  // the stop's own span: [end - its length, end]
      uint64_t stop_to = s->stall_end_ns;
      uint64_t stop_from = stop_to - std::min(stop_to, uint64_t(s->v.stall_ns));
      uint64_t a = std::max(ts_ns, stop_from), b = std::min(end, stop_to);
      if (b > a) sum.stall_ns += double(b - a);
    }
    uint64_t from = std::max(ts_ns, s->end_ns - s->interval_ns), to = std::min(end, s->end_ns);
    if (to <= from) continue;
    double share = double(to - from) / double(s->interval_ns);
    sum.reclaim_ns += s->v.reclaim_ns * share;
    sum.retransmits += s->v.retransmits * share;
    sum.oncpu_ns += s->v.oncpu_ns * share;
    sum.runq_ns += s->v.runq_ns * share;
    if (!s->stall_end_ns) sum.stall_ns += s->v.stall_ns * share;
    if (s->v.taker_name.empty()) continue;
    add_taker(takers, s->v.taker_name, s->v.taker_ns * share, s->v.taker_procs, s->v.taker_pid);
  }
  top_taker(takers, sum);
  return sum;
}

namespace {

// ", mostly behind cc1plus (pid 4242)": the process that had the CPUs where it did for half or
// more of the waits, or "".
std::string behind(const HostContext& c) {
  if (c.taker_name.empty() || c.taker_ns <= 0 || c.taker_ns < 0.5 * c.runq_ns) return "";
  if (c.taker_procs > 1)
    return fmt::format(", mostly behind {} ({} processes, pid {} the most)", c.taker_name,
                       c.taker_procs, c.taker_pid);
  return fmt::format(", mostly behind {} (pid {})", c.taker_name, c.taker_pid);
}

}  // namespace

void CallContext::explain_window(Anomaly& w, const std::vector<uint32_t>& pids, bool all) const {
  if (!w.dur_ns) return;
  HostContext sum;
  std::vector<HostContext> takers;  // by name: each process's top one
  auto add = [&](uint32_t pid) {
    HostContext c = over(pid, w.ts_ns, w.dur_ns);
    sum.stall_ns += c.stall_ns;
    sum.oncpu_ns += c.oncpu_ns;
    sum.runq_ns += c.runq_ns;
    if (!c.taker_name.empty())
      add_taker(takers, c.taker_name, c.taker_ns, c.taker_procs, c.taker_pid);
  };
  if (all)
    for (const auto& [pid, samples] : by_pid_) add(pid);
  else
    for (uint32_t pid : pids) add(pid);
  // a share of the CPU time its processes had: stops on many CPUs add up on both sides
  if (sum.stall_ns >= 1e6 && sum.stall_ns >= kWindowStallShare * std::max(sum.oncpu_ns, 1e6)) {
    w.cause += fmt::format("; its CPUs stopped for {:.1f} ms (CPU stall)", sum.stall_ns / 1e6);
    w.stalled_ns = sum.stall_ns;
  }
  if (!w.cause.starts_with("CPU interference")) return;
  top_taker(takers, sum);
  if (std::string by = behind(sum); !by.empty())
    w.cause += fmt::format("; {}: {:.1f} s of the {:.1f} s its threads waited for a CPU",
                           by.substr(2), sum.taker_ns / 1e9, sum.runq_ns / 1e9);
}

void CallContext::explain(std::vector<Anomaly>& anomalies) const {
  for (auto& a : anomalies) {
    // (a collective that waited for a late rank is explained by it: what the host did to the
    // waiting process meanwhile, a retransmitted segment on loopback, does not explain the wait)
    if (a.layer == "window" || !a.pid || !a.dur_ns || a.late_pid) continue;
    HostContext c = over(a.pid, a.ts_ns, a.dur_ns);
    double dur = double(a.dur_ns);
    // A stop of the CPU first: a thread that waited for a CPU while its own stopped (queued
    // behind the stopped one) waited for the stop, and the guest cannot say more.
    if (c.stall_ns >= 0.25 * dur) {
      a.cause += fmt::format("; its CPU stopped for {:.1f} ms (CPU stall)", c.stall_ns / 1e6);
      a.stalled_ns = c.stall_ns;
      continue;
    }
    // Only the thread's own wait, measured over the call, can say it was preempted: the
    // process's run-queue wait in the host samples sums all its threads, and other threads'
    // waits would blame this one. And only a wait beyond what the operation's calls usually
    // wait (twice its training tail, and 1 ms more): a job with more runnable threads than
    // cores waits in most calls, on its own.
    double tail_ns = std::max(a.runq_tail_us, 0.0) * 1e3;
    if (a.runq_ns >= 0 && double(a.runq_ns) >= 0.25 * dur &&
        double(a.runq_ns) > std::max(2 * tail_ns, tail_ns + 1e6))
      a.cause += fmt::format("; preempted: waited {:.1f} ms for a CPU (CPU interference){}",
                             double(a.runq_ns) / 1e6, behind(c));
    else if (c.reclaim_ns >= 0.25 * dur)
      a.cause += fmt::format("; {:.1f} ms reclaiming memory (memory pressure)", c.reclaim_ns / 1e6);
    else if (a.layer == "comm" && c.retransmits >= 0.5)
      a.cause += fmt::format("; {:.0f} TCP segments retransmitted (packet loss)", c.retransmits);
  }
}

void explain_wait(const PeerWait& w, const std::string& on_host, Anomaly& a) {
  if (a.layer != "comm" || !a.dur_ns) return;
  double quarter = 0.25 * double(a.dur_ns);
  // A call flagged for its wait (the straggling feature) names who it waited for whatever share
  // of the call the wait was: the wait is what was unusual (session 65: a 2.2 ms late join in a
  // 10 ms all_reduce flagged as "waited for a peer" named no one). Other causes, a quarter.
  bool flagged_for_wait = a.cause.starts_with("straggling rank") && w.straggling_ns() > 0;
  if (flagged_for_wait || double(w.straggling_ns()) >= quarter) {
    // A collective flagged as slow was judged on its duration net of every wait for the last
    // rank (detect's and the agent's models alike): its own time stood out, not the lateness,
    // which its wait feature would have named.
    if (a.cause.starts_with("slow collective")) return;
    a.cause += fmt::format("; rank {} (pid {}{}) joined {:.1f} ms late{} (straggler)", w.last_rank,
                           w.last_pid, on_host, double(w.straggling_ns()) / 1e6,
                           w.on_gpu ? " on the GPU" : "");
    a.late_rank = w.last_rank;
    a.late_pid = w.last_pid;
    a.late_ns = w.straggling_ns();
    a.late_where = on_host;
  } else if (double(w.cpu_ns) >= quarter) {
    a.cause += fmt::format("; rank {} (pid {}{}) joined {:.1f} ms late, kept off a CPU (CPU "
                           "interference)",
                           w.last_rank, w.last_pid, on_host, double(w.cpu_ns) / 1e6);
  }
}

void explain_waits(const Collectives& collectives, std::vector<Anomaly>& anomalies) {
  for (auto& a : anomalies) {
    if (a.layer != "comm" || !a.dur_ns) continue;
    if (const PeerWait* w = collectives.find(a.pid, a.ts_ns))
      explain_wait(*w, collectives.on_host(w->last_pid), a);
  }
}

void attribute_nested(std::vector<Anomaly>& anomalies) {
  // calls by thread, in start order, the longer first among equal starts
  std::map<std::pair<uint32_t, uint32_t>, std::vector<size_t>> by_thread;
  for (size_t i = 0; i < anomalies.size(); ++i)
    if (anomalies[i].layer != "window" && anomalies[i].pid)
      by_thread[{anomalies[i].pid, anomalies[i].tid}].push_back(i);
  auto end = [&](size_t i) { return anomalies[i].ts_ns + anomalies[i].dur_ns; };
  auto inside = [&](size_t b, size_t a) {  // b strictly within a
    const Anomaly &x = anomalies[b], &y = anomalies[a];
    return x.ts_ns >= y.ts_ns && end(b) <= end(a) && (x.ts_ns != y.ts_ns || end(b) != end(a));
  };
  std::vector<std::string> base(anomalies.size());
  for (size_t i = 0; i < anomalies.size(); ++i)
    base[i] = anomalies[i].cause.substr(0, anomalies[i].cause.find("; "));
  for (auto& [thread, calls] : by_thread) {
    std::sort(calls.begin(), calls.end(), [&](size_t a, size_t b) {
      return anomalies[a].ts_ns != anomalies[b].ts_ns ? anomalies[a].ts_ns < anomalies[b].ts_ns
                                                      : end(a) > end(b);
    });
    for (size_t k = 0; k < calls.size(); ++k) {
      size_t a = calls[k];
      std::vector<size_t> within;
      for (size_t j = k + 1; j < calls.size() && anomalies[calls[j]].ts_ns < end(a); ++j)
        if (inside(calls[j], a)) within.push_back(calls[j]);
      if (within.empty()) continue;
      // down from the first enclosed call, through the first call inside each, to the innermost
      size_t leaf = 0;
      for (size_t c = 1; c < within.size(); ++c)
        if (inside(within[c], within[leaf])) leaf = c;
      anomalies[a].cause += "; inside it: " + base[within[leaf]];
    }
  }
}

void attribute_windows(std::vector<Anomaly>& anomalies, const std::vector<Anomaly>& calls) {
  for (auto& w : anomalies) {
    if (w.layer != "window" || (w.cause != "slow collectives" && w.cause != "slow operators"))
      continue;
    // the late ranks of the collectives that waited in it, the one most often late first
    struct Late {
      size_t n = 0;
      uint64_t max_ns = 0;
      const Anomaly* first = nullptr;
    };
    std::map<std::pair<int64_t, uint32_t>, Late> late;
    for (const auto& c : calls) {
      if (!c.late_pid || c.ts_ns >= w.ts_ns + w.dur_ns || c.ts_ns + c.dur_ns <= w.ts_ns) continue;
      Late& l = late[{c.late_rank, c.late_pid}];
      ++l.n;
      l.max_ns = std::max(l.max_ns, c.late_ns);
      if (!l.first) l.first = &c;
    }
    if (late.empty()) continue;
    auto most = std::max_element(late.begin(), late.end(), [](const auto& a, const auto& b) {
      return a.second.n < b.second.n;
    });
    // (the most it was late there: one measurement, so that a summary of many windows merges
    // them into one line with its range, as it does the collectives')
    const Late& l = most->second;
    w.cause += fmt::format(": rank {} (pid {}{}) joined {:.1f} ms late (straggler)",
                           most->first.first, most->first.second, l.first->late_where,
                           double(l.max_ns) / 1e6);
  }
}

}  // namespace eacgm::detect
