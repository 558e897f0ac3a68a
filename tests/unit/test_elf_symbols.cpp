// Tests for ElfSymbols on the fixture ELF files, checked against readelf's view of the same files
// and against where the dynamic loader actually puts the fixture library's functions.
#include "probe/elf_symbols.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "util/error.h"

namespace eacgm {
namespace {

const std::string kLibrary = std::string(EACGM_FIXTURE_DIR) + "/libelf_fixture.so";
const std::string kStripped = std::string(EACGM_FIXTURE_DIR) + "/libelf_fixture_stripped.so";
const std::string kExecutable = std::string(EACGM_FIXTURE_DIR) + "/elf_fixture_exe";
const std::string kCudart = "/usr/local/cuda/lib64/libcudart.so.13";

std::string run_command(const std::string& command) {
  struct Closer {
    void operator()(FILE* f) const { ::pclose(f); }
  };
  std::unique_ptr<FILE, Closer> pipe(::popen((command + " 2>/dev/null").c_str(), "r"));
  if (!pipe) return {};
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), pipe.get())) out.append(buf, n);
  return out;
}

// One row of `readelf -sW`: the independent truth the loader is compared with.
struct ReadelfSymbol {
  std::string table;  // ".dynsym" or ".symtab"
  uint64_t value = 0, size = 0;
  std::string type, bind, ndx;
  std::string name, version;  // split from "name@@version" / "name@version"
  bool default_version = false;
};

void split_version(const std::string& full, ReadelfSymbol& s) {
  const size_t at = full.find('@');
  s.name = full.substr(0, at);
  if (at == std::string::npos) return;
  s.default_version = full.compare(at, 2, "@@") == 0;
  s.version = full.substr(at + (s.default_version ? 2 : 1));
}

std::vector<ReadelfSymbol> readelf_symbols(const std::string& path) {
  std::vector<ReadelfSymbol> rows;
  std::istringstream lines(run_command("readelf -sW " + path));
  std::string line, table;
  while (std::getline(lines, line)) {
    if (const size_t q = line.find("Symbol table '"); q != std::string::npos) {
      table = line.substr(q + 14, line.find('\'', q + 14) - (q + 14));
      continue;
    }
    std::istringstream fields(line);
    std::string num, value, size, vis, full;
    ReadelfSymbol s;
    if (!(fields >> num >> value >> size >> s.type >> s.bind >> vis >> s.ndx)) continue;
    if (num.size() < 2 || num.back() != ':' || !std::isdigit(static_cast<unsigned char>(num[0]))) {
      continue;  // the column header ("Num:") or another table's text
    }
    fields >> full;
    s.table = table;
    s.value = std::stoull(value, nullptr, 16);
    s.size = std::stoull(size, nullptr, 0);  // readelf switches to 0x... for large sizes
    split_version(full, s);
    rows.push_back(s);
  }
  return rows;
}

// The symbols ElfSymbols promises to keep: defined functions and data objects.
bool kept_by_loader(const ReadelfSymbol& s) {
  if (s.ndx == "UND" || s.name.empty()) return false;
  if (s.type == "OBJECT") return !(s.ndx == "ABS" && s.size == 0);  // version markers
  return s.type == "FUNC" || s.type == "IFUNC";
}

const ReadelfSymbol* readelf_find(const std::vector<ReadelfSymbol>& rows, std::string_view table,
                                  std::string_view name, std::string_view version) {
  for (const auto& r : rows) {
    if (r.table == table && r.name == name && r.version == version) return &r;
  }
  return nullptr;
}

const ElfSymbol* find_symbol(const ElfSymbols& elf, std::string_view name,
                             std::string_view version, uint64_t value) {
  for (const auto& s : elf.symbols()) {
    if (s.name == name && s.version == version && s.value == value) return &s;
  }
  return nullptr;
}

size_t count_named(const ElfSymbols& elf, std::string_view name) {
  size_t n = 0;
  for (const auto& s : elf.symbols()) n += s.name == name;
  return n;
}

class FixtureLibrary : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    elf_ = std::make_unique<ElfSymbols>(ElfSymbols::load(kLibrary));
    readelf_ = readelf_symbols(kLibrary);
  }
  static void TearDownTestSuite() { elf_.reset(); }
  static std::unique_ptr<ElfSymbols> elf_;
  static std::vector<ReadelfSymbol> readelf_;
};
std::unique_ptr<ElfSymbols> FixtureLibrary::elf_;
std::vector<ReadelfSymbol> FixtureLibrary::readelf_;

