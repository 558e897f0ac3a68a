// Detached debug files and .eh_frame_hdr function starts (see debug_info.h), read with libelf.
#include "probe/debug_info.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>

#include "util/file_descriptor.h"

namespace eacgm {
namespace {

struct ElfCloser {
  void operator()(Elf* elf) const { elf_end(elf); }
};
using ElfHandle = std::unique_ptr<Elf, ElfCloser>;

// The file, opened so that a FIFO or device put where a debug file is looked for (a traced
// container's /usr/lib/debug is the container's to fill) cannot block eacgm; -1 if it cannot be.
int open_file(const std::string& path) {
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
}

// A readable ELF file (a regular one), or null: what these readers cannot use, they leave out.
ElfHandle open_elf(const FileDescriptor& fd) {
  struct stat st;
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      elf_version(EV_CURRENT) == EV_NONE)
    return nullptr;
  ElfHandle elf(elf_begin(fd.get(), ELF_C_READ_MMAP, nullptr));
  if (!elf || elf_kind(elf.get()) != ELF_K_ELF) return nullptr;
  return elf;
}

struct Section {
  uint64_t addr = 0;
  const uint8_t* bytes = nullptr;
  size_t size = 0;
};

// A section with contents in the file (not SHT_NOBITS), by name.
Section section_named(Elf* elf, std::string_view want) {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return {};
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS) continue;
    const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
    if (!name || want != name) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data || !data->d_buf) return {};
    return {sh.sh_addr, static_cast<const uint8_t*>(data->d_buf), data->d_size};
  }
  return {};
}

template <typename T>
T read_at(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));  // little endian, as x86-64 is
  return v;
}

// DWARF exception-header pointer encodings (LSB 4.1, "DWARF Extensions"): the few that
// linkers write into .eh_frame_hdr.
constexpr uint8_t kPeOmit = 0xff, kPeUdata4 = 0x03, kPeSdata4 = 0x0b, kPeDatarelSdata4 = 0x3b;

// The size of a pointer in one of those encodings (the low nibble): 0 for none (omitted),
// size_t(-1) for an encoding not read here.
size_t encoded_size(uint8_t enc) {
  if (enc == kPeOmit) return 0;
  switch (enc & 0x0f) {
    case 0x00:
    case 0x04:
    case 0x0c:
      return 8;  // absptr, udata8, sdata8
    case 0x03:
    case 0x0b:
      return 4;  // udata4, sdata4
    default:
      return size_t(-1);
  }
}

}  // namespace

ElfDebugRefs read_debug_refs(const std::string& path) {
  ElfDebugRefs refs;
  FileDescriptor fd(open_file(path));
  ElfHandle elf = open_elf(fd);
  if (!elf) return refs;
  for (Elf_Scn* scn = elf_nextscn(elf.get(), nullptr); scn; scn = elf_nextscn(elf.get(), scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data) continue;
    GElf_Nhdr note;
    size_t offset = 0, name_at = 0, desc_at = 0;
    while ((offset = gelf_getnote(data, offset, &note, &name_at, &desc_at)) > 0) {
      const char* bytes = static_cast<const char*>(data->d_buf);
      if (note.n_type != NT_GNU_BUILD_ID || note.n_namesz != 4 ||
          std::memcmp(bytes + name_at, "GNU", 4) != 0)
        continue;
      static const char* const hex = "0123456789abcdef";
      for (size_t i = 0; i < note.n_descsz; ++i) {
        uint8_t b = uint8_t(bytes[desc_at + i]);
        refs.build_id += hex[b >> 4];
        refs.build_id += hex[b & 15];
      }
    }
  }
  Section link = section_named(elf.get(), ".gnu_debuglink");
  if (link.bytes) {
    const char* name = reinterpret_cast<const char*>(link.bytes);
    std::string_view file(name, ::strnlen(name, link.size));
    // a file name only: a link that climbs out of the debug folders is not followed
    if (file.size() < link.size && file.find('/') == std::string_view::npos && file != "." &&
        file != "..")
      refs.debuglink = file;
  }
  return refs;
}

std::vector<std::string> debug_file_candidates(const std::string& path, const ElfDebugRefs& refs,
                                               const std::vector<std::string>& debug_dirs) {
  std::vector<std::string> out;
  if (refs.build_id.size() > 2)
    for (const auto& dir : debug_dirs)
      out.push_back(dir + "/.build-id/" + refs.build_id.substr(0, 2) + "/" +
                    refs.build_id.substr(2) + ".debug");
  if (!refs.debuglink.empty()) {
    size_t slash = path.rfind('/');
    std::string folder = slash == std::string::npos ? "." : path.substr(0, slash);
    if (folder + "/" + refs.debuglink != path) out.push_back(folder + "/" + refs.debuglink);
    out.push_back(folder + "/.debug/" + refs.debuglink);
    for (const auto& dir : debug_dirs) out.push_back(dir + folder + "/" + refs.debuglink);
  }
  return out;
}

FunctionStarts FunctionStarts::load(const std::string& path) {
  FunctionStarts out;
  FileDescriptor fd(open_file(path));
  ElfHandle elf = open_elf(fd);
  if (!elf) return out;
  Section hdr = section_named(elf.get(), ".eh_frame_hdr");
  if (!hdr.bytes || hdr.size < 4 || hdr.bytes[0] != 1) return out;
  const uint8_t frame_enc = hdr.bytes[1], count_enc = hdr.bytes[2], table_enc = hdr.bytes[3];
  size_t skip = encoded_size(frame_enc);
  if (skip == size_t(-1) || (count_enc != kPeUdata4 && count_enc != kPeSdata4) ||
      table_enc != kPeDatarelSdata4 || hdr.size < 4 + skip + 4)
    return out;
  const uint64_t count = read_at<uint32_t>(hdr.bytes + 4 + skip);
  const size_t table = 4 + skip + 4;
  if (count > (hdr.size - table) / 8) return out;
  // An FDE is: length (4; 0xffffffff: 64-bit, not read here), CIE pointer (4), the start
  // (pc-relative, 4 bytes in the encoding every compiler here uses) and the length. The start
  // read back equal to the table's confirms that encoding; else the next start bounds it.
  Section frames = section_named(elf.get(), ".eh_frame");
  out.starts_.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* e = hdr.bytes + table + 8 * i;
    const uint64_t start = hdr.addr + int64_t(read_at<int32_t>(e));
    const uint64_t fde = hdr.addr + int64_t(read_at<int32_t>(e + 4));
    uint64_t length = 0;
    if (frames.bytes && fde >= frames.addr && fde - frames.addr + 16 <= frames.size) {
      const uint8_t* f = frames.bytes + (fde - frames.addr);
      if (read_at<uint32_t>(f) != 0xffffffff && fde + 8 + int64_t(read_at<int32_t>(f + 8)) == start)
        length = read_at<uint32_t>(f + 12);
    }
    out.starts_.emplace_back(start, length);
  }
  if (!std::is_sorted(out.starts_.begin(), out.starts_.end()))
    std::sort(out.starts_.begin(), out.starts_.end());
  return out;
}

std::optional<uint64_t> FunctionStarts::start_at(uint64_t vaddr) const {
  auto it = std::upper_bound(starts_.begin(), starts_.end(), vaddr,
                             [](uint64_t a, const auto& s) { return a < s.first; });
  if (it == starts_.begin()) return std::nullopt;
  --it;
  if (it->second && vaddr - it->first >= it->second) return std::nullopt;
  return it->first;
}

}  // namespace eacgm
