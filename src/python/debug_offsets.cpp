// Reading CPython 3.13's _Py_DebugOffsets from the interpreter's file (the .PyRuntime section
// holds _PyRuntime's initial value, debug_offsets first), at plan time, before any process runs.
#include "python/debug_offsets.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "util/file_descriptor.h"

namespace eacgm {
namespace {

// 3.13's struct _Py_DebugOffsets (Include/internal/pycore_runtime.h), every member a uint64_t
// in groups that each start with the size of the struct they describe. Only the prefix up to
// unicode_object is spelt out; 3.14 reorders it, so it is read for 3.13 only.
struct RawDebugOffsets313 {
  char cookie[8];
  uint64_t version, free_threaded;
  uint64_t runtime_size, runtime_finalizing, runtime_interpreters_head;
  uint64_t interp_size, interp_id, interp_next, interp_threads_head, interp_rest[9];
  uint64_t tstate_size, tstate_prev, tstate_next, tstate_interp, tstate_current_frame,
      tstate_thread_id, tstate_native_thread_id, tstate_datastack_chunk, tstate_status;
  uint64_t frame_size, frame_previous, frame_executable, frame_instr_ptr, frame_localsplus,
      frame_owner;
  uint64_t code_size, code_filename, code_name, code_qualname, code_linetable, code_firstlineno,
      code_argcount, code_localsplusnames, code_localspluskinds, code_adaptive;
  uint64_t object_size, object_type;
  uint64_t type_object[4], tuple_object[3], list_object[3], dict_object[3], float_object[2],
      long_object[3];
  uint64_t bytes_size_of, bytes_size, bytes_data;
  uint64_t unicode_size_of, unicode_state, unicode_length, unicode_ascii_size;
};
static_assert(sizeof(RawDebugOffsets313) == 568, "the 3.13 _Py_DebugOffsets up to unicode_object");

// The PyInterpreterState the built-in 3.13 layout (layouts.cpp) was written against: its size
// and threads.head. A build whose interpreter state differs has eval_frame elsewhere.
constexpr uint64_t kInterpSize313 = 194968;
constexpr uint64_t kInterpThreadsHead313 = 7344;

// Offsets the BPF side reads as u32: a published value past that is not believed.
bool fits(uint64_t v) { return v < (1u << 20); }

}  // namespace

std::optional<CPythonDebugOffsets> read_cpython_debug_offsets(const std::string& path,
                                                              uint64_t file_offset, int minor) {
  if (minor != 13) return std::nullopt;
  FileDescriptor fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  RawDebugOffsets313 raw{};
  if (fd.get() < 0 || pread(fd.get(), &raw, sizeof(raw), off_t(file_offset)) != sizeof(raw))
    return std::nullopt;
  if (std::memcmp(raw.cookie, "xdebugpy", 8) != 0) return std::nullopt;
  if ((raw.version >> 24) != 3 || int((raw.version >> 16) & 0xff) != minor) return std::nullopt;
  CPythonDebugOffsets d;
  d.version_hex = raw.version;
  d.free_threaded = raw.free_threaded != 0;
  d.runtime_interpreters_head = raw.runtime_interpreters_head;
  d.interp_size = raw.interp_size;
  d.interp_threads_head = raw.interp_threads_head;
  d.tstate_next = raw.tstate_next;
  d.tstate_interp = raw.tstate_interp;
  d.tstate_current_frame = raw.tstate_current_frame;
  d.tstate_native_thread_id = raw.tstate_native_thread_id;
  d.frame_previous = raw.frame_previous;
  d.frame_executable = raw.frame_executable;
  d.frame_instr_ptr = raw.frame_instr_ptr;
  d.frame_owner = raw.frame_owner;
  d.code_filename = raw.code_filename;
  d.code_qualname = raw.code_qualname;
  d.code_linetable = raw.code_linetable;
  d.code_firstlineno = raw.code_firstlineno;
  d.code_adaptive = raw.code_adaptive;
  d.object_type = raw.object_type;
  d.bytes_size = raw.bytes_size;
  d.bytes_data = raw.bytes_data;
  d.unicode_state = raw.unicode_state;
  d.unicode_length = raw.unicode_length;
  d.unicode_ascii_size = raw.unicode_ascii_size;
  for (uint64_t v : {d.runtime_interpreters_head,
                     d.interp_threads_head,
                     d.tstate_next,
                     d.tstate_interp,
                     d.tstate_current_frame,
                     d.tstate_native_thread_id,
                     d.frame_previous,
                     d.frame_executable,
                     d.frame_instr_ptr,
                     d.frame_owner,
                     d.code_filename,
                     d.code_qualname,
                     d.code_linetable,
                     d.code_firstlineno,
                     d.code_adaptive,
                     d.object_type,
                     d.bytes_size,
                     d.bytes_data,
                     d.unicode_state,
                     d.unicode_length,
                     d.unicode_ascii_size})
    if (!fits(v)) return std::nullopt;
  return d;
}

std::vector<std::string> apply_cpython_debug_offsets(const CPythonDebugOffsets& d,
                                                     eacgm_py_layout& l) {
  std::vector<std::string> differed;
  auto set = [&](const char* name, __u32& field, uint64_t value) {
    if (field != value) differed.push_back(name);
    field = __u32(value);
  };
  // struct pyinterpreters is { PyMutex mutex; head; main; ... }: main is the pointer after head
  set("runtime_interp_main", l.runtime_interp_main, d.runtime_interpreters_head + 8);
  set("interp_threads_head", l.interp_threads_head, d.interp_threads_head);
  set("tstate_next", l.tstate_next, d.tstate_next);
  set("tstate_interp", l.tstate_interp, d.tstate_interp);
  set("tstate_thread_id", l.tstate_thread_id, d.tstate_native_thread_id);
  set("tstate_frame", l.tstate_frame, d.tstate_current_frame);
  set("frame_back", l.frame_back, d.frame_previous);
  set("frame_code", l.frame_code, d.frame_executable);
  set("frame_instr", l.frame_instr, d.frame_instr_ptr);
  set("frame_owner", l.frame_owner, d.frame_owner);
  set("code_name", l.code_name, d.code_qualname);
  set("code_filename", l.code_filename, d.code_filename);
  set("code_firstlineno", l.code_firstlineno, d.code_firstlineno);
  set("code_linetable", l.code_linetable, d.code_linetable);
  set("code_instructions", l.code_instructions, d.code_adaptive);
  set("object_type", l.object_type, d.object_type);
  set("bytes_size", l.bytes_size, d.bytes_size);
  set("bytes_data", l.bytes_data, d.bytes_data);
  set("unicode_state", l.unicode_state, d.unicode_state);
  set("unicode_length", l.unicode_length, d.unicode_length);
  set("unicode_ascii_data", l.unicode_ascii_data, d.unicode_ascii_size);
  // compact non-ASCII data follows the PyCompactUnicodeObject header: utf8_length, utf8
  set("unicode_compact_data", l.unicode_compact_data, d.unicode_ascii_size + 16);
  if (d.interp_size != kInterpSize313 || d.interp_threads_head != kInterpThreadsHead313) {
    differed.push_back("interp_eval_frame");
    l.interp_eval_frame = 0;
  }
  return differed;
}

}  // namespace eacgm
