// Decoding PyTorch c10d calls: each call is paired with its Work object's completion, so its
// duration lasts until the collective finished, not until it was queued.
#include "pipeline/decoder.h"

#include "python/python_decoder.h"

namespace eacgm {

void EventDecoder::emit_c10d(C10dCall call, uint64_t end_ns, int64_t ret) {
  CommCallRow& row = call.row;
  row.dur_ns = end_ns > row.ts_ns ? end_ns - row.ts_ns : 0;
  row.ret = ret;
  set_bandwidths(row, call.collective);
  ++stats_.calls;
  out_.add(row);
}

void EventDecoder::decode_c10d(const eacgm_call_event& e) {
  auto ops = c10d_ops();
  size_t index = e.op - kC10dOpBase;
  if (index >= ops.size()) {
    ++stats_.malformed;
    return;
  }
  const C10dOp& op = ops[index];
  switch (op.role) {
    case C10dRole::Call: {
      note_thread(e.pid, e.tid);
      // the previous call of this thread never got a Work: it raised before being queued
      if (auto it = c10d_pending_.find(e.tid); it != c10d_pending_.end()) {
        uint64_t start = it->second.row.ts_ns;
        emit_c10d(std::move(it->second), start, -1);
        c10d_pending_.erase(it);
      }
      C10dCall call;
      call.collective = op.collective;
      CommCallRow& row = call.row;
      row.ts_ns = e.ts_ns;
      row.entry_run_delay_ns = run_delay_of(e);
      row.pid = e.pid;
      row.tid = e.tid;
      row.name = op.name;
      row.comm = e.args[1];  // the process group
      if (python_) row.py_stack = python_->stack_of_call(e.pid, e.tid, e.ts_ns, e.py_stack_ts);
      if (op.tensor_arg >= 0) {
        uint64_t dtype = e.deref[4] & 0xffffffff, tensors = e.deref[4] >> 32;
        if (e.deref[0] != ~0ULL) {
          row.bytes = int64_t(e.deref[0]);
          row.count = int64_t(e.deref[1]);
        }
        if (tensors > 0 && e.deref[0] != ~0ULL) row.datatype = scalar_type_name(dtype);
      }
      if (e.deref[3]) {  // rank_ and size_ of the process group
        row.rank = int32_t(e.deref[3] & 0xffffffff);
        row.nranks = int32_t(e.deref[3] >> 32);
      }
      if (e.deref[2] && e.deref[2] < (1ULL << 62)) row.seq = int64_t(e.deref[2]);
      if (op.peer_arg >= 0) row.peer = int32_t(call_arg(e, op.peer_arg));
      c10d_pending_[e.tid] = std::move(call);
      break;
    }
    case C10dRole::BindQueued:
    case C10dRole::BindWork: {
      uint64_t work = op.role == C10dRole::BindQueued ? e.deref[2] : e.args[0];
      auto it = c10d_pending_.find(e.tid);
      if (it == c10d_pending_.end() || !work) break;  // a Work of a call not traced
      c10d_works_[{e.pid, work}] = std::move(it->second);
      c10d_pending_.erase(it);
      break;
    }
    case C10dRole::Finish: {
      // Work addresses are reused as soon as a Work is freed: the first completion ends it
      auto it = c10d_works_.find({e.pid, e.args[0]});
      if (it == c10d_works_.end()) break;
      emit_c10d(std::move(it->second), e.ts_ns, e.deref[2] != 0 ? 1 : 0);
      c10d_works_.erase(it);
      break;
    }
  }
}

void EventDecoder::forget_c10d(uint32_t pid) {
  // a process gone: its calls still pending become rows, as at the end; its works incomplete
  for (auto it = c10d_pending_.begin(); it != c10d_pending_.end();) {
    if (it->second.row.pid != pid) {
      ++it;
      continue;
    }
    uint64_t start = it->second.row.ts_ns;
    emit_c10d(std::move(it->second), start, -1);
    it = c10d_pending_.erase(it);
  }
  auto first = c10d_works_.lower_bound({pid, 0});
  auto last = c10d_works_.lower_bound({pid + 1, 0});
  stats_.c10d_incomplete += uint64_t(std::distance(first, last));
  c10d_works_.erase(first, last);
}

void EventDecoder::finish_c10d() {
  for (auto& [tid, call] : c10d_pending_) {
    uint64_t start = call.row.ts_ns;
    emit_c10d(std::move(call), start, -1);
  }
  c10d_pending_.clear();
  stats_.c10d_incomplete += c10d_works_.size();
  c10d_works_.clear();
}

}  // namespace eacgm
