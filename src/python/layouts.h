// Per-version CPython struct offsets the BPF side needs to walk interpreters, threads, frames
// and code objects (x86_64, release builds).
#pragma once
#include <optional>

#include "events.h"

namespace eacgm {

// The offsets of CPython 3.<minor>, or nullopt when that version is not supported.
std::optional<eacgm_py_layout> cpython_layout(int minor);

// Fills the layout's read spans from its offsets (the BPF side reads a frame's fields, and a code
// object's identity, in one read each when they lie within EACGM_PY_READ_SPAN bytes).
void set_read_spans(eacgm_py_layout& l);

// The minor versions cpython_layout knows, for messages: "3.10, 3.11, 3.12, 3.13".
const char* supported_cpython_versions();

}  // namespace eacgm
