// Recognising a CPython interpreter in a mapped file (the python executable or libpython3.X.so):
// its version, whether eacgm knows its layout, and where the probed function and _PyRuntime are.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "events.h"

namespace eacgm {

struct CPythonBuild {
  std::string path;
  int major = 0, minor = 0, micro = 0;  // micro: 0 when only the file name told the version
  std::string version_source;           // "Py_Version", "file name"
  uint64_t runtime_vaddr = 0;           // _PyRuntime
  uint64_t eval_vaddr = 0;              // _PyEval_EvalFrameDefault
  uint64_t eval_file_offset = 0;        // where the uprobe goes
  std::optional<eacgm_py_layout> layout;  // nullopt: this version is not supported
  // Where the layout came from: "built-in" (layouts.cpp) or "_Py_DebugOffsets" (3.13+: the
  // offsets the build publishes in its _PyRuntime, over the built-in ones).
  std::string layout_source;
  std::vector<std::string> layout_notes;  // what the user should know about it (one line each)
  bool free_threaded = false;             // a 3.13t build: no layout

  std::string version() const;  // "3.11.7" or "3.11"
  // The one line a user reads when the version is not supported.
  std::string unsupported_message() const;
};

// True when the file name says CPython: python3.X, libpython3.X*.so*.
bool looks_like_cpython(const std::string& path);

// Inspects an ELF file. nullopt when it holds no CPython interpreter (no _PyRuntime and
// _PyEval_EvalFrameDefault symbols) or cannot be read; otherwise the build, supported or not.
std::optional<CPythonBuild> inspect_cpython(const std::string& path);

// The version a file name gives ("libpython3.12.so.1.0", "python3.10"): minor, or -1.
int cpython_minor_from_name(const std::string& path);

}  // namespace eacgm
