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

#include "probe/elf_symbols.h"
#include "probe/proc_maps.h"
#include "util/interner.h"

namespace eacgm {

class Symbolizer {
 public:
  // The demangled name of the function containing `addr` in process `pid`; "unknown+0x<off>"
  // (offset in the file, or the raw address) when it cannot be named. The view is interned.
  std::string_view function_name(uint32_t pid, uint64_t addr);

  // A profile's frame at `addr` in process `pid`: the function (no offset into it; where it
  // cannot be named, "unknown+0x<offset in the file>") and the file's name. Interned views.
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
  const ElfSymbols* elf_for(uint32_t pid, const Mapping& m);
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
  std::unordered_map<uint32_t, uint64_t> reread_ns_;  // when a miss last read a process's maps
  // by "dev:inode"; a null entry records a file that could not be read
  std::unordered_map<std::string, std::unique_ptr<ElfSymbols>> elves_;
  Interner names_;
};

}  // namespace eacgm
