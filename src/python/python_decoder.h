// Decodes the python layer's records: names code objects (and gives the BPF side its verdict
// on each), turns returns into python_calls rows, and stacks into deduplicated python_stacks.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "events.h"
#include "python/code_filter.h"
#include "store/sink.h"
#include "util/interner.h"

namespace eacgm {

struct PythonDecoderStats {
  uint64_t calls = 0;         // rows written
  uint64_t pending = 0;       // calls sent while their code's verdict was pending (at entry)
  uint64_t filtered = 0;      // calls of code objects the filter rejected (sent while pending)
  uint64_t unnamed = 0;       // calls whose code object was never named (its record was lost)
  uint64_t code_objects = 0;  // code objects named
  uint64_t stacks = 0;        // distinct stacks
};

// The print of a code object's ASCII name that the BPF side checks code made from a string
// against (EACGM_PY_VOLATILE): FNV-1a over its first EACGM_PY_NAME_PRINT_BYTES characters, up to
// a NUL, folded to 16 bits.
uint32_t python_name_print(std::string_view name);

class PythonDecoder {
 public:
  using VerdictSink = std::function<void(const eacgm_py_code_key&, uint32_t verdict)>;
  PythonDecoder(Sink& out, PythonFilter filter, VerdictSink set_verdict);

  // Handles a record of the python layer; false if `kind` is not one.
  bool on_record(uint32_t kind, const void* data, size_t size);

  // The python_stacks id of the sample or call record (pid, tid, ts_ns) whose stack record came
  // before it, stamped ts_ns; 0 otherwise. The stack is forgotten after.
  int64_t take_stack(uint32_t pid, uint32_t tid, uint64_t ts_ns);
  // A call record's stack (its py_stack_ts, see eacgm_call_event): its own, taken; that of
  // the traced call around it, still pending for that one; or that of an earlier call of the
  // thread whose frames were the same.
  int64_t stack_of_call(uint32_t pid, uint32_t tid, uint64_t ts_ns, uint64_t py_stack_ts);

  // A process exited: forget its code objects (their addresses mean nothing any more).
  void forget(uint32_t pid);

  // Called when a 3.11+ process asks for its eval-frame hook (see bpf/python.bpf.h).
  std::function<void(const eacgm_py_hook_event&)> on_hook_request;

  // Called for each thread a row names (the recording's threads table).
  std::function<void(uint32_t pid, uint32_t tid)> note_thread;

  const PythonDecoderStats& stats() const { return stats_; }
  uint64_t malformed() const { return malformed_; }

 private:
  struct CodeInfo {
    std::string_view name, file;
    int firstlineno = 0;
    int minor = 0;
    bool traced = false;
    std::vector<uint8_t> linetable;
  };
  struct KeyHash {
    size_t operator()(const eacgm_py_code_key& k) const {
      return std::hash<uint64_t>()(k.code ^ (k.name_obj << 1) ^ (uint64_t(k.pid) << 40) ^
                                   k.firstlineno);
    }
  };
  struct KeyEq {
    bool operator()(const eacgm_py_code_key& a, const eacgm_py_code_key& b) const {
      return a.code == b.code && a.name_obj == b.name_obj && a.pid == b.pid &&
             a.firstlineno == b.firstlineno;
    }
  };
  struct PendingStack {
    uint64_t call_ts = 0;
    int64_t id = 0;
  };

  // A call pushed while its code's verdict was pending: open on its thread until a record at
  // its depth or above comes (see eacgm_py_pending_event).
  struct OpenPending {
    uint32_t depth = 0;
    uint64_t ts_ns = 0;
    eacgm_py_code_key key{};
  };

  void decode_code(const eacgm_py_code_event& e);
  void decode_pending(const eacgm_py_pending_event& e);
  // A call record's depth among the recorded calls: its depth less the open pending calls
  // around it that the filter rejected (they were counted, and are not recorded).
  uint32_t recorded_depth(const eacgm_py_call_event& e);
  void decode_call(const eacgm_py_call_event& e);
  void decode_stack(const eacgm_py_stack_event& e);
  int64_t decode_frames(const eacgm_py_stack_event& e);  // the frames' python_stacks id
  const CodeInfo* find(const eacgm_py_code_key& key) const;

  Sink& out_;
  PythonFilter filter_;
  VerdictSink set_verdict_;
  Interner strings_;
  std::unordered_map<eacgm_py_code_key, CodeInfo, KeyHash, KeyEq> codes_;
  std::unordered_map<std::string, int64_t> stack_ids_;  // frames, as text, to their id
  // A stack record's raw frames (its pid, then each frame's code, name, first line and
  // instruction, as sent) to the id they decoded to. A training's stacks repeat every step, and
  // decoding one (each frame's line from its code's line table, the text key) was the largest
  // item of the recorder's own CPU (session 50: cpython_line_of alone 9% of it). Cleared when
  // a code object is named (a key may name another function now, or a frame decoded as
  // "<code object>" get its name), and of a process's stacks at its exit.
  std::unordered_map<std::string, int64_t> raw_stack_ids_;
  static constexpr size_t kMaxRawStacks = 1 << 16;
  // by tid: stacks waiting for their records, the newest last. An outermost call's stack waits
  // from its entry to its exit, while samples and calls inside it come and go: a few per thread.
  static constexpr size_t kPendingPerThread = 8;
  std::unordered_map<uint32_t, std::vector<PendingStack>> pending_;
  // by tid: the stacks the thread's last outermost calls took, least recently used first,
  // which the BPF side lets the thread's next calls refer to while their frames are the same
  // (its PY_LAST_STACKS, also least recently used first: keeping more here, in the same order,
  // keeps every one it can refer to)
  struct LastCallStack {
    uint32_t pid = 0;
    uint64_t call_ts = 0;
    int64_t id = 0;
  };
  static constexpr size_t kLastCallStacks = 8;
  std::unordered_map<uint32_t, std::vector<LastCallStack>> last_call_;
  // by tid: its open pending calls, outermost first (empty for a thread after its first
  // moments: at most one per depth)
  std::unordered_map<uint32_t, std::vector<OpenPending>> open_pending_;
  PythonDecoderStats stats_;
  uint64_t malformed_ = 0;
};

}  // namespace eacgm
