// Reads an ELF file's symbols (.dynsym and .symtab) with libelf: find a function's file offset
// for a uprobe, and name the function that holds an address (kernel host stubs).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eacgm {

struct ElfSymbol {
  std::string name;     // without version: "cudaMalloc"
  std::string version;  // "libcudart.so.13" for cudaMalloc@@libcudart.so.13, empty if none
  bool default_version = false;  // @@ (the one the linker binds to) rather than @
  uint64_t value = 0;   // st_value: virtual address in the file's own address space
  uint64_t size = 0;
  bool weak = false;
  bool global = false;  // STB_GLOBAL (or weak); false for STB_LOCAL
  bool function = false;  // STT_FUNC or STT_GNU_IFUNC
  bool from_dynsym = false;
};

struct ElfAddressMatch {
  const ElfSymbol* symbol = nullptr;
  uint64_t offset = 0;  // address - symbol->value
};

class ElfSymbols {
 public:
  // Opens and reads `path`. Throws eacgm::Error naming the file if it cannot be opened or is
  // not an ELF file. A stripped file (no .symtab) is fine: .dynsym alone is used.
  static ElfSymbols load(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<ElfSymbol>& symbols() const { return symbols_; }
  bool has_symtab() const { return has_symtab_; }

  // A defined function symbol by its unversioned name. With several candidates, prefers the
  // default version (@@), then a global over a weak binding, then .dynsym over .symtab.
  const ElfSymbol* find_function(std::string_view name) const;

  // The defined function symbol whose [value, value+size) contains `vaddr` (a symbol of size 0
  // matches only its exact address). nullopt when none does.
  std::optional<ElfAddressMatch> symbol_at(uint64_t vaddr) const;

  // Uprobe offsets: the file offset of a virtual address (through the PT_LOAD segment that
  // holds it) and back. nullopt when no segment holds it.
  std::optional<uint64_t> file_offset_of(uint64_t vaddr) const;
  std::optional<uint64_t> vaddr_of_file_offset(uint64_t file_offset) const;

  // Whether `vaddr` lies in a PLT section (.plt, .plt.sec, .plt.got): calls to other libraries.
  bool in_plt(uint64_t vaddr) const;

 private:
  struct Segment {
    uint64_t vaddr, memsz, offset, filesz;
  };
  std::string path_;
  std::vector<ElfSymbol> symbols_;
  std::vector<size_t> by_address_;  // indices of function symbols sorted by value
  std::vector<Segment> segments_;   // PT_LOAD segments
  std::vector<std::pair<uint64_t, uint64_t>> plt_;  // [start, end) of the PLT sections
  bool has_symtab_ = false;
};

}  // namespace eacgm
