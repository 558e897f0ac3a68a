// The python layer's decoding; like the other decoders, no allocation per call record.
#include "python/python_decoder.h"

#include <algorithm>
#include <cstddef>

#include <cstring>

#include "python/line_table.h"
#include "util/error.h"

namespace eacgm {
namespace {

static_assert(sizeof(eacgm_py_call_event) == 64, "event layout");
static_assert(sizeof(eacgm_py_pending_event) == 48, "event layout");
static_assert(sizeof(eacgm_py_code_event) == 8 + 24 + 8 + EACGM_PY_NAME_BYTES +
                                                 EACGM_PY_FILE_BYTES + EACGM_PY_LINETABLE_BYTES,
              "event layout");
static_assert(sizeof(eacgm_py_stack_event) == 24 + 24 * EACGM_PY_MAX_STACK, "event layout");

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xc0 | (c >> 6));
    out += char(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += char(0xe0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3f));
    out += char(0x80 | (c & 0x3f));
  } else {
    out += char(0xf0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3f));
    out += char(0x80 | ((c >> 6) & 0x3f));
    out += char(0x80 | (c & 0x3f));
  }
}

// A str object's characters as the BPF side copied them (ASCII, or 1/2/4 bytes per character),
// as valid UTF-8: what the process held may be torn or not what its kind says (bytes >= 0x80 in
// an ASCII string, lone surrogates, which CPython's str may hold, or beyond U+10FFFF); each such
// character becomes U+FFFD, so that the recording's text stays text for JSON and protobuf.
std::string to_utf8(const char* data, size_t bytes, uint8_t kind) {
  if (kind != 0 && kind != 1 && kind != 2 && kind != 4) return "?";
  std::string out;
  if (kind == 0) {
    for (size_t i = 0; i < bytes && data[i]; ++i)
      if (uint8_t(data[i]) < 0x80)
        out += data[i];
      else
        append_utf8(out, 0xfffd);
    return out;
  }
  for (size_t i = 0; i + kind <= bytes; i += kind) {
    uint32_t c = 0;
    std::memcpy(&c, data + i, kind);  // little endian
    append_utf8(out, (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff ? 0xfffd : c);
  }
  return out;
}

}  // namespace

uint32_t python_name_print(std::string_view name) {
  uint32_t h = EACGM_PY_NAME_PRINT_SEED;
  for (size_t i = 0; i < name.size() && i < EACGM_PY_NAME_PRINT_BYTES && name[i]; ++i)
    h = eacgm_py_name_print_step(h, uint8_t(name[i]));
  return eacgm_py_name_print_fold(h);
}

PythonDecoder::PythonDecoder(Sink& out, PythonFilter filter, VerdictSink set_verdict)
    : out_(out), filter_(std::move(filter)), set_verdict_(std::move(set_verdict)) {}

bool PythonDecoder::on_record(uint32_t kind, const void* data, size_t size) {
  switch (kind) {
    case EACGM_REC_PY_CALL:
      if (size < sizeof(eacgm_py_call_event)) break;
      decode_call(*static_cast<const eacgm_py_call_event*>(data));
      return true;
    case EACGM_REC_PY_CODE:
      if (size < sizeof(eacgm_py_code_event)) break;
      decode_code(*static_cast<const eacgm_py_code_event*>(data));
      return true;
    case EACGM_REC_PY_STACK: {
      // only the frames used are sent
      constexpr size_t head = offsetof(eacgm_py_stack_event, frames);
      if (size < head) break;
      const auto& e = *static_cast<const eacgm_py_stack_event*>(data);
      if (e.depth > EACGM_PY_MAX_STACK || size < head + e.depth * sizeof(eacgm_py_frame)) break;
      decode_stack(e);
      return true;
    }
    case EACGM_REC_PY_PENDING:
      if (size < sizeof(eacgm_py_pending_event)) break;
      decode_pending(*static_cast<const eacgm_py_pending_event*>(data));
      return true;
    case EACGM_REC_PY_HOOK:
      if (size < sizeof(eacgm_py_hook_event)) break;
      if (on_hook_request) on_hook_request(*static_cast<const eacgm_py_hook_event*>(data));
      return true;
    default:
      return false;
  }
  ++malformed_;
  return true;
}

