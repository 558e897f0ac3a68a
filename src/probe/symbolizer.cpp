// Address to function name through /proc/PID/maps, the backing ELF file and the demangler.
#include "probe/symbolizer.h"

#include <fmt/format.h>

#include "gpu/gpu_samples.h"  // monotonic_now_ns
#include "probe/demangle.h"
#include "util/error.h"

namespace eacgm {

std::string_view Symbolizer::function_name(uint32_t pid, uint64_t addr) {
  AddrKey key{pid, addr};
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  std::string_view name = resolve(pid, addr);
  cache_.emplace(key, name);
  return name;
}

Symbolizer::Frame Symbolizer::frame_at(uint32_t pid, uint64_t addr) {
  AddrKey key{pid, addr};
  if (auto it = frames_.find(key); it != frames_.end()) return it->second;
  Frame f = resolve_frame(pid, addr);
  if (!f.module.empty()) frames_.emplace(key, f);  // an address in no mapping may be mapped later
  return f;
}

void Symbolizer::update_maps(uint32_t pid, std::vector<Mapping> maps) {
  // An exited process that is not yet reaped has empty maps: keep what we knew of it.
  if (maps.empty()) return;
  maps_[pid] = std::move(maps);
}

void Symbolizer::forget(uint32_t pid) {
  maps_.erase(pid);
  reread_ns_.erase(pid);
  std::erase_if(cache_, [pid](const auto& kv) { return kv.first.pid == pid; });
  std::erase_if(frames_, [pid](const auto& kv) { return kv.first.pid == pid; });
}

const ElfSymbols* Symbolizer::elf_for(uint32_t pid, const Mapping& m) {
  std::string key = fmt::format("{}:{}:{}", m.dev_major, m.dev_minor, m.inode);
  auto it = elves_.find(key);
  if (it != elves_.end()) return it->second.get();
  std::unique_ptr<ElfSymbols> elf;
  // Through /proc/PID/root so that files of processes in other mount namespaces (containers)
  // are found; fall back to the plain path when the process is already gone.
  for (const std::string& path : {fmt::format("/proc/{}/root{}", pid, m.path), m.path}) {
    try {
      elf = std::make_unique<ElfSymbols>(ElfSymbols::load(path));
      break;
    } catch (const Error&) {
    }
  }
  return elves_.emplace(key, std::move(elf)).first->second.get();
}

const Mapping* Symbolizer::mapping_of(uint32_t pid, uint64_t addr, bool rate_limited) {
  auto maps_it = maps_.find(pid);
  const Mapping* m = maps_it != maps_.end() ? find_mapping(maps_it->second, addr) : nullptr;
  // Code mapped since we last looked: read the maps again; for a profile's frames at most once
  // a second per process (frame-pointer walks through code without frame pointers give
  // addresses that are in no mapping: reading a PyTorch process's thousands of mappings for
  // each cost the recorder 150 us per sample). New libraries are mapped in at dlopen anyway.
  uint64_t now = monotonic_now_ns();
  uint64_t& last = reread_ns_[pid];
  if (!m && (!rate_limited || now - last >= 1'000'000'000ull)) {
    last = now;
    if (auto fresh = read_proc_maps(static_cast<int>(pid)); fresh && !fresh->empty()) {
      maps_[pid] = std::move(*fresh);
      m = find_mapping(maps_[pid], addr);
    }
  }
  return m;
}

Symbolizer::Frame Symbolizer::resolve_frame(uint32_t pid, uint64_t addr) {
  const Mapping* m = mapping_of(pid, addr, true);
  if (m && m->path.starts_with("[vdso]")) return {names_.intern("[vdso]"), names_.intern("[vdso]")};
  if (!m || !m->file_backed()) return {names_.intern(fmt::format("unknown+{:#x}", addr)), {}};
  std::string_view module = names_.intern(m->path.substr(m->path.rfind('/') + 1));
  uint64_t file_offset = addr - m->start + m->file_offset;
  if (const ElfSymbols* elf = elf_for(pid, *m))
    if (auto vaddr = elf->vaddr_of_file_offset(file_offset))
      if (auto match = elf->symbol_at(*vaddr))
        return {names_.intern(demangle(match->symbol->name)), module};
  return {names_.intern(fmt::format("unknown+{:#x}", file_offset)), module};
}

std::string_view Symbolizer::resolve(uint32_t pid, uint64_t addr) {
  const Mapping* m = mapping_of(pid, addr, false);
  if (!m || !m->file_backed()) return names_.intern(fmt::format("unknown+{:#x}", addr));
  uint64_t file_offset = addr - m->start + m->file_offset;
  const ElfSymbols* elf = elf_for(pid, *m);
  if (elf) {
    if (auto vaddr = elf->vaddr_of_file_offset(file_offset)) {
      if (auto match = elf->symbol_at(*vaddr)) {
        std::string name = demangle(match->symbol->name);
        if (match->offset != 0) name += fmt::format("+{:#x}", match->offset);
        return names_.intern(name);
      }
    }
  }
  return names_.intern(fmt::format("unknown+{:#x}", file_offset));
}

}  // namespace eacgm
