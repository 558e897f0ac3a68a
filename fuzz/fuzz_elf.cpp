// ELF files of the libraries eacgm probes: truncated or hostile files are refused with
// eacgm::Error or read; every symbol and address lookup of what was read stays in bounds.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "probe/elf_symbols.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // ElfSymbols reads files (as the libraries are): one scratch file per process
  static std::string path = "/dev/shm/eacgm-fuzz-elf-" + std::to_string(getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    auto elf = eacgm::ElfSymbols::load(path);
    for (const auto& s : elf.symbols()) {
      elf.symbol_at(s.value);
      elf.file_offset_of(s.value);
      elf.in_plt(s.value);
    }
    elf.find_function("cudaLaunchKernel");
    elf.vaddr_of_file_offset(0x1000);
  } catch (const eacgm::Error&) {
  }
  return 0;
}
