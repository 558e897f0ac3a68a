// Where a CPython build keeps its PEP 523 eval-frame hook (PyInterpreterState.eval_frame),
// read from the machine code of the function that sets it.
#pragma once

#include <cstdint>
#include <optional>

namespace eacgm {

class ElfSymbols;

// The offset of eval_frame in PyInterpreterState, from the code of
// _PyInterpreterState_SetEvalFrameFunc(interp, eval_frame) in `elf` (3.9+ export it): the one
// displacement at which that function stores a 64-bit register through its first argument.
// nullopt when the function is absent, or its code does not show exactly one such offset.
// CPython does not publish this offset (3.13's _Py_DebugOffsets lacks it), and patch releases
// move it (3.13.5's interpreter state is not 3.13.0's): the code that writes it is the truth.
std::optional<uint32_t> eval_frame_offset_from_code(const ElfSymbols& elf);

}  // namespace eacgm
