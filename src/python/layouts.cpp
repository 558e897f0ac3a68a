// Hand-written from offsetof() against each version's internal headers (Include/internal); the
// unit test test_python_layouts recompiles those offsetof programs wherever headers are
// installed and compares. A field CPython moves in a patch release would show up there.
#include "python/layouts.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace eacgm {

namespace {

void set_310_fields(eacgm_py_layout& l) {
  l.version = 310;
  l.runtime_interp_main = 40;
  l.interp_threads_head = 8;     // tstate_head
  l.interp_eval_frame = 1368;
  l.tstate_thread_id = 176;      // thread_id: pthread_self()
  l.tstate_frame = 24;           // frame (PyFrameObject *)
  l.frame_back = 24;             // f_back
  l.frame_code = 32;             // f_code
  l.frame_instr = 96;            // f_lasti
  l.code_name = 112;             // co_name (3.10 frames have no qualified name)
  l.code_filename = 104;
  l.code_firstlineno = 40;
  l.code_linetable = 120;
  l.unicode_ascii_data = 48;
  l.unicode_compact_data = 72;
}

void set_311_fields(eacgm_py_layout& l) {
  l.version = 311;
  l.runtime_interp_main = 48;
  l.interp_threads_head = 16;
  l.interp_eval_frame = 1424;
  l.tstate_thread_id = 160;      // native_thread_id
  l.tstate_frame = 56;           // cframe
  l.cframe_current_frame = 8;
  l.frame_back = 48;             // previous
  l.frame_code = 32;
  l.frame_instr = 56;            // prev_instr
  l.code_name = 128;             // co_qualname
  l.code_filename = 112;
  l.code_firstlineno = 72;
  l.code_linetable = 136;
  l.code_instructions = 184;     // co_code_adaptive
  l.unicode_ascii_data = 48;
  l.unicode_compact_data = 72;
}

void set_312_fields(eacgm_py_layout& l) {
  l.version = 312;
  l.runtime_interp_main = 48;
  l.interp_threads_head = 72;
  l.interp_eval_frame = 1744;
  l.tstate_thread_id = 144;
  l.tstate_frame = 56;
  l.cframe_current_frame = 0;
  l.frame_back = 8;
  l.frame_code = 0;
  l.frame_instr = 56;
  l.frame_owner = 70;            // FRAME_OWNED_BY_CSTACK (3) marks the C-stack shim frames
  l.code_name = 128;
  l.code_filename = 112;
  l.code_firstlineno = 68;
  l.code_linetable = 136;
  l.code_instructions = 192;
  l.unicode_ascii_data = 40;     // 3.12 dropped the wstr pointer
  l.unicode_compact_data = 56;
}

void set_313_fields(eacgm_py_layout& l) {
  // 3.13 publishes most of these in _PyRuntime.debug_offsets (python/debug_offsets.h),
  // which overrides them; the interpreter's main and eval_frame fields it does not publish.
  l.version = 313;
  l.runtime_interp_main = 640;
  l.interp_threads_head = 7344;
  l.interp_eval_frame = 8472;
  l.tstate_thread_id = 160;
  l.tstate_frame = 72;           // current_frame: the cframe indirection is gone
  l.frame_back = 8;
  l.frame_code = 0;              // f_executable: a code object, or None in shim frames
  l.frame_instr = 56;            // instr_ptr
  l.frame_owner = 70;
  l.code_name = 128;
  l.code_filename = 112;
  l.code_firstlineno = 68;
  l.code_linetable = 136;
  l.code_instructions = 200;
  l.unicode_ascii_data = 40;
  l.unicode_compact_data = 56;
}

}  // namespace

std::optional<eacgm_py_layout> cpython_layout(int minor) {
  eacgm_py_layout l{};
  // Stable across 3.10-3.13: PyObject_VAR_HEAD, PyBytesObject, the PyASCIIObject header.
  l.object_type = 8;
  l.bytes_size = 16;
  l.bytes_data = 32;
  l.unicode_length = 16;
  l.unicode_state = 32;
  l.tstate_next = 8;
  l.tstate_interp = 16;
  switch (minor) {
    case 10:
      set_310_fields(l);
      return l;
    case 11:
      set_311_fields(l);
      return l;
    case 12:
      set_312_fields(l);
      return l;
    case 13:
      set_313_fields(l);
      return l;
    default:
      return std::nullopt;
  }
}

const char* supported_cpython_versions() { return "3.10, 3.11, 3.12, 3.13"; }

void set_read_spans(eacgm_py_layout& l) {
  struct Field {
    uint32_t offset, size;
  };
  auto span = [](std::initializer_list<Field> fields, uint32_t& lo, uint32_t& len) {
    uint32_t a = UINT32_MAX, b = 0;
    for (const Field& f : fields) {
      a = std::min(a, f.offset);
      b = std::max(b, f.offset + f.size);
    }
    lo = a;
    len = b - a <= EACGM_PY_READ_SPAN ? b - a : 0;  // 0: too far apart, read one by one
  };
  // 3.10's f_lasti is an int; later builds keep a pointer to the instruction
  Field instr{l.frame_instr, l.version == 310 ? 4u : 8u};
  if (l.frame_owner) {
    span({{l.frame_back, 8}, {l.frame_code, 8}, instr, {l.frame_owner, 1}}, l.frame_span_lo,
         l.frame_span_len);
  } else {
    span({{l.frame_back, 8}, {l.frame_code, 8}, instr}, l.frame_span_lo, l.frame_span_len);
  }
  span({{l.code_name, 8}, {l.code_firstlineno, 4}}, l.code_span_lo, l.code_span_len);
  // 3.10's (pthread_self and frame) lie 160 bytes apart: read one by one there
  span({{l.tstate_thread_id, 8}, {l.tstate_frame, 8}}, l.tstate_span_lo, l.tstate_span_len);
}

}  // namespace eacgm
