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
  reread_.erase(pid);  // new code: a miss may read them again at once
}

void Symbolizer::forget(uint32_t pid) {
  maps_.erase(pid);
  reread_.erase(pid);
  std::erase_if(cache_, [pid](const auto& kv) { return kv.first.pid == pid; });
  std::erase_if(frames_, [pid](const auto& kv) { return kv.first.pid == pid; });
}

// The file as process `pid` sees it: through /proc/PID/root so that files of processes in other
// mount namespaces (containers) are found, else the plain path (the process may be gone).
template <typename Load>
auto load_for(uint32_t pid, const std::string& path, Load load) -> decltype(load(path)) {
  for (const std::string& p : {fmt::format("/proc/{}/root{}", pid, path), path}) {
    try {
      if (auto got = load(p)) return got;
    } catch (const Error&) {
    }
  }
  return nullptr;
}

Symbolizer::ElfFile* Symbolizer::elf_for(uint32_t pid, const Mapping& m) {
  std::string key = fmt::format("{}:{}:{}", m.dev_major, m.dev_minor, m.inode);
  auto [it, fresh] = elves_.try_emplace(key);
  if (fresh)
    it->second.symbols = load_for(pid, m.path, [](const std::string& p) {
      return std::make_unique<ElfSymbols>(ElfSymbols::load(p));
    });
  return it->second.symbols ? &it->second : nullptr;  // null: a file that could not be read
}

void Symbolizer::look_further(uint32_t pid, const Mapping& m, ElfFile& elf) {
  if (elf.looked_further) return;
  elf.looked_further = true;
  std::string root = fmt::format("/proc/{}/root", pid);
  ElfDebugRefs refs = read_debug_refs(root + m.path);
  if (refs.build_id.empty() && refs.debuglink.empty()) refs = read_debug_refs(m.path);
  if (!elf.symbols->has_symtab())
    for (const std::string& candidate : debug_file_candidates(m.path, refs, debug_dirs_)) {
      // only the debug file of this very build: another build's addresses would name wrongly
      auto debug = load_for(pid, candidate, [&](const std::string& p) {
        std::unique_ptr<ElfSymbols> out;
        ElfDebugRefs theirs = read_debug_refs(p);
        if (theirs.build_id == refs.build_id)
          out = std::make_unique<ElfSymbols>(ElfSymbols::load(p));
        return out;
      });
      if (debug) {
        elf.debug = std::move(debug);
        break;
      }
    }
  elf.starts = FunctionStarts::load(root + m.path);
  if (!elf.starts.size()) elf.starts = FunctionStarts::load(m.path);
}

const Mapping* Symbolizer::mapping_of(uint32_t pid, uint64_t addr, bool rate_limited) {
  auto maps_it = maps_.find(pid);
  const Mapping* m = maps_it != maps_.end() ? find_mapping(maps_it->second, addr) : nullptr;
  // Code mapped since we last looked: read the maps again; for a profile's frames at most once
  // a second per process (frame-pointer walks through code without frame pointers give
  // addresses that are in no mapping: reading a PyTorch process's thousands of mappings for
  // each cost the recorder 150 us per sample), and less often while rereads find nothing new
  // (a PyTorch process's 1,700 mappings read every second were ~0.4% of a core, session 50).
  // New libraries are mapped in at dlopen anyway (update_maps).
  if (m) return m;
  uint64_t now = monotonic_now_ns();
  Reread& r = reread_[pid];
  if (rate_limited && now < r.next_ns) return nullptr;
  if (auto fresh = read_proc_maps(static_cast<int>(pid)); fresh && !fresh->empty()) {
    maps_[pid] = std::move(*fresh);
    m = find_mapping(maps_[pid], addr);
  }
  if (rate_limited) {
    constexpr uint64_t kSecond = 1'000'000'000ull;
    r.next_ns = now + (m ? kSecond : r.backoff_ns);
    r.backoff_ns = m ? kSecond : std::min(2 * r.backoff_ns, 32 * kSecond);
  }
  return m;
}

Symbolizer::Frame Symbolizer::resolve_frame(uint32_t pid, uint64_t addr) {
  const Mapping* m = mapping_of(pid, addr, true);
  if (m && m->path.starts_with("[vdso]")) return {names_.intern("[vdso]"), names_.intern("[vdso]")};
  if (!m || !m->file_backed()) return {names_.intern(fmt::format("unknown+{:#x}", addr)), {}};
  std::string_view module = names_.intern(m->path.substr(m->path.rfind('/') + 1));
  uint64_t file_offset = addr - m->start + m->file_offset;
  if (ElfFile* elf = elf_for(pid, *m))
    if (auto vaddr = elf->symbols->vaddr_of_file_offset(file_offset)) {
      if (auto match = elf->symbols->symbol_at(*vaddr))
        return {names_.intern(demangle(match->symbol->name)), module};
      look_further(pid, *m, *elf);
      if (elf->debug)
        if (auto match = elf->debug->symbol_at(*vaddr))
          return {names_.intern(demangle(match->symbol->name)), module};
      if (auto start = elf->starts.start_at(*vaddr))
        return {names_.intern(fmt::format("fn@{:#x}", *start)), module};
    }
  return {names_.intern(fmt::format("unknown+{:#x}", file_offset)), module};
}

std::string_view Symbolizer::resolve(uint32_t pid, uint64_t addr) {
  const Mapping* m = mapping_of(pid, addr, false);
  if (!m || !m->file_backed()) return names_.intern(fmt::format("unknown+{:#x}", addr));
  uint64_t file_offset = addr - m->start + m->file_offset;
  if (ElfFile* elf = elf_for(pid, *m)) {
    if (auto vaddr = elf->symbols->vaddr_of_file_offset(file_offset)) {
      auto match = elf->symbols->symbol_at(*vaddr);
      if (!match) {
        look_further(pid, *m, *elf);
        if (elf->debug) match = elf->debug->symbol_at(*vaddr);
      }
      if (match) {
        std::string name = demangle(match->symbol->name);
        if (match->offset != 0) name += fmt::format("+{:#x}", match->offset);
        return names_.intern(name);
      }
    }
  }
  return names_.intern(fmt::format("unknown+{:#x}", file_offset));
}

}  // namespace eacgm
