// Line numbers from a code object's line table (co_linetable), as CPython computes them.
#pragma once
#include <cstdint>
#include <span>

namespace eacgm {

// The source line of the instruction `instr` (in 2-byte code units from the first) of a code
// object of CPython 3.<minor> whose first line is `firstlineno`. -1 when the table (perhaps
// truncated by the BPF copy) does not cover it or the instruction has no line.
int cpython_line_of(int minor, std::span<const uint8_t> table, int firstlineno, uint32_t instr);

}  // namespace eacgm
