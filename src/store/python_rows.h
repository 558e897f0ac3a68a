// Rows of the python layer, as its decoder produces them and the writer stores them.
#pragma once
#include <cstdint>
#include <string_view>

namespace eacgm {

// One traced Python function call (a generator's or coroutine's resumption is a call of its
// own). Strings are interned by the decoder and outlive the recording.
struct PythonCallRow {
  uint64_t ts_ns = 0;
  uint64_t dur_ns = 0;
  uint32_t pid = 0, tid = 0;
  std::string_view name;  // module.qualname: "train.Model.forward"
  std::string_view file;
  int64_t line = 0;   // the function's first line (co_firstlineno)
  uint32_t depth = 0;  // traced calls of the thread it is nested in (0: outermost)
  int64_t runq_ns = -1;  // waited for a CPU during the call; -1: unknown
};

// One frame of a deduplicated Python stack (python_stacks): depth 0 is the innermost.
struct PythonStackFrameRow {
  int64_t id = 0;
  uint32_t depth = 0;
  std::string_view name;
  std::string_view file;
  int64_t line = -1;  // the line executing in that frame; -1: unknown (stored as NULL)
};

}  // namespace eacgm
