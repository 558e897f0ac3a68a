// Names the function at an address in a traced process (e.g. a kernel's host stub) through the
// ELF file of the mapping that holds it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "probe/debug_info.h"
#include "probe/elf_symbols.h"
#include "probe/proc_maps.h"
#include "util/interner.h"

namespace eacgm {

class Symbolizer {
 public:
  // Detached debug files are looked for under `debug_dirs` (see debug_file_candidates).
  explicit Symbolizer(std::vector<std::string> debug_dirs = {"/usr/lib/debug"})
      : debug_dirs_(std::move(debug_dirs)) {}

  // The demangled name of the function containing `addr` in process `pid`; "unknown+0x<off>"
  // (offset in the file, or the raw address) when it cannot be named. The view is interned.
  std::string_view function_name(uint32_t pid, uint64_t addr);

  // A profile's frame at `addr` in process `pid`: the function (no offset into it) and the
  // file's name, as interned views. A stripped file's function is named from its detached
  // debug file when there is one, else "fn@0x<start address in the file>" (what addr2line -f
  // -e FILE and objdump take) from its unwind table; "unknown+0x<offset in the file>" where
  // neither knows the address.
  struct Frame {
    std::string_view function;
    std::string_view module;
  };
  Frame frame_at(uint32_t pid, uint64_t addr);

  // Remembers a fresh copy of the process's maps (call when it maps new code).
  void update_maps(uint32_t pid, std::vector<Mapping> maps);
  // Drops what is known about a process (it exited).
  void forget(uint32_t pid);

 private:
  // A file's symbols, and what is read only when they cannot name an address: its detached
  // debug file's symbols and its unwind table's function starts.
  struct ElfFile {
    std::unique_ptr<ElfSymbols> symbols;
    bool looked_further = false;
    std::unique_ptr<ElfSymbols> debug;
    FunctionStarts starts;
  };
  ElfFile* elf_for(uint32_t pid, const Mapping& m);
  void look_further(uint32_t pid, const Mapping& m, ElfFile& elf);
  std::string_view resolve(uint32_t pid, uint64_t addr);
  Frame resolve_frame(uint32_t pid, uint64_t addr);
  const Mapping* mapping_of(uint32_t pid, uint64_t addr, bool rate_limited);

  struct AddrKey {
    uint32_t pid;
    uint64_t addr;
    bool operator==(const AddrKey&) const = default;
  };
  struct AddrHash {
    size_t operator()(const AddrKey& k) const { return k.addr * 31 + k.pid; }
  };
  std::unordered_map<AddrKey, std::string_view, AddrHash> cache_;
  std::unordered_map<AddrKey, Frame, AddrHash> frames_;
  std::unordered_map<uint32_t, std::vector<Mapping>> maps_;
  // When a miss may next read a process's maps again (rate-limited misses), and how long after
  // that: doubled, up to a minute, while rereads find no mapping for the address either.
  struct Reread {
    uint64_t next_ns = 0;
    uint64_t backoff_ns = 1'000'000'000;
  };
  std::unordered_map<uint32_t, Reread> reread_;
  // by "dev:inode"; a null entry records a file that could not be read
  std::unordered_map<std::string, ElfFile> elves_;
  std::vector<std::string> debug_dirs_;
  Interner names_;
};

}  // namespace eacgm