TEST_F(FixtureLibrary, EveryDynsymRowIsLoadedWithItsAttributes) {
  ASSERT_FALSE(readelf_.empty()) << "readelf (binutils) is needed to compute the truth";
  EXPECT_TRUE(elf_->has_symtab());
  size_t expected = 0;
  for (const auto& r : readelf_) {
    if (r.table != ".dynsym" || !kept_by_loader(r)) continue;
    ++expected;
    const ElfSymbol* s = find_symbol(*elf_, r.name, r.version, r.value);
    ASSERT_NE(s, nullptr) << r.name << "@" << r.version;
    EXPECT_TRUE(s->from_dynsym) << r.name;
    EXPECT_EQ(s->size, r.size) << r.name;
    EXPECT_EQ(s->default_version, r.default_version) << r.name;
    EXPECT_EQ(s->weak, r.bind == "WEAK") << r.name;
    EXPECT_EQ(s->global, r.bind != "LOCAL") << r.name;
    EXPECT_EQ(s->function, r.type != "OBJECT") << r.name;
  }
  size_t loaded = 0;
  for (const auto& s : elf_->symbols()) loaded += s.from_dynsym;
  EXPECT_EQ(loaded, expected);
  EXPECT_GE(expected, 6u);  // the fixture exports at least six symbols
}

TEST_F(FixtureLibrary, EverySymtabRowIsLoadedOnce) {
  ASSERT_FALSE(readelf_.empty());
  for (const auto& r : readelf_) {
    if (r.table != ".symtab" || !kept_by_loader(r)) continue;
    const ElfSymbol* s = find_symbol(*elf_, r.name, r.version, r.value);
    // Unversioned .symtab copies of versioned exports merge into the .dynsym entry.
    if (!s && r.version.empty()) {
      const ReadelfSymbol* dyn = nullptr;
      for (const auto& d : readelf_) {
        if (d.table == ".dynsym" && d.name == r.name && d.value == r.value) dyn = &d;
      }
      ASSERT_NE(dyn, nullptr) << r.name;
      s = find_symbol(*elf_, dyn->name, dyn->version, dyn->value);
    }
    ASSERT_NE(s, nullptr) << r.name << "@" << r.version;
    EXPECT_EQ(s->size, r.size) << r.name;
  }
  EXPECT_EQ(count_named(*elf_, "fixture_global"), 1u) << "the .symtab copy must be merged";
  EXPECT_EQ(count_named(*elf_, "versioned_fn"), 2u) << "one entry per version";
}

TEST_F(FixtureLibrary, VersionedFunctionPrefersDefaultVersion) {
  const ElfSymbol* s = elf_->find_function("versioned_fn");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->version, "VER_2");
  EXPECT_TRUE(s->default_version);
  EXPECT_TRUE(s->from_dynsym);
  const ReadelfSymbol* v2 = readelf_find(readelf_, ".dynsym", "versioned_fn", "VER_2");
  ASSERT_NE(v2, nullptr);
  EXPECT_TRUE(v2->default_version);
  EXPECT_EQ(s->value, v2->value);

  const ReadelfSymbol* v1 = readelf_find(readelf_, ".dynsym", "versioned_fn", "VER_1");
  ASSERT_NE(v1, nullptr);
  EXPECT_NE(v1->value, v2->value);
  const ElfSymbol* old = find_symbol(*elf_, "versioned_fn", "VER_1", v1->value);
  ASSERT_NE(old, nullptr);
  EXPECT_FALSE(old->default_version);
  EXPECT_TRUE(old->function);
}

TEST_F(FixtureLibrary, WeakGlobalAndCppFunctions) {
  const ElfSymbol* weak = elf_->find_function("fixture_weak");
  ASSERT_NE(weak, nullptr);
  EXPECT_TRUE(weak->weak);
  EXPECT_TRUE(weak->global);

  const ElfSymbol* global = elf_->find_function("fixture_global");
  ASSERT_NE(global, nullptr);
  EXPECT_FALSE(global->weak);
  EXPECT_TRUE(global->global);
  EXPECT_EQ(global->version, "VER_1");
  EXPECT_TRUE(global->default_version);
  EXPECT_TRUE(global->from_dynsym);

  // nm prints the mangled name the same way it is stored.
  const std::string nm = run_command("nm -D --defined-only " + kLibrary);
  ASSERT_NE(nm.find(" T _ZN7fixture5scaleEid"), std::string::npos) << nm;
  const ElfSymbol* cpp = elf_->find_function("_ZN7fixture5scaleEid");
  ASSERT_NE(cpp, nullptr);
  EXPECT_TRUE(cpp->global);
  EXPECT_GT(cpp->size, 0u);
}

