// Parses /proc/PID/maps: which file backs which address range of a process.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eacgm {

struct Mapping {
  uint64_t start = 0;  // first address
  uint64_t end = 0;    // one past the last address
  bool readable = false, writable = false, executable = false, shared = false;
  uint64_t file_offset = 0;  // offset in the file of `start`
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;  // 0 for anonymous mappings
  std::string path;    // empty for anonymous; "[heap]", "[stack]", ... for special ones;
                       // a deleted file keeps its " (deleted)" suffix stripped and `deleted` set
  bool deleted = false;

  bool file_backed() const { return inode != 0 && !path.empty() && path[0] == '/'; }
};

// Parses the text of a maps file. Malformed lines are skipped (the kernel does not produce them).
std::vector<Mapping> parse_proc_maps(std::string_view text);

// Reads and parses /proc/PID/maps. Returns std::nullopt when the process does not exist
// (or is gone by the time we read it); throws eacgm::Error on permission problems.
std::optional<std::vector<Mapping>> read_proc_maps(int pid);

// The mapping that contains `addr`, or nullptr. `maps` must be sorted by start (as the kernel
// lists them).
const Mapping* find_mapping(const std::vector<Mapping>& maps, uint64_t addr);

}  // namespace eacgm
