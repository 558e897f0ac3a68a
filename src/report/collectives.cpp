// Lines up each collective's calls across ranks to measure how long early ranks waited.
#include "report/collectives.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "report/gpu_collective_calls.h"
#include "report/report.h"
#include "store/reader.h"
#include "store/rows.h"
#include "store/table_readers.h"

namespace eacgm {
namespace {

using Call = RankCall;

struct Stream {  // one process's calls of one collective on one communicator
  int64_t rank = -1;
  uint32_t pid = 0;
  std::vector<Call> calls;
  bool completes = false;  // its calls last until the collective completed (c10d, the GPU's)
};

// Clocks of probes on different threads (a c10d call ends on a worker thread) may disagree by
// microseconds at the edges of an instance.
constexpr uint64_t kEdgeSlackNs = 100'000;

// A rank's wait for a CPU since its previous collective; -1: unknown.
int64_t cpu_wait(const Call& c) {
  if (!c.has_prev || c.tid != c.prev_tid || c.run_delay < 0 || c.prev_run_delay < 0) return -1;
  return std::max<int64_t>(c.run_delay - c.prev_run_delay, 0);
}

}  // namespace

std::vector<PeerWait> instance_waits(const std::vector<const RankCall*>& calls) {
  std::vector<PeerWait> out;
  if (calls.empty()) return out;
  const RankCall* last = calls[0];
  for (const RankCall* r : calls)
    if (r->ts > last->ts) last = r;
  int64_t late_cpu = cpu_wait(*last);
  // In a synchronous loop each rank starts a collective after its previous one completed
  // (not so for asynchronous ones, issued while others are in flight).
  bool in_turn = std::all_of(calls.begin(), calls.end(), [](const RankCall* r) {
    return r->has_prev && r->prev_end <= r->ts;
  });
  for (const RankCall* c : calls) {
    PeerWait w{last->ts - c->ts, 0, 0, last->rank, last->pid, c->on_gpu};
    if (in_turn && last->prev_end > c->prev_end)
      w.carried_ns = std::min(last->prev_end - c->prev_end, w.wait_ns);
    if (late_cpu > 0 && c != last) {
      int64_t own = std::max<int64_t>(cpu_wait(*c), 0);
      w.cpu_ns =
          std::min(uint64_t(std::max<int64_t>(late_cpu - own, 0)), w.wait_ns - w.carried_ns);
    }
    out.push_back(w);
  }
  return out;
}

std::vector<CollectiveMatcher::Instance> CollectiveMatcher::add(const CommCallRow& r) {
  RankCall c{r.rank, r.pid, r.ts_ns, r.ts_ns + r.dur_ns, int64_t(r.tid), r.entry_run_delay_ns,
             r.seq, r.ts_ns};
  return add(std::string(r.name), r.nranks, r.comm, r.comm_id, c);
}

std::vector<CollectiveMatcher::Instance> CollectiveMatcher::add(const std::string& name,
                                                                int64_t nranks, uint64_t comm,
                                                                uint64_t comm_id, RankCall c) {
  std::vector<Instance> done;
  struct {
    int64_t rank, nranks;
    uint32_t pid;
    uint64_t comm, comm_id;
  } r{c.rank, nranks, c.pid, comm, comm_id};
  if (r.rank < 0 || r.nranks < 2 || r.rank >= r.nranks || !is_collective(name)) return done;
  std::pair<uint32_t, uint64_t> stream{r.pid, r.comm};
  if (auto p = previous_.find(stream); p != previous_.end())
    c.has_prev = true, c.prev_end = p->second.end, c.prev_tid = p->second.tid,
    c.prev_run_delay = p->second.run_delay;
  previous_[stream] = c;
  if (previous_.size() > 10'000) previous_.clear();  // processes come and go: start again
  std::tuple<std::string, int64_t, uint64_t> key{name, r.nranks, r.comm_id};
  auto& by_rank = pending_[key];
  auto& mine = by_rank[r.rank];
  // another process with this rank (a second job, or a restart): its calls start afresh
  if (!mine.empty() && mine.back().pid != r.pid) mine.clear();
  mine.push_back(c);
  if (mine.size() > 1000) mine.pop_front();
  // Rows come when calls end, and no rank's call of an instance ends before every rank joined
  // it: once each rank seen has 3 calls waiting, a rank not seen yet is not traced here (a
  // rank on another node), and the ranks seen are matched among themselves from then on.
  // Before that, matching fewer ranks than the communicator has could pair a rank whose first
  // rows come a moment later with its peers' next instance, for good. NCCL's times on the GPU
  // come in each process's batches (up to 0.1 s of operations at once): there, a rank not seen
  // while each seen one holds calls 5 s old.
  auto waiting = [&](const std::deque<RankCall>& q) {
    return q.size() >= 3 && (!c.on_gpu || c.ts >= q.front().ts + 5'000'000'000ull);
  };
  if (by_rank.size() < size_t(r.nranks) && !partial_.count(key) && by_rank.size() >= 2 &&
      std::all_of(by_rank.begin(), by_rank.end(), [&](const auto& q) { return waiting(q.second); }))
    partial_.insert(key);
  while ((by_rank.size() == size_t(r.nranks) || partial_.count(key)) &&
         std::all_of(by_rank.begin(), by_rank.end(), [](const auto& q) { return !q.second.empty(); })) {
    // c10d calls carry their sequence number: a call lost on one rank leaves the others'
    // calls of that number unmatched (the lowest goes), not every later instance shifted
    int64_t low = INT64_MAX, high = INT64_MIN;
    for (const auto& [rank, q] : by_rank)
      if (q.front().seq >= 0) low = std::min(low, q.front().seq), high = std::max(high, q.front().seq);
    if (low != INT64_MAX && low != high) {
      for (auto& [rank, q] : by_rank)
        if (q.front().seq == low) q.pop_front();
      continue;
    }
    Instance inst;
    for (auto& [rank, q] : by_rank) {
      inst.calls.push_back(q.front());
      q.pop_front();
    }
    std::vector<const RankCall*> ptrs;
    for (const RankCall& k : inst.calls) ptrs.push_back(&k);
    inst.waits = instance_waits(ptrs);
    inst.all_ranks = inst.calls.size() == size_t(r.nranks);
    done.push_back(std::move(inst));
  }
  return done;
}

std::string Collectives::on_host(uint32_t pid) const {
  auto it = hosts_.find(pid);
  return it == hosts_.end() ? std::string() : " on host " + it->second;
}

namespace {

// (name, nranks, communicator identity: 0 unknown) -> (pid, communicator) -> stream
using StreamId = std::pair<uint32_t, uint64_t>;
using Groups = std::map<std::tuple<std::string, int64_t, int64_t>, std::map<StreamId, Stream>>;
// c10d process groups with sequence numbers: (pid, communicator) -> (size, first, last)
using Sequenced = std::map<StreamId, std::tuple<int64_t, int64_t, int64_t>>;

// One call appended to its stream, with its process's previous call on that communicator.
void append(Groups& groups, std::map<StreamId, Call>& previous, const std::string& name,
            int64_t nranks, int64_t identity, StreamId id, Call c, bool completes) {
  Stream& st = groups[{name, nranks, identity}][id];
  st.rank = c.rank;
  st.pid = id.first;
  st.completes = completes;
  if (auto p = previous.find(id); p != previous.end())
    c.has_prev = true, c.prev_end = p->second.end, c.prev_tid = p->second.tid,
    c.prev_run_delay = p->second.run_delay;
  previous[id] = c;
  st.calls.push_back(c);
}

// Each process's calls of each collective on each communicator, in time order; NCCL's from
// their times on the GPU where the recording has them (gpu_collective_calls.h).
Groups read_streams(const RecordingReader& rec, Sequenced& sequenced) {
  Groups groups;
  std::map<StreamId, Call> previous;  // (pid, communicator) -> last call
  GpuTimedCollectives gpu(rec);
  each_comm_call(rec, [&](const CommCallRow& r) {
    if (gpu.covers(r.pid) && r.name.starts_with("nccl")) {
      gpu.add_call(r);
      return;
    }
    if (r.rank < 0 || r.nranks <= 1 || !is_collective(r.name)) return;
    StreamId id{r.pid, r.comm};
    Call c{r.rank, r.pid, r.ts_ns, r.ts_ns + r.dur_ns, r.tid, r.entry_run_delay_ns, r.seq, r.ts_ns};
    append(groups, previous, std::string(r.name), r.nranks, int64_t(r.comm_id), id, c,
           r.name.find(':') != std::string_view::npos);
    if (c.seq >= 0) {
      auto [it, fresh] = sequenced.try_emplace(id, r.nranks, c.seq, c.seq);
      std::get<1>(it->second) = std::min(std::get<1>(it->second), c.seq);
      std::get<2>(it->second) = std::max(std::get<2>(it->second), c.seq);
    }
  });
  // NCCL's hash tells communicators apart by itself (no regrouping by sequence needed)
  std::map<StreamId, Call> previous_on_gpu;
  for (const GpuTimedCall& g : gpu.calls())
    append(groups, previous_on_gpu, g.name, g.nranks, g.comm_hash ? int64_t(g.comm_hash) : 1,
           {g.call.pid, g.comm_hash}, g.call, true);
  return groups;
}

// c10d process groups: the same group on every rank counts its collectives from the same
// number, and different groups from numbers drawn at random, so the processes' groups whose
// numbers overlap (and size agrees) are one group; it is known by its lowest number.
Groups regroup_by_sequence(Groups groups, const Sequenced& sequenced) {
  if (sequenced.empty()) return groups;
  std::vector<std::pair<StreamId, std::tuple<int64_t, int64_t, int64_t>>> by_start(
      sequenced.begin(), sequenced.end());
  std::sort(by_start.begin(), by_start.end(), [](const auto& a, const auto& b) {
    return std::make_pair(std::get<0>(a.second), std::get<1>(a.second)) <
           std::make_pair(std::get<0>(b.second), std::get<1>(b.second));
  });
  std::map<StreamId, int64_t> group_of;
  int64_t size = -1, first = 0, last = -1;
  for (const auto& [id, range] : by_start) {
    const auto& [n, lo, hi] = range;
    if (n != size || lo > last) size = n, first = lo, last = hi;  // a new group
    last = std::max(last, hi);
    group_of[id] = first;
  }
  Groups regrouped;
  for (auto& [key, by_stream] : groups)
    for (auto& [id, st] : by_stream) {
      auto g = group_of.find(id);
      int64_t identity = std::get<2>(key) || g == group_of.end() ? std::get<2>(key) : g->second;
      regrouped[{std::get<0>(key), std::get<1>(key), identity}][id] = std::move(st);
    }
  return regrouped;
}

// One stream per rank 0..nranks-1, by rank; empty (and a note) when the streams are not that.
std::vector<const Stream*> one_stream_per_rank(const std::string& name, int64_t nranks,
                                               const std::map<StreamId, Stream>& by_stream,
                                               std::vector<std::string>& notes) {
  // as many streams as ranks before anything is sized by nranks (a damaged recording's may
  // be anything)
  bool one_per_rank = by_stream.size() == size_t(nranks);
  std::vector<const Stream*> ranks(one_per_rank ? size_t(nranks) : 0, nullptr);
  for (const auto& [id, st] : by_stream) {
    if (!one_per_rank || st.rank >= nranks || ranks[size_t(st.rank)]) one_per_rank = false;
    else ranks[size_t(st.rank)] = &st;
  }
  if (one_per_rank) return ranks;
  notes.push_back(
      by_stream.size() < size_t(nranks)
          ? fmt::format("{}: {} of its {} ranks traced", name, by_stream.size(), nranks)
          : fmt::format("{}: {} streams of calls for {} ranks (several communicators of "
                        "that size cannot be told apart)",
                        name, by_stream.size(), nranks));
  return {};
}

// With sequence numbers (c10d), an instance is the calls that carry one number on every rank:
// a call lost on one rank leaves its instance out, not the whole collective. `ranks` then
// point into `aligned`.
void align_by_sequence(const std::string& name, int64_t nranks, std::vector<const Stream*>& ranks,
                       std::vector<Stream>& aligned, std::vector<std::string>& notes) {
  if (!std::all_of(ranks.begin(), ranks.end(), [](const Stream* r) {
        return std::all_of(r->calls.begin(), r->calls.end(),
                           [](const Call& c) { return c.seq >= 0; });
      }))
    return;
  std::unordered_map<int64_t, int64_t> ranks_with;
  for (const Stream* r : ranks)
    for (const Call& c : r->calls) ++ranks_with[c.seq];
  size_t dropped = 0;
  aligned.reserve(ranks.size());
  for (auto& r : ranks) {
    aligned.push_back({r->rank, r->pid, {}, r->completes});
    for (const Call& c : r->calls)
      if (ranks_with[c.seq] == nranks)
        aligned.back().calls.push_back(c);
      else
        ++dropped;
    r = &aligned.back();
  }
  if (dropped)
    notes.push_back(fmt::format("{}: {} calls whose instance is not on every rank (lost, or "
                                "a rank stopped early) left out",
                                name, dropped));
}

// Which instances can be lined up: every rank made as many calls, and (c10d, whose durations
// run until the collective completes) no rank completed an instance before the last joined
// it. Empty (and a note) when the collective cannot be lined up at all.
std::optional<std::vector<char>> instances_to_line_up(const std::string& name,
                                                      const std::vector<const Stream*>& ranks,
                                                      std::vector<std::string>& notes) {
  size_t n = ranks[0]->calls.size();
  if (std::any_of(ranks.begin(), ranks.end(), [&](const Stream* r) { return r->calls.size() != n; })) {
    std::string counts;
    for (const Stream* r : ranks) counts += fmt::format("{}{}", counts.empty() ? "" : ", ", r->calls.size());
    notes.push_back(fmt::format("{}: the ranks made different numbers of calls ({}; calls lost "
                                "or a rank stopped early), instances cannot be lined up",
                                name, counts));
    return std::nullopt;
  }
  bool completes = ranks[0]->completes;
  size_t broken = 0;
  std::vector<char> ok(n, 1);
  for (size_t k = 0; k < n && completes; ++k) {
    uint64_t last_start = 0, first_end = UINT64_MAX;
    for (const Stream* r : ranks) {
      last_start = std::max(last_start, r->calls[k].ts);
      first_end = std::min(first_end, r->calls[k].end);
    }
    if (first_end + kEdgeSlackNs < last_start) ok[k] = 0, ++broken;
  }
  if (broken * 100 > n) {
    notes.push_back(fmt::format("{}: {} of {} instances end on one rank before another "
                                "joined them (calls lost?), instances cannot be lined up",
                                name, broken, n));
    return std::nullopt;
  }
  return ok;
}

using Key = std::pair<std::string, int64_t>;  // (collective name, number of ranks)

// Each instance lined up: every rank's wait for the last, and who was last.
void add_instances(const Key& key, const std::vector<const Stream*>& ranks,
                   const std::vector<char>& ok, std::map<StreamId, PeerWait>& waits_by_call,
                   std::map<StreamId, PeerWait>& waits_on_gpu,
                   std::map<Key, std::vector<RankWaits>>& rank_waits,
                   std::map<Key, std::vector<CollectiveInstance>>& instances) {
  std::vector<RankWaits>& sides = rank_waits[key];
  sides.resize(ranks.size());
  for (const Stream* r : ranks) sides[size_t(r->rank)].rank = r->rank, sides[size_t(r->rank)].pid = r->pid;
  for (size_t k = 0; k < ok.size(); ++k) {
    if (!ok[k]) continue;
    std::vector<const Call*> calls;
    const Stream* last = ranks[0];
    for (const Stream* r : ranks) {
      calls.push_back(&r->calls[k]);
      if (r->calls[k].ts > last->calls[k].ts) last = r;
    }
    std::vector<PeerWait> waits = instance_waits(calls);
    CollectiveInstance inst{UINT64_MAX, 0, 0, last->rank, last->pid};
    for (size_t i = 0; i < ranks.size(); ++i) {
      const Stream* r = ranks[i];
      const Call& c = r->calls[k];
      const PeerWait& w = waits[i];
      waits_by_call[{r->pid, c.row_ts}] = w;
      if (c.on_gpu) waits_on_gpu[{r->pid, c.ts}] = w;
      inst.ts_ns = std::min(inst.ts_ns, c.ts);
      inst.wait_ns = std::max(inst.wait_ns, w.wait_ns);
      inst.straggling_ns = std::max(inst.straggling_ns, w.straggling_ns());
      RankWaits& side = sides[size_t(r->rank)];
      ++side.calls;
      side.waited_ns += w.wait_ns;
      side.waits_ns.push_back(w.wait_ns);
    }
    RankWaits& late_side = sides[size_t(last->rank)];
    ++late_side.joined_last;
    late_side.straggled_ns += inst.straggling_ns;
    instances[key].push_back(inst);
  }
}

}  // namespace

Collectives::Collectives(const RecordingReader& rec) {
  if (!rec.has_table("comm_calls")) return;
  each_process(rec, [&](const RecordedProcess& p) {
    if (!p.host.empty()) hosts_[p.pid] = p.host;
  });
  Sequenced sequenced;
  Groups groups = read_streams(rec, sequenced);
  groups = regroup_by_sequence(std::move(groups), sequenced);
  // communicators told apart by their identity: named by it where one collective of one size
  // ran on several
  std::map<std::pair<std::string, int64_t>, int> sharing;
  for (const auto& [group, by_stream] : groups)
    ++sharing[{std::get<0>(group), std::get<1>(group)}];
  for (auto& [group, by_stream] : groups) {
    const auto& [op_name, nranks, comm_id] = group;
    std::string name = sharing[{op_name, nranks}] > 1 && comm_id
                           ? fmt::format("{} [comm {:06x}]", op_name, uint64_t(comm_id) & 0xffffff)
                           : op_name;
    std::vector<const Stream*> ranks = one_stream_per_rank(name, nranks, by_stream, notes_);
    if (ranks.empty()) continue;
    std::vector<Stream> aligned;
    align_by_sequence(name, nranks, ranks, aligned, notes_);
    std::optional<std::vector<char>> ok = instances_to_line_up(name, ranks, notes_);
    if (!ok) continue;
    add_instances({name, nranks}, ranks, *ok, waits_, waits_on_gpu_, rank_waits_, instances_);
  }
}

const PeerWait* Collectives::find(uint32_t pid, uint64_t ts_ns) const {
  auto it = waits_.find({pid, ts_ns});
  return it == waits_.end() ? nullptr : &it->second;
}

const PeerWait* Collectives::find_on_gpu(uint32_t pid, uint64_t gpu_start_ns) const {
  auto it = waits_on_gpu_.find({pid, gpu_start_ns});
  return it == waits_on_gpu_.end() ? nullptr : &it->second;
}

size_t Collectives::matched_instances() const {
  size_t n = 0;
  for (const auto& [key, v] : instances_) n += v.size();
  return n;
}

CollectiveSummary summarize(const std::vector<CollectiveInstance>& instances,
                            uint64_t min_straggling_ns) {
  CollectiveSummary s;
  std::vector<uint64_t> waits;
  for (const auto& i : instances) {
    waits.push_back(i.wait_ns);
    if (i.straggling_ns >= min_straggling_ns) s.straggled.push_back(&i);
  }
  std::sort(waits.begin(), waits.end());
  s.wait_p50_ns = percentile(waits, 50);
  s.wait_p99_ns = percentile(waits, 99);
  s.wait_max_ns = waits.empty() ? 0 : waits.back();
  return s;
}

void print_collectives(const Collectives& c, FILE* out, uint64_t min_straggling_ns) {
  if (c.instances().empty() && c.notes().empty()) return;
  fmt::print(out,
             "\ncollectives across ranks (the k-th call of every rank lined up; wait: the first "
             "rank's wait for the last;\nstraggled: the last rank joined {} or more later than "
             "its previous collective and CPU wait explain):\n",
             min_straggling_ns >= 1'000'000 ? fmt::format("{} ms", min_straggling_ns / 1'000'000)
                                            : fmt::format("{} us", min_straggling_ns / 1'000));
  if (!c.instances().empty())
    fmt::print(out, "{:<28} {:>5} {:>9} {:>10} {:>10} {:>10} {:>9}  {}\n", "name", "ranks",
               "instances", "wait p50", "wait p99", "wait max", "straggled", "by rank (total)");
  for (const auto& [key, v] : c.instances()) {
    CollectiveSummary s = summarize(v, min_straggling_ns);
    std::map<std::pair<int64_t, uint32_t>, std::pair<size_t, uint64_t>> by_rank;
    for (const auto* i : s.straggled) {
      auto& [n, total] = by_rank[{i->last_rank, i->last_pid}];
      ++n, total += i->straggling_ns;
    }
    std::string ranks;
    for (const auto& [rank, nt] : by_rank)
      ranks += fmt::format("{}rank {} (pid {}{}): {} ({:.1f} ms)", ranks.empty() ? "" : ", ",
                           rank.first, rank.second, c.on_host(rank.second), nt.first,
                           double(nt.second) / 1e6);
    auto ms = [](uint64_t ns) { return fmt::format("{:.2f} ms", double(ns) / 1e6); };
    fmt::print(out, "{:<28} {:>5} {:>9} {:>10} {:>10} {:>10} {:>9}  {}\n", key.first, key.second,
               v.size(), ms(s.wait_p50_ns), ms(s.wait_p99_ns), ms(s.wait_max_ns),
               s.straggled.size(), ranks.empty() ? "-" : ranks);
  }
  print_rank_waits(c, out);
  for (const auto& n : c.notes()) fmt::print(out, "  not lined up: {}\n", n);
}

void print_rank_waits(const Collectives& c, FILE* out) {
  // the ranks that cost the others most first; all of them in a small job
  const size_t shown = 16;
  for (const auto& [key, sides] : c.rank_waits()) {
    std::vector<const RankWaits*> order;
    for (const auto& r : sides)
      if (r.calls) order.push_back(&r);
    if (order.empty()) continue;
    if (order.size() > shown)
      std::stable_sort(order.begin(), order.end(), [](const RankWaits* a, const RankWaits* b) {
        return a->straggled_ns > b->straggled_ns;
      });
    fmt::print(out,
               "{} per rank (waited: for the last rank to join; joined last: instances it was "
               "the last to join, and the wait its lateness caused beyond what its previous "
               "collective and CPU wait explain):\n",
               key.first);
    fmt::print(out, "  {:>6}  {:<30} {:>6} {:>11} {:>10} {:>12} {:>11}\n", "rank", "process",
               "calls", "waited", "mean wait", "joined last", "straggled");
    for (size_t i = 0; i < order.size() && i < shown; ++i) {
      const RankWaits& r = *order[i];
      std::string where = fmt::format("pid {}{}", r.pid, c.on_host(r.pid));
      fmt::print(out, "  {:>6}  {:<30} {:>6} {:>9.1f} ms {:>7.2f} ms {:>12} {:>8.1f} ms\n",
                 r.rank, where, r.calls, double(r.waited_ns) / 1e6,
                 double(r.waited_ns) / 1e6 / double(r.calls), r.joined_last,
                 double(r.straggled_ns) / 1e6);
    }
    if (order.size() > shown)
      fmt::print(out, "  ... {} more ranks (the {} whose lateness cost most are shown)\n",
                 order.size() - shown, shown);
  }
}

}  // namespace eacgm
