// Reads an ELF file's symbols (.dynsym and .symtab) with libelf for uprobe offsets and address lookup.
#include "probe/elf_symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <tuple>
#include <utility>

#include "util/error.h"
#include "util/file_descriptor.h"

namespace eacgm {
namespace {

// .gnu.version entries: the low 15 bits index a version; the top bit marks a non-default (@)
// version. Indices 0 (local) and 1 (global, the file's base) carry no version name.
constexpr uint16_t kVersymHidden = 0x8000;
constexpr uint16_t kVersymIndexMask = 0x7fff;
constexpr uint16_t kFirstNamedVersion = 2;

struct ElfCloser {
  void operator()(Elf* elf) const { elf_end(elf); }
};
using ElfHandle = std::unique_ptr<Elf, ElfCloser>;

[[noreturn]] void fail_elf(const std::string& path, std::string_view problem,
                           std::string_view fix) {
  fail("cannot read ELF symbols of {}: {} ({})", path, problem, fix);
}

[[noreturn]] void fail_libelf(const std::string& path) {
  const char* message = elf_errmsg(-1);
  fail_elf(path, message ? message : "libelf error", "the file may be truncated or corrupt");
}

void init_libelf() {
  // libelf refuses every call until the version handshake has happened once per process.
  static const bool ready = elf_version(EV_CURRENT) != EV_NONE;
  if (!ready) fail("cannot initialise libelf: library too old (install a current libelf)");
}

// The bytes of a string table section, with bounds-checked lookups. Cheaper than elf_strptr,
// which repeats its section lookup and checks for every one of hundreds of thousands of names.
class StringTable {
 public:
  StringTable(Elf* elf, size_t section_index) {
    Elf_Scn* scn = elf_getscn(elf, section_index);
    Elf_Data* data = scn ? elf_getdata(scn, nullptr) : nullptr;
    if (data && data->d_buf) {
      bytes_ = static_cast<const char*>(data->d_buf);
      size_ = data->d_size;
    }
  }
  std::string_view at(size_t offset) const {
    if (offset >= size_) return {};
    return {bytes_ + offset, ::strnlen(bytes_ + offset, size_ - offset)};
  }

 private:
  const char* bytes_ = nullptr;
  size_t size_ = 0;
};

struct SymbolSections {
  Elf_Scn* dynsym = nullptr;
  Elf_Scn* symtab = nullptr;
  Elf_Scn* versym = nullptr;
  Elf_Scn* verdef = nullptr;
  Elf_Scn* verneed = nullptr;
};

SymbolSections find_symbol_sections(Elf* elf) {
  SymbolSections found;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (!gelf_getshdr(scn, &shdr)) continue;
    switch (shdr.sh_type) {
      case SHT_DYNSYM: found.dynsym = scn; break;
      case SHT_SYMTAB: found.symtab = scn; break;
      case SHT_GNU_versym: found.versym = scn; break;
      case SHT_GNU_verdef: found.verdef = scn; break;
      case SHT_GNU_verneed: found.verneed = scn; break;
      default: break;
    }
  }
  return found;
}

// Version names by .gnu.version index; empty where an index has no name. The names are views
// into the mapped string table, valid while the Elf handle is open.
class VersionNames {
 public:
  void set(size_t index, std::string_view name) {
    if (index >= names_.size()) names_.resize(index + 1);
    names_[index] = name;
  }
  std::string_view get(size_t index) const {
    return index < names_.size() ? names_[index] : std::string_view();
  }

