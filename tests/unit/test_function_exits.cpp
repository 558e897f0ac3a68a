// Finding a function's exit instructions (ret and tail jumps) for exit-instruction probes.
#include <gtest/gtest.h>

#include <vector>

#include "probe/function_exits.h"

namespace eacgm {
namespace {

constexpr uint64_t kBase = 0x1000;
// functions start at 0x2000 and 0x3000; 0x5000 is some function's cold part
bool starts_function(uint64_t target) { return target == 0x2000 || target == 0x3000; }

TEST(FunctionExits, FindsReturnsAndTailCallsButNotColdJumps) {
  std::vector<uint8_t> code = {
      0x55,                                // 1000 push rbp
      0x48, 0x85, 0xff,                    // 1001 test rdi, rdi
      0x74, 0x01,                          // 1004 je 1007 (inside)
      0xc3,                                // 1006 ret
      0x0f, 0x85, 0xf3, 0x0f, 0x00, 0x00,  // 1007 jne 2000 (conditional tail call)
      0xe9, 0xee, 0x1f, 0x00, 0x00,        // 100d jmp 3000 (tail call)
      0xe9, 0xe9, 0x3f, 0x00, 0x00,        // 1012 jmp 5000 (cold part: not an exit)
      0xff, 0x25, 0x00, 0x01, 0x00, 0x00,  // 1017 jmp [rip+0x100] (tail call via GOT)
      0xff, 0xe0,                          // 101d jmp rax (jump table: not an exit)
      0xf3, 0xc3,                          // 101f rep ret
  };
  std::string why;
  auto exits = find_function_exits(code, kBase, starts_function, &why);
  ASSERT_TRUE(exits) << why;
  EXPECT_EQ(exits->exits, (std::vector<ExitPoint>{{0x1006, false, 0},
                                                   {0x100d, false, 0},
                                                   {0x1017, false, 0},
                                                   {0x101f, false, 0}}));
  EXPECT_EQ(exits->conditional_tail_jumps, 1u);
}

// A ret guarded by a stack-protector check: the check's jump is probed instead (the kernel
// emulates jumps; it single-steps ret), with the entry's stack pointer worked out from the
// epilogue between them.
TEST(FunctionExits, UsesTheStackProtectorCheckBeforeARet) {
  std::vector<uint8_t> frame = {
      0x55,                                            // 1000 push rbp
      0x48, 0x89, 0xe5,                                // 1001 mov rbp, rsp
      0x53,                                            // 1004 push rbx
      0x48, 0x83, 0xec, 0x18,                          // 1005 sub rsp, 0x18
      0x48, 0x8b, 0x45, 0xe8,                          // 1009 mov rax, [rbp-0x18]
      0x64, 0x48, 0x2b, 0x04, 0x25, 0x28, 0, 0, 0,     // 100d sub rax, fs:[0x28]
      0x75, 0x07,                                      // 1016 jne 101f
      0x48, 0x8b, 0x5d, 0xf8,                          // 1018 mov rbx, [rbp-8]
      0xc9,                                            // 101c leave
      0xc3,                                            // 101d ret
      0x90,                                            // 101e nop
      0xe8, 0xdc, 0x1f, 0x00, 0x00,                    // 101f call 3000 (__stack_chk_fail)
  };
  std::string why;
  auto exits = find_function_exits(frame, kBase, starts_function, &why);
  ASSERT_TRUE(exits) << why;
  // leave: rsp = rbp + 8, the stack pointer at entry
  EXPECT_EQ(exits->exits, (std::vector<ExitPoint>{{0x1016, true, 8}}));

  std::vector<uint8_t> no_frame = {
      0x53,                                            // 1000 push rbx
      0x48, 0x83, 0xec, 0x18,                          // 1001 sub rsp, 0x18
      0x48, 0x8b, 0x44, 0x24, 0x08,                    // 1005 mov rax, [rsp+8]
      0x64, 0x48, 0x2b, 0x04, 0x25, 0x28, 0, 0, 0,     // 100a sub rax, fs:[0x28]
      0x75, 0x06,                                      // 1013 jne 101b
      0x48, 0x83, 0xc4, 0x18,                          // 1015 add rsp, 0x18
      0x5b,                                            // 1019 pop rbx
      0xc3,                                            // 101a ret
      0xe8, 0xe0, 0x1f, 0x00, 0x00,                    // 101b call 3000
  };
  exits = find_function_exits(no_frame, kBase, starts_function, &why);
  ASSERT_TRUE(exits) << why;
  EXPECT_EQ(exits->exits, (std::vector<ExitPoint>{{0x1013, false, 0x20}}));

  // a call between the check and the ret: the ret itself is probed
  std::vector<uint8_t> call_after = no_frame;
  call_after[0x15] = 0xe8;  // 1015: call (replaces add rsp, 0x18 and pop rbx)
  call_after[0x16] = 0xe6, call_after[0x17] = 0x1f, call_after[0x18] = 0, call_after[0x19] = 0;
  exits = find_function_exits(call_after, kBase, starts_function, &why);
  ASSERT_TRUE(exits) << why;
  EXPECT_EQ(exits->exits, (std::vector<ExitPoint>{{0x101a, false, 0}}));
}

TEST(FunctionExits, RefusesCodeWithoutAnExit) {
  std::vector<uint8_t> loop = {0x90, 0xeb, 0xfd};  // nop; jmp back: never returns
  std::string why;
  EXPECT_FALSE(find_function_exits(loop, kBase, starts_function, &why));
  EXPECT_NE(why.find("no return instruction"), std::string::npos) << why;
  std::vector<uint8_t> junk = {0x06, 0xc3};  // push es: invalid in 64-bit mode
  EXPECT_FALSE(find_function_exits(junk, kBase, starts_function, &why));
  EXPECT_NE(why.find("cannot decode"), std::string::npos) << why;
}

}  // namespace
}  // namespace eacgm
