// NCCL operations timed on the GPU as matchable calls (see gpu_collective_calls.h).
#include "report/gpu_collective_calls.h"

#include <algorithm>

#include "store/reader.h"
#include "store/rows.h"
#include "store/table_readers.h"

namespace eacgm {

GpuTimedCollectives::GpuTimedCollectives(const RecordingReader& rec) {
  each_gpu_collective(rec, [&](const GpuCollectiveRow& g) {
    if (!g.has_gpu_time || g.seq < 0 || g.rank < 0 || g.nranks < 2 || g.rank >= g.nranks ||
        !is_collective(g.name))
      return;
    GpuTimedCall op;
    op.name = std::string(g.name);
    op.nranks = g.nranks;
    op.comm_hash = g.comm_hash;
    op.call.rank = g.rank;
    op.call.pid = g.pid;
    op.call.ts = g.gpu_start_ns;
    op.call.end = g.gpu_start_ns + g.gpu_dur_ns;
    op.call.tid = g.tid;
    op.call.seq = g.seq;
    op.call.row_ts = g.ts_ns;
    op.call.on_gpu = true;
    ops_.push_back(std::move(op));
    enqueue_ts_.push_back(g.ts_ns);
    pids_.insert(g.pid);
  });
}

void GpuTimedCollectives::add_call(const CommCallRow& r) {
  spans_[{r.pid, r.tid}].push_back(
      {r.ts_ns, r.ts_ns + r.dur_ns, r.entry_run_delay_ns, std::string(r.name)});
}

std::vector<GpuTimedCall> GpuTimedCollectives::calls() const {
  std::vector<GpuTimedCall> out = ops_;
  for (size_t i = 0; i < out.size(); ++i) {
    RankCall& c = out[i].call;
    auto it = spans_.find({c.pid, uint32_t(c.tid)});
    if (it == spans_.end()) continue;
    const std::vector<Span>& spans = it->second;
    uint64_t at = enqueue_ts_[i];
    // the last call that started at or before the enqueue: it holds it if it had not ended
    auto after = std::upper_bound(spans.begin(), spans.end(), at,
                                  [](uint64_t t, const Span& s) { return t < s.ts; });
    if (after == spans.begin()) continue;
    const Span& s = *std::prev(after);
    if (at > s.end || s.name != out[i].name) continue;
    c.row_ts = s.ts;
    c.run_delay = s.run_delay;
  }
  return out;
}

}  // namespace eacgm
