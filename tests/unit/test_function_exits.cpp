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
  EXPECT_EQ(exits->exits, (std::vector<uint64_t>{0x1006, 0x100d, 0x1017, 0x101f}));
  EXPECT_EQ(exits->conditional_tail_jumps, 1u);
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
