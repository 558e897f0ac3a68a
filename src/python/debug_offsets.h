// The offsets CPython 3.13 publishes about itself: _PyRuntime starts with a _Py_DebugOffsets
// (cookie "xdebugpy", the version, then the offsets of the fields out-of-process readers need),
// so a build's own layout can be read from its file instead of assumed from the release.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "events.h"

namespace eacgm {

// The part of 3.13's _Py_DebugOffsets eacgm uses, as read from the file.
struct CPythonDebugOffsets {
  uint64_t version_hex = 0;  // PY_VERSION_HEX of the build
  bool free_threaded = false;
  uint64_t runtime_interpreters_head = 0;
  uint64_t interp_size = 0, interp_threads_head = 0;
  uint64_t tstate_next = 0, tstate_interp = 0, tstate_current_frame = 0,
           tstate_native_thread_id = 0;
  uint64_t frame_previous = 0, frame_executable = 0, frame_instr_ptr = 0, frame_owner = 0;
  uint64_t code_filename = 0, code_qualname = 0, code_linetable = 0, code_firstlineno = 0,
           code_adaptive = 0;
  uint64_t object_type = 0;
  uint64_t bytes_size = 0, bytes_data = 0;
  uint64_t unicode_state = 0, unicode_length = 0, unicode_ascii_size = 0;
};

// Reads the _Py_DebugOffsets at `file_offset` of `path` (where _PyRuntime's initial bytes lie).
// nullopt when the bytes are not a 3.13 one: no cookie, or another version than 3.<minor>.
std::optional<CPythonDebugOffsets> read_cpython_debug_offsets(const std::string& path,
                                                              uint64_t file_offset, int minor);

// Puts the published offsets into `layout` (the built-in one of the same minor version).
// Returns the fields whose published offset differed from the built-in one. When the build's
// interpreter state differs from the one the built-in layout was written for, the offset of its
// eval_frame hook (which is not published) is unknown: layout.interp_eval_frame becomes 0.
std::vector<std::string> apply_cpython_debug_offsets(const CPythonDebugOffsets& published,
                                                     eacgm_py_layout& layout);

}  // namespace eacgm