 private:
  std::vector<std::string_view> names_;
};

void read_version_definitions(Elf* elf, Elf_Scn* scn, VersionNames& names) {
  GElf_Shdr shdr;
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (!data || !gelf_getshdr(scn, &shdr)) return;
  const StringTable strings(elf, shdr.sh_link);
  size_t offset = 0;
  // sh_info counts the entries; it also bounds the walk if a vd_next link is corrupt.
  for (size_t i = 0; i < shdr.sh_info; ++i) {
    GElf_Verdef def;
    if (!gelf_getverdef(data, static_cast<int>(offset), &def)) break;
    GElf_Verdaux aux;
    // The base definition names the file itself (its soname), not a version symbols carry.
    if (!(def.vd_flags & VER_FLG_BASE) &&
        gelf_getverdaux(data, static_cast<int>(offset + def.vd_aux), &aux)) {
      names.set(def.vd_ndx & kVersymIndexMask, strings.at(aux.vda_name));
    }
    if (def.vd_next == 0) break;
    offset += def.vd_next;
  }
}

// Needed versions label undefined symbols only, which we drop; reading them keeps the version
// table complete, so an index never resolves to a wrong name.
void read_version_needs(Elf* elf, Elf_Scn* scn, VersionNames& names) {
  GElf_Shdr shdr;
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (!data || !gelf_getshdr(scn, &shdr)) return;
  const StringTable strings(elf, shdr.sh_link);
  size_t offset = 0;
  for (size_t i = 0; i < shdr.sh_info; ++i) {
    GElf_Verneed need;
    if (!gelf_getverneed(data, static_cast<int>(offset), &need)) break;
    size_t aux_offset = offset + need.vn_aux;
    for (size_t j = 0; j < need.vn_cnt; ++j) {
      GElf_Vernaux aux;
      if (!gelf_getvernaux(data, static_cast<int>(aux_offset), &aux)) break;
      names.set(aux.vna_other & kVersymIndexMask, strings.at(aux.vna_name));
      if (aux.vna_next == 0) break;
      aux_offset += aux.vna_next;
    }
    if (need.vn_next == 0) break;
    offset += need.vn_next;
  }
}

bool is_function_type(unsigned type) { return type == STT_FUNC || type == STT_GNU_IFUNC; }

bool keep_symbol(const GElf_Sym& sym) {
  if (sym.st_shndx == SHN_UNDEF) return false;
  const unsigned type = GELF_ST_TYPE(sym.st_info);
  if (is_function_type(type)) return true;
  // Absolute size-0 objects are the linker's version markers ("VER_1"), not data.
  return type == STT_OBJECT && !(sym.st_shndx == SHN_ABS && sym.st_size == 0);
}

// A symbol as read from its table, before merging the tables. The names are views into
// libelf's mapping of the string tables: reading allocates nothing per symbol, and only the
// symbols that survive the merge get their own strings.
struct RawSymbol {
  std::string_view name;
  std::string_view version;
  uint64_t value = 0;
  uint64_t size = 0;
  size_t name_hash = 0;
  unsigned binding = STB_LOCAL;
  bool function = false;
  bool dynamic = false;
  bool default_version = false;
};

size_t name_hash(std::string_view name) { return std::hash<std::string_view>{}(name); }

// Some .symtab entries spell the version in the name: "foo@@VER_2" (default) or "foo@VER_1".
void split_versioned_name(std::string_view full, RawSymbol& out) {
  const size_t at = full.find('@');
  if (at == std::string_view::npos || at == 0) {
    out.name = full;
    return;
  }
  out.name = full.substr(0, at);
  out.default_version = full.substr(at).starts_with("@@");
  out.version = full.substr(at + (out.default_version ? 2 : 1));
}

void apply_versym(Elf_Data* versym, size_t index, const VersionNames& versions, RawSymbol& out) {
  GElf_Versym entry;
  if (!versym || !gelf_getversym(versym, static_cast<int>(index), &entry)) return;
  const uint16_t version_index = entry & kVersymIndexMask;
  if (version_index < kFirstNamedVersion) return;
  out.version = versions.get(version_index);
  out.default_version = !out.version.empty() && !(entry & kVersymHidden);
}

RawSymbol make_raw_symbol(const GElf_Sym& sym, bool dynamic) {
  RawSymbol s;
  s.value = sym.st_value;
  s.size = sym.st_size;
  s.binding = GELF_ST_BIND(sym.st_info);
  s.function = is_function_type(GELF_ST_TYPE(sym.st_info));
  s.dynamic = dynamic;
  return s;
}

// Appends the kept symbols of one table. `versym` applies only to .dynsym (entry i labels
// symbol i); .symtab names carry their version themselves when they have one.
void read_symbol_table(const std::string& path, Elf* elf, Elf_Scn* scn, bool dynamic,
                       Elf_Data* versym, const VersionNames& versions,
                       std::vector<RawSymbol>& out) {
  GElf_Shdr shdr;
  if (!gelf_getshdr(scn, &shdr)) fail_libelf(path);
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (!data) fail_libelf(path);
  const StringTable names(elf, shdr.sh_link);
  const size_t count = shdr.sh_entsize ? shdr.sh_size / shdr.sh_entsize : 0;
  out.reserve(out.size() + count);
  for (size_t i = 1; i < count; ++i) {  // entry 0 is the reserved null symbol
    GElf_Sym sym;
    if (!gelf_getsym(data, static_cast<int>(i), &sym)) break;
    if (!keep_symbol(sym)) continue;
    const std::string_view full_name = names.at(sym.st_name);
    if (full_name.empty()) continue;
    RawSymbol& s = out.emplace_back(make_raw_symbol(sym, dynamic));
    if (dynamic) {
      s.name = full_name;
      apply_versym(versym, i, versions, s);
    } else {
      split_versioned_name(full_name, s);
    }
    s.name_hash = name_hash(s.name);
  }
}

// The merged symbols are ordered by name hash: find_function binary-searches that, and the
// copies of one symbol in .dynsym and .symtab end up adjacent. Ordering by the names
// themselves costs far more: big C++ libraries have half a million long mangled names that
// share long prefixes. Within one hash, by value with .dynsym first; the rest only makes the
// order deterministic.
bool merge_order(const RawSymbol& a, const RawSymbol& b) {
  if (a.name_hash != b.name_hash) return a.name_hash < b.name_hash;
  if (a.value != b.value) return a.value < b.value;
  if (a.dynamic != b.dynamic) return a.dynamic;
  return std::tie(a.name, a.version, a.size, a.binding, a.function) <
         std::tie(b.name, b.version, b.size, b.binding, b.function);
}

// Whether a .symtab entry repeats a .dynsym one: same name and value, and no version that the
// .dynsym copy lacks. [first, last) holds the entries before it with its hash and value,
// .dynsym ones first.
bool repeats_dynsym(const RawSymbol& s, const RawSymbol* first, const RawSymbol* last) {
  for (; first != last && first->dynamic; ++first) {
    if (first->name == s.name && (s.version.empty() || s.version == first->version)) return true;
  }
  return false;
}

ElfSymbol to_symbol(const RawSymbol& raw) {
  ElfSymbol s;
  s.name.assign(raw.name);
  s.version.assign(raw.version);
  s.default_version = raw.default_version;
  s.value = raw.value;
  s.size = raw.size;
  s.weak = raw.binding == STB_WEAK;
  s.global = raw.binding == STB_GLOBAL || raw.binding == STB_WEAK ||
             raw.binding == STB_GNU_UNIQUE;
  s.function = raw.function;
  s.from_dynsym = raw.dynamic;
  return s;
}

// One list from both tables, a symbol present in both kept once with its .dynsym attributes.
std::vector<ElfSymbol> merge_tables(std::vector<RawSymbol>& raw) {
  std::sort(raw.begin(), raw.end(), merge_order);
  std::vector<ElfSymbol> symbols;
  symbols.reserve(raw.size());
  size_t group = 0;  // first entry with the current hash and value
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i].name_hash != raw[group].name_hash || raw[i].value != raw[group].value) group = i;
    if (!raw[i].dynamic && repeats_dynsym(raw[i], &raw[group], &raw[i])) continue;
    symbols.push_back(to_symbol(raw[i]));
  }
  return symbols;
}