TEST_F(FixtureLibrary, LocalStaticComesFromSymtab) {
  const ElfSymbol* local = elf_->find_function("fixture_local_static");
  ASSERT_NE(local, nullptr);
  EXPECT_FALSE(local->global);
  EXPECT_FALSE(local->from_dynsym);
  EXPECT_TRUE(local->version.empty());
  const ReadelfSymbol* r = readelf_find(readelf_, ".symtab", "fixture_local_static", "");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->bind, "LOCAL");
  EXPECT_EQ(local->value, r->value);
}

TEST_F(FixtureLibrary, DataObjectIsNotAFunction) {
  const ElfSymbol* data = nullptr;
  for (const auto& s : elf_->symbols()) {
    if (s.name == "fixture_data") data = &s;
  }
  ASSERT_NE(data, nullptr);
  EXPECT_FALSE(data->function);
  EXPECT_EQ(data->size, 64 * sizeof(int));
  EXPECT_EQ(elf_->find_function("fixture_data"), nullptr);
  EXPECT_FALSE(elf_->symbol_at(data->value).has_value());
  EXPECT_FALSE(elf_->symbol_at(data->value + 8).has_value());
  EXPECT_EQ(elf_->find_function("no_such_function"), nullptr);
}

TEST_F(FixtureLibrary, SymbolAtInsideAndOutsideFunctions) {
  const ElfSymbol* global = elf_->find_function("fixture_global");
  ASSERT_NE(global, nullptr);
  ASSERT_GT(global->size, 8u);
  auto inside = elf_->symbol_at(global->value + 5);
  ASSERT_TRUE(inside.has_value());
  EXPECT_EQ(inside->symbol, global);
  EXPECT_EQ(inside->offset, 5u);

  auto first = elf_->symbol_at(global->value);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->symbol, global);
  EXPECT_EQ(first->offset, 0u);

  auto last = elf_->symbol_at(global->value + global->size - 1);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->symbol, global);
  EXPECT_EQ(last->offset, global->size - 1);

  auto past = elf_->symbol_at(global->value + global->size);
  if (past) {
    EXPECT_NE(past->symbol, global);
  }

  EXPECT_FALSE(elf_->symbol_at(0).has_value());
  EXPECT_FALSE(elf_->symbol_at(UINT64_MAX).has_value());
}

TEST_F(FixtureLibrary, SymbolAtPrefersGlobalAlias) {
  // versioned_fn@VER_1 and the local versioned_fn_v1 are one function at one address.
  const ReadelfSymbol* v1 = readelf_find(readelf_, ".dynsym", "versioned_fn", "VER_1");
  const ReadelfSymbol* impl = readelf_find(readelf_, ".symtab", "versioned_fn_v1", "");
  ASSERT_NE(v1, nullptr);
  ASSERT_NE(impl, nullptr);
  ASSERT_EQ(v1->value, impl->value);
  auto match = elf_->symbol_at(v1->value + 1);
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->symbol->name, "versioned_fn");
  EXPECT_EQ(match->symbol->version, "VER_1");
  EXPECT_EQ(match->offset, 1u);
}

TEST_F(FixtureLibrary, SizeZeroSymbolMatchesOnlyItsAddress) {
  const ReadelfSymbol* frame_dummy = readelf_find(readelf_, ".symtab", "frame_dummy", "");
  if (!frame_dummy || frame_dummy->size != 0) {
    GTEST_SKIP() << "this toolchain's crtstuff has no size-0 frame_dummy to test with";
  }
  auto exact = elf_->symbol_at(frame_dummy->value);
  ASSERT_TRUE(exact.has_value());
  EXPECT_EQ(exact->symbol->size, 0u);
  EXPECT_EQ(exact->offset, 0u);
  auto after = elf_->symbol_at(frame_dummy->value + 1);
  if (after) {
    EXPECT_NE(after->symbol->value, frame_dummy->value);
  }
}

