// Finding a function's exit instructions with capstone.
#include "probe/function_exits.h"

#include <capstone/capstone.h>

#include <algorithm>
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

// The instructions cs_disasm decoded, with their details, freed together.
struct Insns {
  cs_insn* insn = nullptr;
  size_t count = 0;
  ~Insns() {
    if (insn) cs_free(insn, count);
  }
  std::span<const cs_insn> all() const { return {insn, count}; }
};

}  // namespace

namespace {

bool writes_reg(csh h, const cs_insn& i, x86_reg reg) {
  cs_regs read, write;
  uint8_t nread = 0, nwrite = 0;
  if (cs_regs_access(h, &i, read, &nread, write, &nwrite) != CS_ERR_OK) return true;
  for (uint8_t k = 0; k < nwrite; ++k)
    if (write[k] == reg) return true;
  return false;
}

// From just after a stack-protector check to the ret it guards, straight-line code (epilogue
// pops, lea/add to rsp, moves): the stack pointer at the ret, as rsp or rbp at the check plus
// an offset. nullopt when the path branches, calls or moves rsp in a way not followed here.
std::optional<ExitPoint> entry_sp_at_check(csh h, std::span<const cs_insn> code, size_t from,
                                           uint64_t check_address) {
  ExitPoint p{check_address, false, 0};
  bool rbp_valid = true;  // rbp still holds its value at the check
  for (size_t k = from; k < code.size() && k < from + 32; ++k) {
    const cs_insn& i = code[k];
    const cs_x86& x = i.detail->x86;
    auto op_reg = [&](int n) { return x.op_count > n && x.operands[n].type == X86_OP_REG
                                          ? x.operands[n].reg : X86_REG_INVALID; };
    switch (i.id) {
      case X86_INS_RET:
        return p;
      case X86_INS_POP:
        p.offset += 8;
        if (op_reg(0) == X86_REG_RBP) rbp_valid = false;
        if (op_reg(0) == X86_REG_RSP) return std::nullopt;
        continue;
      case X86_INS_PUSH:
        p.offset -= 8;
        continue;
      case X86_INS_LEAVE:
        if (!rbp_valid) return std::nullopt;
        p = {check_address, true, 8};
        rbp_valid = false;
        continue;
      default:
        break;
    }
    if (cs_insn_group(h, &i, X86_GRP_JUMP) || cs_insn_group(h, &i, X86_GRP_CALL) ||
        cs_insn_group(h, &i, X86_GRP_RET) || cs_insn_group(h, &i, X86_GRP_INT))
      return std::nullopt;
    if (writes_reg(h, i, X86_REG_RSP)) {
      if (x.op_count != 2 || op_reg(0) != X86_REG_RSP) return std::nullopt;
      const cs_x86_op& src = x.operands[1];
      if ((i.id == X86_INS_ADD || i.id == X86_INS_SUB) && src.type == X86_OP_IMM) {
        p.offset += int32_t(i.id == X86_INS_ADD ? src.imm : -src.imm);
      } else if (i.id == X86_INS_LEA && src.type == X86_OP_MEM &&
                 src.mem.index == X86_REG_INVALID &&
                 (src.mem.base == X86_REG_RSP || (src.mem.base == X86_REG_RBP && rbp_valid))) {
        if (src.mem.base == X86_REG_RBP) p = {check_address, true, 0};
        p.offset += int32_t(src.mem.disp);
      } else if (i.id == X86_INS_MOV && src.type == X86_OP_REG && src.reg == X86_REG_RBP &&
                 rbp_valid) {
        p = {check_address, true, 0};
      } else {
        return std::nullopt;
      }
      continue;
    }
    if (writes_reg(h, i, X86_REG_RBP)) rbp_valid = false;
  }
  return std::nullopt;
}

// `sub/xor/cmp %fs:0x28, reg` (or the reverse): the stack canary being checked
bool reads_canary(const cs_insn& i) {
  if (i.id != X86_INS_SUB && i.id != X86_INS_XOR && i.id != X86_INS_CMP) return false;
  const cs_x86& x = i.detail->x86;
  for (int n = 0; n < x.op_count; ++n) {
    const cs_x86_op& op = x.operands[n];
    if (op.type == X86_OP_MEM && op.mem.segment == X86_REG_FS && op.mem.disp == 0x28 &&
        op.mem.base == X86_REG_INVALID)
      return true;
  }
  return false;
}

}  // namespace

std::optional<FunctionExits> find_function_exits(
    std::span<const uint8_t> bytes, uint64_t address,
    const std::function<bool(uint64_t target)>& is_function, std::string* error) {
  thread_local CsHandle cs;
  if (!cs.ok) {
    if (error) *error = "capstone could not be initialised";
    return std::nullopt;
  }
  // decode the whole function first (up to the first undecodable byte): an exit may be
  // marked by an instruction before it
  Insns decoded;
  decoded.count = cs_disasm(cs.h, bytes.data(), bytes.size(), address, 0, &decoded.insn);
  std::span<const cs_insn> code = decoded.all();
  const uint64_t end = address + bytes.size();
  bool has_ret = std::any_of(code.begin(), code.end(), [](const cs_insn& i) {
    return i.id == X86_INS_RET || i.id == X86_INS_RETF;
  });
  uint64_t decoded_end = code.empty() ? address : code.back().address + code.back().size;
  // padding after the last instruction (int3, nops) may not decode as a whole: only an
  // undecodable byte before any exit is an error
  if (decoded_end < end && !has_ret) {
    if (error) *error = fmt::format("cannot decode the instruction at {:#x}", decoded_end);
    return std::nullopt;
  }
  FunctionExits out;
  for (size_t k = 0; k < code.size(); ++k) {
    const cs_insn& i = code[k];
    const cs_x86& x86 = i.detail->x86;
    if (i.id == X86_INS_RET || i.id == X86_INS_RETF) {
      // the canary check right before this ret, when only the epilogue lies between them
      std::optional<ExitPoint> check;
      for (size_t j = k; j-- > 1 && j + 16 > k;) {
        if (code[j].id == X86_INS_JNE && reads_canary(code[j - 1])) {
          check = entry_sp_at_check(cs.h, code, j + 1, code[j].address);
          break;
        }
        if (cs_insn_group(cs.h, &code[j], X86_GRP_JUMP) ||
            cs_insn_group(cs.h, &code[j], X86_GRP_CALL))
          break;
      }
      out.exits.push_back(check ? *check : ExitPoint{i.address, false, 0});
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
        out.exits.push_back({i.address, false, 0});  // tail call
      else
        ++out.conditional_tail_jumps;
    } else if (op.type == X86_OP_MEM && op.mem.base == X86_REG_RIP && unconditional) {
      out.exits.push_back({i.address, false, 0});  // tail call through a pointer (GOT, vtable)
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