int binding_rank(const ElfSymbol& s) { return s.global ? (s.weak ? 1 : 2) : 0; }

// Which of several aliases at one address symbol_at reports: the one callers link against.
// Globals before weak before local symbols, then .dynsym before .symtab, then the default
// version, then a sized symbol before a size-0 label, then the shorter name (a public name is
// usually shorter than its internal aliases), then alphabetical order to stay deterministic.
bool preferred_alias(const ElfSymbol& a, const ElfSymbol& b) {
  const auto key = [](const ElfSymbol& s) {
    return std::make_tuple(-binding_rank(s), !s.from_dynsym, !s.default_version, s.size == 0,
                           s.name.size());
  };
  const auto ka = key(a), kb = key(b);
  if (ka != kb) return ka < kb;
  return a.name < b.name;
}

std::vector<size_t> function_address_index(const std::vector<ElfSymbol>& symbols) {
  // Sorting (value, index) pairs keeps the common comparison local; only aliases at one
  // address need the symbols themselves.
  std::vector<std::pair<uint64_t, size_t>> keys;
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i].function) keys.emplace_back(symbols[i].value, i);
  }
  std::sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return preferred_alias(symbols[a.second], symbols[b.second]);
  });
  std::vector<size_t> index;
  index.reserve(keys.size());
  for (const auto& key : keys) index.push_back(key.second);
  return index;
}