void PythonDecoder::decode_code(const eacgm_py_code_event& e) {
  CodeInfo info;
  std::string qualname = to_utf8(e.name, std::min<size_t>(e.name_bytes, sizeof(e.name)),
                                 e.name_kind);
  std::string file = to_utf8(e.file, std::min<size_t>(e.file_bytes, sizeof(e.file)), e.file_kind);
  std::string module = python_module_of(file);
  std::string name = module.empty() ? qualname : module + "." + qualname;
  info.name = strings_.intern(name);
  info.file = strings_.intern(file);
  info.firstlineno = int(e.key.firstlineno);
  info.minor = int(e.version % 100);
  info.traced = filter_.wants(info.name, info.file);
  size_t table = std::min<size_t>(e.linetable_bytes, sizeof(e.linetable));
  info.linetable.assign(e.linetable, e.linetable + table);
  uint32_t verdict = info.traced ? EACGM_PY_TRACE : EACGM_PY_SKIP;
  // Code made from a string (not a frozen module): its key may come back as another function
  // (see EACGM_PY_VOLATILE); an ASCII name can be checked at each call.
  if (e.name_kind == 0 && e.file_kind == 0 && file.starts_with("<") &&
      !file.starts_with("<frozen "))
    verdict |=
        EACGM_PY_VOLATILE |
        (python_name_print(std::string_view(e.name, std::min<size_t>(e.name_bytes, sizeof(e.name))))
         << 16);
  codes_[e.key] = std::move(info);  // a key named again is another function now
  raw_stack_ids_.clear();             // (rare after a process's first seconds)
  ++stats_.code_objects;
  if (set_verdict_) set_verdict_(e.key, verdict);
}

const PythonDecoder::CodeInfo* PythonDecoder::find(const eacgm_py_code_key& key) const {
  auto it = codes_.find(key);
  return it == codes_.end() ? nullptr : &it->second;
}

void PythonDecoder::decode_pending(const eacgm_py_pending_event& e) {
  ++stats_.pending;
  auto& open = open_pending_[e.tid];
  // those at its depth or deeper have left (their records came, or were lost)
  std::erase_if(open, [&](const OpenPending& p) { return p.depth >= e.depth; });
  open.push_back({e.depth, e.ts_ns, e.key});
}

uint32_t PythonDecoder::recorded_depth(const eacgm_py_call_event& e) {
  if (open_pending_.empty()) return e.depth;  // (all but a process's first moments: no lookup)
  auto it = open_pending_.find(e.tid);
  if (it == open_pending_.end()) return e.depth;
  auto& open = it->second;
  // deeper ones have left; one at its depth is this call itself (or one that left unseen)
  std::erase_if(open, [&](const OpenPending& p) { return p.depth >= e.depth; });
  uint32_t skipped = 0;
  for (const OpenPending& p : open)
    if (p.ts_ns <= e.ts_ns)
      if (const CodeInfo* info = find(p.key); !info || !info->traced) ++skipped;
  if (open.empty()) open_pending_.erase(it);
  return e.depth - std::min(skipped, e.depth);
}

void PythonDecoder::decode_call(const eacgm_py_call_event& e) {
  uint32_t depth = recorded_depth(e);  // (for every record: a skipped one closes its entry)
  const CodeInfo* info = find({e.code, e.name_obj, e.pid, e.firstlineno});
  if (!info) {
    ++stats_.unnamed;
    return;
  }
  if (!info->traced) {
    ++stats_.filtered;
    return;
  }
  if (note_thread) note_thread(e.pid, e.tid);
  PythonCallRow row;
  row.ts_ns = e.ts_ns;
  row.dur_ns = e.dur_ns;
  row.pid = e.pid;
  row.tid = e.tid;
  row.name = info->name;
  row.file = info->file;
  row.line = info->firstlineno;
  row.depth = depth;
  if (e.runq_ns != EACGM_RUNQ_UNKNOWN) row.runq_ns = int64_t(e.runq_ns);
  out_.add(row);
  ++stats_.calls;
}