// The loader's placement of the library is the truth for addresses and file offsets.
TEST_F(FixtureLibrary, FileOffsetsMatchTheLoadedLibrary) {
  struct Unloader {
    void operator()(void* h) const { ::dlclose(h); }
  };
  std::unique_ptr<void, Unloader> handle(::dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL));
  ASSERT_TRUE(handle) << ::dlerror();
  link_map* map = nullptr;
  ASSERT_EQ(::dlinfo(handle.get(), RTLD_DI_LINKMAP, &map), 0);
  const uint64_t bias = map->l_addr;

  const ReadelfSymbol* v1_row = readelf_find(readelf_, ".dynsym", "versioned_fn", "VER_1");
  ASSERT_NE(v1_row, nullptr);
  const ElfSymbol* v1 = find_symbol(*elf_, "versioned_fn", "VER_1", v1_row->value);
  const ElfSymbol* v2 = elf_->find_function("versioned_fn");
  ASSERT_NE(v1, nullptr);
  ASSERT_NE(v2, nullptr);
  EXPECT_EQ(reinterpret_cast<uint64_t>(::dlvsym(handle.get(), "versioned_fn", "VER_1")),
            bias + v1->value);
  EXPECT_EQ(reinterpret_cast<uint64_t>(::dlvsym(handle.get(), "versioned_fn", "VER_2")),
            bias + v2->value);

  const ElfSymbol* global = elf_->find_function("fixture_global");
  ASSERT_NE(global, nullptr);
  const auto* in_memory = reinterpret_cast<const char*>(::dlsym(handle.get(), "fixture_global"));
  ASSERT_EQ(reinterpret_cast<uint64_t>(in_memory), bias + global->value);

  // Position-independent code is mapped unchanged: the bytes at the file offset are the code.
  const auto offset = elf_->file_offset_of(global->value);
  ASSERT_TRUE(offset.has_value());
  std::ifstream file(kLibrary, std::ios::binary);
  file.seekg(static_cast<std::streamoff>(*offset));
  std::string on_disk(global->size, '\0');
  ASSERT_TRUE(file.read(on_disk.data(), static_cast<std::streamsize>(on_disk.size())));
  EXPECT_EQ(std::memcmp(on_disk.data(), in_memory, on_disk.size()), 0);

  EXPECT_EQ(elf_->vaddr_of_file_offset(*offset), global->value);
}

TEST(ElfSymbolsStripped, OnlyDynsymRemains) {
  const ElfSymbols full = ElfSymbols::load(kLibrary);
  const ElfSymbols stripped = ElfSymbols::load(kStripped);
  EXPECT_EQ(stripped.path(), kStripped);
  EXPECT_FALSE(stripped.has_symtab());
  for (const auto& s : stripped.symbols()) EXPECT_TRUE(s.from_dynsym) << s.name;

  const ElfSymbol* global = stripped.find_function("fixture_global");
  ASSERT_NE(global, nullptr);
  EXPECT_EQ(global->value, full.find_function("fixture_global")->value);
  const ElfSymbol* versioned = stripped.find_function("versioned_fn");
  ASSERT_NE(versioned, nullptr);
  EXPECT_EQ(versioned->version, "VER_2");
  EXPECT_TRUE(versioned->default_version);

  EXPECT_EQ(stripped.find_function("fixture_local_static"), nullptr);
  EXPECT_EQ(stripped.find_function("versioned_fn_v1"), nullptr);
  ASSERT_NE(full.find_function("fixture_local_static"), nullptr);
  EXPECT_FALSE(stripped.symbol_at(full.find_function("fixture_local_static")->value + 1));
}

// `readelf -lW` LOAD rows: offset, virtual address, file size.
struct LoadSegment {
  uint64_t offset, vaddr, filesz;
};

std::vector<LoadSegment> readelf_load_segments(const std::string& path) {
  std::vector<LoadSegment> segments;
  std::istringstream lines(run_command("readelf -lW " + path));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string type, offset, vaddr, paddr, filesz;
    if (!(fields >> type >> offset >> vaddr >> paddr >> filesz) || type != "LOAD") continue;
    segments.push_back({std::stoull(offset, nullptr, 16), std::stoull(vaddr, nullptr, 16),
                        std::stoull(filesz, nullptr, 16)});
  }
  return segments;
}