bool contains(const ElfSymbol& s, uint64_t vaddr) {
  if (vaddr < s.value) return false;
  return s.size == 0 ? vaddr == s.value : vaddr - s.value < s.size;
}

// find_function's order among candidates of one name (see the header); lower address last so
// that the choice never depends on table order.
bool better_candidate(const ElfSymbol& a, const ElfSymbol& b) {
  const auto key = [](const ElfSymbol& s) {
    return std::make_tuple(s.default_version, binding_rank(s), s.from_dynsym);
  };
  const auto ka = key(a), kb = key(b);
  if (ka != kb) return ka > kb;
  return a.value < b.value;
}

ElfHandle open_elf(const std::string& path, const FileDescriptor& fd) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    fail_elf(path, errno_text(errno), "check that the file is readable");
  }
  if (!S_ISREG(st.st_mode)) {
    fail_elf(path, "not a regular file", "pass the path of a shared library or executable");
  }
  ElfHandle elf(elf_begin(fd.get(), ELF_C_READ_MMAP, nullptr));
  if (!elf) fail_libelf(path);
  if (elf_kind(elf.get()) != ELF_K_ELF) {
    fail_elf(path, "not an ELF file", "pass the path of a shared library or executable");
  }
  GElf_Ehdr ehdr;
  if (!gelf_getehdr(elf.get(), &ehdr)) fail_libelf(path);
  return elf;
}

// The PT_LOAD program headers: the file ranges the loader maps, and where.
std::vector<GElf_Phdr> load_segments(const std::string& path, Elf* elf) {
  size_t count = 0;
  if (elf_getphdrnum(elf, &count) != 0) fail_libelf(path);
  std::vector<GElf_Phdr> segments;
  for (size_t i = 0; i < count; ++i) {
    GElf_Phdr phdr;
    if (!gelf_getphdr(elf, static_cast<int>(i), &phdr)) fail_libelf(path);
    if (phdr.p_type == PT_LOAD) segments.push_back(phdr);
  }
  return segments;
}

}  // namespace