void PythonDecoder::decode_stack(const eacgm_py_stack_event& e) {
  uint32_t n = e.depth;  // checked against the record's size
  std::string raw(reinterpret_cast<const char*>(&e.pid), sizeof e.pid);
  raw.append(reinterpret_cast<const char*>(e.frames), n * sizeof(eacgm_py_frame));
  auto known = raw_stack_ids_.find(raw);
  int64_t id = known != raw_stack_ids_.end() ? known->second : decode_frames(e);
  if (known == raw_stack_ids_.end()) {
    if (raw_stack_ids_.size() >= kMaxRawStacks) raw_stack_ids_.clear();
    raw_stack_ids_.emplace(std::move(raw), id);
  }
  auto& waiting = pending_[e.tid];
  // the oldest is a record lost (a full ring) or a call that never returned
  if (waiting.size() == kPendingPerThread) waiting.erase(waiting.begin());
  waiting.push_back({e.call_ts, id});
}

int64_t PythonDecoder::decode_frames(const eacgm_py_stack_event& e) {
  std::string text;  // the frames as they will be stored: the deduplication key
  struct Frame {
    std::string_view name, file;
    int64_t line;
  };
  Frame frames[EACGM_PY_MAX_STACK];
  uint32_t n = e.depth;
  for (uint32_t i = 0; i < n; ++i) {
    const eacgm_py_frame& f = e.frames[i];
    const CodeInfo* info = find({f.code, f.name_obj, e.pid, f.firstlineno});
    Frame& out = frames[i];
    if (info) {
      out.name = info->name;
      out.file = info->file;
      out.line = cpython_line_of(info->minor, info->linetable, info->firstlineno, f.instr);
    } else {
      out.name = strings_.intern(fmt::format("<code object {:#x}>", f.code));
      out.file = {};
      out.line = -1;
    }
    text += fmt::format("{}\t{}\t{}\n", out.name, out.file, out.line);
  }
  auto [it, fresh] = stack_ids_.try_emplace(std::move(text), int64_t(stack_ids_.size() + 1));
  if (fresh) {
    ++stats_.stacks;
    for (uint32_t i = 0; i < n; ++i)
      out_.add(PythonStackFrameRow{it->second, i, frames[i].name, frames[i].file, frames[i].line});
  }
  return it->second;
}

int64_t PythonDecoder::take_stack(uint32_t pid, uint32_t tid, uint64_t ts_ns) {
  (void)pid;  // tids are unique host-wide while both records are in flight
  auto it = pending_.find(tid);
  if (it == pending_.end()) return 0;
  auto& waiting = it->second;
  for (auto s = waiting.rbegin(); s != waiting.rend(); ++s)
    if (s->call_ts == ts_ns) {
      int64_t id = s->id;
      waiting.erase(std::next(s).base());
      if (waiting.empty()) pending_.erase(it);
      return id;
    }
  return 0;
}

int64_t PythonDecoder::stack_of_call(uint32_t pid, uint32_t tid, uint64_t ts_ns,
                                     uint64_t py_stack_ts) {
  if (!py_stack_ts) return 0;
  if (py_stack_ts == ts_ns) {
    int64_t id = take_stack(pid, tid, ts_ns);
    if (id) {
      auto& last = last_call_[tid];
      if (last.size() == kLastCallStacks) last.erase(last.begin());
      last.push_back({pid, ts_ns, id});
    }
    return id;
  }
  if (auto it = pending_.find(tid); it != pending_.end())
    for (const auto& s : it->second)
      if (s.call_ts == py_stack_ts) return s.id;
  if (auto it = last_call_.find(tid); it != last_call_.end()) {
    auto& last = it->second;
    for (auto s = last.begin(); s != last.end(); ++s)
      if (s->call_ts == py_stack_ts) {
        LastCallStack used = *s;  // now the most recently used
        last.erase(s);
        last.push_back(used);
        return used.id;
      }
  }
  return 0;
}

void PythonDecoder::forget(uint32_t pid) {
  std::erase_if(codes_, [pid](const auto& kv) { return kv.first.pid == pid; });
  std::erase_if(raw_stack_ids_, [pid](const auto& kv) {
    uint32_t of = 0;
    memcpy(&of, kv.first.data(), sizeof of);
    return of == pid;
  });
  std::erase_if(last_call_,
                [pid](const auto& kv) { return kv.second.empty() || kv.second[0].pid == pid; });
  std::erase_if(open_pending_,
                [pid](const auto& kv) { return kv.second.empty() || kv.second[0].key.pid == pid; });
}

}  // namespace eacgm
