// Names for code in stripped files, for profiles: the detached debug file a distribution ships
// (Debian's *-dbg packages: /usr/lib/debug/.build-id/ab/cdef....debug, or the file named by
// .gnu_debuglink), and, without one, the function an address lies in from the unwind table
// every x86-64 binary keeps (.eh_frame_hdr), so that the samples of one unnamed function count
// together instead of one entry per instruction.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace eacgm {

// What an ELF file says about its detached debug file: its GNU build ID (lower-case hex, empty
// if none) and its .gnu_debuglink file name (empty if none). Empty when the file cannot be read.
struct ElfDebugRefs {
  std::string build_id;
  std::string debuglink;
};
ElfDebugRefs read_debug_refs(const std::string& path);

// Where a debug file for `path` may be, in the order gdb looks: DIR/.build-id/ab/cdef.debug for
// each DIR, then the debuglink beside the file, in its .debug/ folder, and under each DIR
// with the file's own folder. A candidate is that file only if its build ID matches.
std::vector<std::string> debug_file_candidates(const std::string& path, const ElfDebugRefs& refs,
                                               const std::vector<std::string>& debug_dirs);

// The functions' start addresses (and lengths, where the FDE gives them in the usual 4-byte
// encoding) from .eh_frame_hdr's search table. Hand-written: libdw reads CFI but is not a
// dependency here, and this table is a sorted array of 4-byte offsets (about 40 lines).
class FunctionStarts {
 public:
  // An empty table when the file has no .eh_frame_hdr, or one in an encoding not read here.
  static FunctionStarts load(const std::string& path);
  // The start (a virtual address in the file) of the function holding `vaddr`.
  std::optional<uint64_t> start_at(uint64_t vaddr) const;
  size_t size() const { return starts_.size(); }

 private:
  // (start, length; 0 where unknown, then the next start bounds it), by start
  std::vector<std::pair<uint64_t, uint64_t>> starts_;
};

}  // namespace eacgm
