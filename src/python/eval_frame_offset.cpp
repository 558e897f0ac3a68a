// PyInterpreterState.eval_frame's offset, read from _PyInterpreterState_SetEvalFrameFunc.
#include "python/eval_frame_offset.h"

#include <capstone/capstone.h>
#include <fcntl.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "probe/elf_symbols.h"
#include "util/file_descriptor.h"

namespace eacgm {

std::optional<uint32_t> eval_frame_offset_from_code(const ElfSymbols& elf) {
  const ElfSymbol* fn = elf.find_function("_PyInterpreterState_SetEvalFrameFunc");
  if (!fn || fn->value == 0) return std::nullopt;
  auto offset = elf.file_offset_of(fn->value);
  if (!offset) return std::nullopt;
  // the function is a few dozen instructions; with a debug build's checks, a few hundred bytes
  size_t size = fn->size ? std::min<uint64_t>(fn->size, 4096) : 512;
  std::vector<uint8_t> code(size);
  FileDescriptor fd(open(elf.path().c_str(), O_RDONLY | O_CLOEXEC));
  ssize_t n = fd.get() < 0 ? -1 : pread(fd.get(), code.data(), size, off_t(*offset));
  if (n <= 0) return std::nullopt;
  code.resize(size_t(n));

  csh h = 0;
  if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK) return std::nullopt;
  cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
  cs_insn* insn = nullptr;
  size_t count = cs_disasm(h, code.data(), code.size(), fn->value, 0, &insn);
  // registers holding `interp` (the first argument, rdi, and copies made of it), and the
  // displacements of 8-byte stores of a register through one of them
  std::set<x86_reg> interp{X86_REG_RDI};
  std::set<int64_t> stores;
  for (size_t k = 0; k < count; ++k) {
    const cs_insn& i = insn[k];
    const cs_x86& x = i.detail->x86;
    if (i.id == X86_INS_MOV && x.op_count == 2) {
      const cs_x86_op& dst = x.operands[0];
      const cs_x86_op& src = x.operands[1];
      if (dst.type == X86_OP_REG && src.type == X86_OP_REG && dst.size == 8) {
        if (interp.count(src.reg)) interp.insert(dst.reg);
        else interp.erase(dst.reg);
        continue;
      }
      if (dst.type == X86_OP_MEM && src.type == X86_OP_REG && dst.size == 8 &&
          interp.count(static_cast<x86_reg>(dst.mem.base)) && dst.mem.index == X86_REG_INVALID &&
          dst.mem.disp > 0) {
        stores.insert(dst.mem.disp);
        continue;
      }
    }
    // any other write to a register that held interp ends that (a call clobbers rdi too)
    cs_regs read, write;
    uint8_t nread = 0, nwrite = 0;
    if (cs_regs_access(h, &i, read, &nread, write, &nwrite) == CS_ERR_OK)
      for (uint8_t w = 0; w < nwrite; ++w) interp.erase(static_cast<x86_reg>(write[w]));
    if (i.id == X86_INS_CALL) interp.erase(X86_REG_RDI);
    if (i.id == X86_INS_RET || i.id == X86_INS_JMP) {
      // a tail jump or the return ends the straight path; later blocks (branch targets) are
      // still read, with interp as at entry, since compilers put the store after a branch
      interp = {X86_REG_RDI};
    }
  }
  if (insn) cs_free(insn, count);
  cs_close(&h);
  if (stores.size() != 1 || *stores.begin() >= (1 << 20)) return std::nullopt;
  return uint32_t(*stores.begin());
}

}  // namespace eacgm