ElfSymbols ElfSymbols::load(const std::string& path) {
  init_libelf();
  // O_NONBLOCK: a FIFO at the path (a debug file's, looked for in a container) must not block
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) {
    fail_elf(path, errno_text(errno), "check the path and that eacgm may read the file");
  }
  ElfHandle elf = open_elf(path, fd);

  ElfSymbols result;
  result.path_ = path;

  for (const GElf_Phdr& phdr : load_segments(path, elf.get())) {
    result.segments_.push_back({phdr.p_vaddr, phdr.p_memsz, phdr.p_offset, phdr.p_filesz});
  }

  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf.get(), &shstrndx) == 0) {
    for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf.get(), scn)) != nullptr;) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh)) continue;
      const char* name = elf_strptr(elf.get(), shstrndx, sh.sh_name);
      if (name && std::string_view(name).starts_with(".plt"))
        result.plt_.emplace_back(sh.sh_addr, sh.sh_addr + sh.sh_size);
    }
  }

  const SymbolSections sections = find_symbol_sections(elf.get());
  VersionNames versions;
  if (sections.verdef) read_version_definitions(elf.get(), sections.verdef, versions);
  if (sections.verneed) read_version_needs(elf.get(), sections.verneed, versions);
  Elf_Data* versym = sections.versym ? elf_getdata(sections.versym, nullptr) : nullptr;

  // The raw symbols point into the mapped file: merge them before `elf` is closed.
  std::vector<RawSymbol> raw;
  if (sections.dynsym) {
    read_symbol_table(path, elf.get(), sections.dynsym, true, versym, versions, raw);
  }
  if (sections.symtab) {
    result.has_symtab_ = true;
    read_symbol_table(path, elf.get(), sections.symtab, false, nullptr, versions, raw);
  }
  result.symbols_ = merge_tables(raw);
  result.by_address_ = function_address_index(result.symbols_);
  return result;
}

bool ElfSymbols::in_plt(uint64_t vaddr) const {
  for (auto [start, end] : plt_)
    if (vaddr >= start && vaddr < end) return true;
  return false;
}

const ElfSymbol* ElfSymbols::find_function(std::string_view name) const {
  // symbols_ is in name hash order (see merge_order); one hash may, rarely, cover other names.
  const size_t hash = name_hash(name);
  auto it = std::lower_bound(symbols_.begin(), symbols_.end(), hash,
                             [](const ElfSymbol& s, size_t h) { return name_hash(s.name) < h; });
  const ElfSymbol* best = nullptr;
  for (; it != symbols_.end() && name_hash(it->name) == hash; ++it) {
    if (it->name != name || !it->function) continue;
    if (!best || better_candidate(*it, *best)) best = &*it;
  }
  return best;
}

std::optional<ElfAddressMatch> ElfSymbols::symbol_at(uint64_t vaddr) const {
  const auto value_of = [this](size_t i) { return symbols_[i].value; };
  auto group_end = std::upper_bound(by_address_.begin(), by_address_.end(), vaddr,
                                    [&](uint64_t a, size_t i) { return a < value_of(i); });
  // Walk back one group of same-address aliases at a time, each in preferred_alias order.
  while (group_end != by_address_.begin()) {
    const uint64_t start = value_of(*std::prev(group_end));
    auto group_begin = std::prev(group_end);
    while (group_begin != by_address_.begin() && value_of(*std::prev(group_begin)) == start) {
      --group_begin;
    }
    bool sized = false;
    for (auto it = group_begin; it != group_end; ++it) {
      const ElfSymbol& s = symbols_[*it];
      if (contains(s, vaddr)) return ElfAddressMatch{&s, vaddr - s.value};
      sized = sized || s.size > 0;
    }
    // Compilers do not nest functions, so nothing before a function that ended short of vaddr
    // can reach it; only size-0 labels (which match nothing but their own address) are skipped.
    if (sized) return std::nullopt;
    group_end = group_begin;
  }
  return std::nullopt;
}

// Bytes past p_filesz (.bss) exist only in memory, so they have no file offset.
std::optional<uint64_t> ElfSymbols::file_offset_of(uint64_t vaddr) const {
  for (const Segment& seg : segments_) {
    if (vaddr >= seg.vaddr && vaddr - seg.vaddr < seg.filesz) {
      return vaddr - seg.vaddr + seg.offset;
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> ElfSymbols::vaddr_of_file_offset(uint64_t file_offset) const {
  for (const Segment& seg : segments_) {
    if (file_offset >= seg.offset && file_offset - seg.offset < seg.filesz) {
      return file_offset - seg.offset + seg.vaddr;
    }
  }
  return std::nullopt;
}

}  // namespace eacgm
