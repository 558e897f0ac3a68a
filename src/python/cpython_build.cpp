// CPython version detection from the ELF file itself, so that a renamed or statically linked
// interpreter (Debian's /usr/bin/python3.11 holds libpython) is still recognised.
#include "python/cpython_build.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "probe/elf_symbols.h"
#include "python/debug_offsets.h"
#include "python/eval_frame_offset.h"
#include "python/layouts.h"
#include "util/error.h"
#include "util/file_descriptor.h"

namespace eacgm {
namespace {

const ElfSymbol* find_symbol(const ElfSymbols& elf, std::string_view name, bool function) {
  for (const ElfSymbol& s : elf.symbols())
    if (s.name == name && s.function == function && s.value != 0) return &s;
  return nullptr;
}

// Py_Version (3.11+) is a const unsigned long holding PY_VERSION_HEX, e.g. 0x030b07f0.
std::optional<uint32_t> read_py_version(const ElfSymbols& elf) {
  const ElfSymbol* sym = find_symbol(elf, "Py_Version", false);
  if (!sym) return std::nullopt;
  auto offset = elf.file_offset_of(sym->value);
  if (!offset) return std::nullopt;
  FileDescriptor fd(open(elf.path().c_str(), O_RDONLY | O_CLOEXEC));
  uint32_t hex = 0;
  if (fd.get() < 0 || pread(fd.get(), &hex, sizeof(hex), off_t(*offset)) != sizeof(hex))
    return std::nullopt;
  if ((hex >> 24) != 3) return std::nullopt;  // not what it should be: trust the name instead
  return hex;
}

// 3.13: the offsets the build publishes override the built-in ones, and frames are checked to
// hold code objects (f_executable may be None), which takes PyCode_Type's address.
void use_published_offsets(const ElfSymbols& elf, CPythonBuild& b) {
  const ElfSymbol* code_type = find_symbol(elf, "PyCode_Type", false);
  if (!code_type) {
    b.layout.reset();  // every frame would have to be trusted to hold code: not on 3.13
    return;
  }
  b.layout->code_type_from_runtime = int64_t(code_type->value) - int64_t(b.runtime_vaddr);
  auto offset = elf.file_offset_of(b.runtime_vaddr);
  auto published = offset ? read_cpython_debug_offsets(b.path, *offset, b.minor) : std::nullopt;
  if (!published) {
    b.layout_notes.push_back(fmt::format(
        "layer python: {} publishes no readable _Py_DebugOffsets; using eacgm's own CPython "
        "3.{} offsets, written for 3.{}.0",
        b.path, b.minor, b.minor));
    return;
  }
  if (published->free_threaded) {
    b.free_threaded = true;
    b.layout.reset();
    return;
  }
  b.layout_source = "_Py_DebugOffsets";
  uint32_t eval_frame = b.layout->interp_eval_frame;
  apply_cpython_debug_offsets(*published, *b.layout);  // where they differ, the build is right
  // the hook's offset is not published: where the interpreter state differs from 3.13.0's,
  // the code that sets the hook says where it is (3.13.5 keeps it where 3.13.0 did)
  if (!b.layout->interp_eval_frame) {
    auto from_code = eval_frame_offset_from_code(elf);
    if (from_code) {
      b.layout->interp_eval_frame = *from_code;
      if (*from_code != eval_frame)
        b.layout_notes.push_back(fmt::format(
            "layer python: {}'s eval-frame hook is at offset {} (3.{}.0: {}), read from "
            "_PyInterpreterState_SetEvalFrameFunc's code",
            b.path, *from_code, b.minor, eval_frame));
    }
  }
  if (!b.layout->interp_eval_frame)
    b.layout_notes.push_back(fmt::format(
        "layer python: {}'s interpreter state differs from CPython 3.{}.0's, so eacgm does not "
        "know where its eval-frame hook is: calls between Python functions are not seen "
        "(stacks and calls made from C are)",
        b.path, b.minor));
}

}  // namespace

std::string CPythonBuild::version() const {
  return micro || version_source == "Py_Version" ? fmt::format("{}.{}.{}", major, minor, micro)
                                                 : fmt::format("{}.{}", major, minor);
}

std::string CPythonBuild::unsupported_message() const {
  if (free_threaded)
    return fmt::format("layer python: {} is a free-threaded CPython {} build, which eacgm cannot "
                       "read; its Python calls and stacks are not traced (run the job with the "
                       "default, GIL build)",
                       path, version());
  return fmt::format("layer python: {} is CPython {}, which eacgm cannot read (supported: {}); "
                     "its Python calls and stacks are not traced (run the job with a supported "
                     "interpreter)",
                     path, version(), supported_cpython_versions());
}

int cpython_minor_from_name(const std::string& path) {
  static const std::regex name(R"(^(lib)?python3\.(\d+)[a-z]*(\.so.*|-.*)?$)");
  std::smatch m;
  std::string base = std::filesystem::path(path).filename().string();
  if (!std::regex_match(base, m, name)) return -1;
  return std::stoi(m[2].str());
}

bool looks_like_cpython(const std::string& path) { return cpython_minor_from_name(path) >= 0; }

std::optional<CPythonBuild> inspect_cpython(const std::string& path) {
  std::optional<ElfSymbols> elf;
  try {
    elf.emplace(ElfSymbols::load(path));
  } catch (const Error&) {
    return std::nullopt;
  }
  const ElfSymbol* runtime = find_symbol(*elf, "_PyRuntime", false);
  const ElfSymbol* eval = elf->find_function("_PyEval_EvalFrameDefault");
  if (!runtime || !eval) return std::nullopt;
  CPythonBuild b;
  b.path = path;
  b.runtime_vaddr = runtime->value;
  b.eval_vaddr = eval->value;
  auto offset = elf->file_offset_of(eval->value);
  if (!offset) return std::nullopt;
  b.eval_file_offset = *offset;
  if (auto hex = read_py_version(*elf)) {
    b.major = int(*hex >> 24);
    b.minor = int((*hex >> 16) & 0xff);
    b.micro = int((*hex >> 8) & 0xff);
    b.version_source = "Py_Version";
  } else if (int minor = cpython_minor_from_name(path); minor >= 0) {
    // 3.10 and older have no Py_Version: the file name (python3.10, libpython3.10.so.1.0)
    b.major = 3;
    b.minor = minor;
    b.version_source = "file name";
  } else {
    return std::nullopt;  // a CPython we cannot date: better untraced than misread
  }
  if (b.major == 3) b.layout = cpython_layout(b.minor);
  if (!b.layout) return b;
  b.layout_source = "built-in";
  b.layout->runtime_from_eval = int64_t(b.runtime_vaddr) - int64_t(b.eval_vaddr);
  if (b.minor >= 13) use_published_offsets(*elf, b);
  return b;
}

}  // namespace eacgm
