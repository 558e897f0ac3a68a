// Where a function leaves: its `ret` instructions and tail jumps, found by disassembling it
// (capstone). Probing these instead of setting a uretprobe keeps C++ exceptions working: a
// uretprobe replaces the return address with a trampoline that has no unwind info, and an
// exception thrown through it aborts the process.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace eacgm {

// Where a probe marks a function's exit, and how to find the stack pointer the function had at
// entry from the registers there: `base` (rsp or rbp at the probe) + `offset`.
struct ExitPoint {
  uint64_t address = 0;
  bool from_rbp = false;
  int32_t offset = 0;
  bool operator==(const ExitPoint&) const = default;
};

struct FunctionExits {
  // ret and tail-jump instructions, or in their place the stack-protector check just before a
  // ret: a uprobe on `ret` is single-stepped (costly; about 15 us in a VM where debug traps
  // exit to the hypervisor), one on a conditional jump is emulated in the kernel
  std::vector<ExitPoint> exits;
  // Conditional jumps out of the function (conditional tail calls): no instruction marks their
  // exit, so calls leaving that way are not seen to end (their entries are dropped later).
  size_t conditional_tail_jumps = 0;
};

// Disassembles the x86-64 code of one function loaded at `address`. A direct jump out of the
// function is a tail call when `is_function` says its target starts a function (a symbol, a
// PLT entry); other jumps out lead to the function's own cold part (GCC's .cold blocks, where
// exception landing pads live) and are not exits. nullopt with `error` set when the bytes do
// not decode (data in code, a wrong symbol size) or hold no exit.
std::optional<FunctionExits> find_function_exits(
    std::span<const uint8_t> code, uint64_t address,
    const std::function<bool(uint64_t target)>& is_function, std::string* error);

}  // namespace eacgm
