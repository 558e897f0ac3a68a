// /proc/PID/maps text: any bytes parse to a list of mappings without crashing, every mapping
// kept is well-formed (start not after end), and lookups in it stay in bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "probe/proc_maps.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto maps = eacgm::parse_proc_maps(text);
  for (const auto& m : maps) {
    if (m.start > m.end) std::abort();
    const eacgm::Mapping* found = eacgm::find_mapping(maps, m.start);
    if (found && (m.start < found->start || m.start >= found->end)) std::abort();
  }
  return 0;
}