TEST(ElfSymbolsExecutable, FileOffsetFromProgramHeaders) {
  const ElfSymbols exe = ElfSymbols::load(kExecutable);
  const ElfSymbol* work = exe.find_function("fixture_exe_work");
  ASSERT_NE(work, nullptr);

  const std::string nm = run_command("nm " + kExecutable);
  const size_t pos = nm.find(" T fixture_exe_work\n");
  ASSERT_NE(pos, std::string::npos) << nm;
  const size_t line_start = nm.rfind('\n', pos) + 1;  // npos + 1 == 0 on the first line
  EXPECT_EQ(work->value, std::stoull(nm.substr(line_start, pos - line_start), nullptr, 16));

  const auto segments = readelf_load_segments(kExecutable);
  ASSERT_FALSE(segments.empty());
  std::optional<uint64_t> expected;
  for (const auto& seg : segments) {
    if (work->value >= seg.vaddr && work->value < seg.vaddr + seg.filesz) {
      expected = work->value - seg.vaddr + seg.offset;
    }
  }
  ASSERT_TRUE(expected.has_value());
  EXPECT_NE(*expected, work->value) << "a non-PIE layout should separate vaddr and offset";
  EXPECT_EQ(exe.file_offset_of(work->value), expected);
  EXPECT_EQ(exe.vaddr_of_file_offset(*expected), work->value);

  auto main_fn = exe.symbol_at(exe.find_function("main")->value + 1);
  ASSERT_TRUE(main_fn.has_value());
  EXPECT_EQ(main_fn->symbol->name, "main");

  EXPECT_FALSE(exe.file_offset_of(0x10).has_value());  // below the first segment
  EXPECT_FALSE(exe.vaddr_of_file_offset(UINT64_MAX / 2).has_value());
}

void expect_load_error(const std::string& path, std::string_view problem) {
  try {
    ElfSymbols::load(path);
    ADD_FAILURE() << "expected eacgm::Error for " << path;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(problem), std::string::npos) << message;
  }
}

TEST(ElfSymbolsErrors, MissingFile) {
  expect_load_error("/nonexistent/dir/libfoo.so", "No such file or directory");
}

TEST(ElfSymbolsErrors, NotAnElfFile) {
  const std::string path = ::testing::TempDir() + "eacgm_not_elf_" +
                           std::to_string(::getpid()) + ".so";
  std::ofstream(path) << "this is a text file, not a shared library\n";
  expect_load_error(path, "not an ELF file");
  std::filesystem::remove(path);
}

TEST(ElfSymbolsErrors, EmptyFile) {
  const std::string path = ::testing::TempDir() + "eacgm_empty_" +
                           std::to_string(::getpid()) + ".so";
  std::ofstream{path};
  expect_load_error(path, "cannot read ELF symbols");
  std::filesystem::remove(path);
}

TEST(ElfSymbolsErrors, Directory) { expect_load_error(EACGM_FIXTURE_DIR, "not a regular file"); }

TEST(ElfSymbolsCudart, CudaMallocHasDefaultVersion) {
  if (!std::filesystem::exists(kCudart)) {
    GTEST_SKIP() << kCudart << " is absent (no CUDA 13 toolkit installed here)";
  }
  const auto start = std::chrono::steady_clock::now();
  const ElfSymbols cudart = ElfSymbols::load(kCudart);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(1));

  const ElfSymbol* malloc_fn = cudart.find_function("cudaMalloc");
  ASSERT_NE(malloc_fn, nullptr);
  EXPECT_EQ(malloc_fn->version, "libcudart.so.13");
  EXPECT_TRUE(malloc_fn->default_version);
  EXPECT_TRUE(malloc_fn->global);
  EXPECT_TRUE(malloc_fn->from_dynsym);

  const auto rows = readelf_symbols(kCudart);
  const ReadelfSymbol* truth = readelf_find(rows, ".dynsym", "cudaMalloc", "libcudart.so.13");
  ASSERT_NE(truth, nullptr);
  EXPECT_EQ(malloc_fn->value, truth->value);
  EXPECT_EQ(malloc_fn->size, truth->size);

  auto inside = cudart.symbol_at(malloc_fn->value + 4);
  ASSERT_TRUE(inside.has_value());
  EXPECT_EQ(inside->symbol->value, malloc_fn->value);
  EXPECT_EQ(inside->offset, 4u);
  EXPECT_TRUE(cudart.file_offset_of(malloc_fn->value).has_value());
}

}  // namespace
}  // namespace eacgm
