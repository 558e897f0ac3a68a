// Per-version CPython struct offsets the BPF side needs to walk interpreters, threads, frames
// and code objects (x86_64, release builds).
#pragma once
#include <optional>

#include "events.h"

namespace eacgm {

// The offsets of CPython 3.<minor>, or nullopt when that version is not supported.
std::optional<eacgm_py_layout> cpython_layout(int minor);

// The minor versions cpython_layout knows, for messages: "3.10, 3.11, 3.12, 3.13".
const char* supported_cpython_versions();

}  // namespace eacgm
