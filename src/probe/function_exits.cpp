// Finding a function's exit instructions with capstone.
#include "probe/function_exits.h"

#include <capstone/capstone.h>

#include <memory>

#include "util/error.h"

namespace eacgm {
namespace {

struct CsHandle {
  csh h = 0;
  bool ok = false;
  CsHandle() {
    ok = cs_open(CS_ARCH_X86, CS_MODE_64, &h) == CS_ERR_OK;
    if (ok) cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
  }
  ~CsHandle() {
    if (ok) cs_close(&h);
  }
};

struct InsnFree {
  void operator()(cs_insn* i) const { cs_free(i, 1); }
};

}  // namespace

std::optional<FunctionExits> find_function_exits(
    std::span<const uint8_t> code, uint64_t address,
    const std::function<bool(uint64_t target)>& is_function, std::string* error) {
  thread_local CsHandle cs;
  if (!cs.ok) {
    if (error) *error = "capstone could not be initialised";
    return std::nullopt;
  }
  std::unique_ptr<cs_insn, InsnFree> insn(cs_malloc(cs.h));
  const uint8_t* p = code.data();
  size_t left = code.size();
  uint64_t pc = address;
  const uint64_t end = address + code.size();
  FunctionExits out;
  while (left > 0) {
    if (!cs_disasm_iter(cs.h, &p, &left, &pc, insn.get())) {
      // padding after the last instruction (int3, nops) may not decode as a whole: only an
      // undecodable byte before any exit is an error
      if (!out.exits.empty()) break;
      if (error) *error = fmt::format("cannot decode the instruction at {:#x}", pc);
      return std::nullopt;
    }
    const cs_insn& i = *insn;
    const cs_x86& x86 = i.detail->x86;
    if (i.id == X86_INS_RET || i.id == X86_INS_RETF) {
      out.exits.push_back(i.address);
      continue;
    }
    bool jump = cs_insn_group(cs.h, &i, X86_GRP_JUMP);
    if (!jump || x86.op_count != 1) continue;
    const cs_x86_op& op = x86.operands[0];
    bool unconditional = i.id == X86_INS_JMP || i.id == X86_INS_LJMP;
    if (op.type == X86_OP_IMM) {
      uint64_t target = uint64_t(op.imm);
      if (target >= address && target < end) continue;  // a jump within the function
      if (!is_function(target)) continue;                 // into its cold part
      if (unconditional)
        out.exits.push_back(i.address);  // tail call
      else
        ++out.conditional_tail_jumps;
    } else if (op.type == X86_OP_MEM && op.mem.base == X86_REG_RIP && unconditional) {
      out.exits.push_back(i.address);  // tail call through a pointer (GOT, vtable slot)
    }
    // register-indirect jumps are taken for jump tables, which stay inside the function
  }
  if (out.exits.empty()) {
    if (error) *error = "no return instruction found";
    return std::nullopt;
  }
  return out;
}

}  // namespace eacgm
