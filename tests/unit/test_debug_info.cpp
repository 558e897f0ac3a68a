// Names for code in stripped files: the detached debug file (by build ID under a debug folder,
// or by .gnu_debuglink beside the file) and, without one, the function an address lies in from
// .eh_frame_hdr. The truth is the unstripped fixture library's .symtab.
#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "probe/debug_info.h"
#include "probe/elf_symbols.h"
#include "probe/proc_maps.h"
#include "probe/symbolizer.h"
#include "util/error.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

const std::string kDir = EACGM_FIXTURE_DIR;
const std::string kLibrary = kDir + "/libelf_fixture.so";
const std::string kStripped = kDir + "/libelf_fixture_stripped.so";
const std::string kLinked = kDir + "/libelf_fixture_linked.so";
const std::string kExecutable = kDir + "/elf_fixture_exe";

TEST(DebugRefs, BuildIdAndDebuglinkAsTheFilesSayThem) {
  ElfDebugRefs full = read_debug_refs(kLibrary), stripped = read_debug_refs(kStripped),
               linked = read_debug_refs(kLinked);
  // Debian's toolchain links with --build-id; strip keeps the note
  ASSERT_EQ(full.build_id.size(), 40u) << "a 20-byte SHA-1 build ID";
  EXPECT_EQ(stripped.build_id, full.build_id);
  EXPECT_EQ(linked.build_id, full.build_id);
  EXPECT_EQ(stripped.debuglink, "");
  EXPECT_EQ(linked.debuglink, "libelf_fixture_linked.debug");
  EXPECT_NE(read_debug_refs(kExecutable).build_id, full.build_id);
  // not an ELF file, no file: nothing
  EXPECT_EQ(read_debug_refs(kDir + "/CMakeFiles").build_id, "");
  EXPECT_EQ(read_debug_refs(kDir + "/no-such-file").build_id, "");

  auto c = debug_file_candidates("/opt/lib/libx.so", {"abcdef", "libx.debug"}, {"/d1", "/d2"});
  EXPECT_EQ(c,
            (std::vector<std::string>{"/d1/.build-id/ab/cdef.debug", "/d2/.build-id/ab/cdef.debug",
                                      "/opt/lib/libx.debug", "/opt/lib/.debug/libx.debug",
                                      "/d1/opt/lib/libx.debug", "/d2/opt/lib/libx.debug"}));
  // a debuglink naming the file itself is not a candidate beside it
  EXPECT_EQ(debug_file_candidates("/l/libx.so", {"", "libx.so"}, {}),
            (std::vector<std::string>{"/l/.debug/libx.so"}));
}

TEST(FunctionStarts, EveryAddressOfAFunctionGivesItsStart) {
  ElfSymbols truth = ElfSymbols::load(kLibrary);
  FunctionStarts starts = FunctionStarts::load(kStripped);
  ASSERT_GT(starts.size(), 3u);
  for (const char* name : {"fixture_local_static", "fixture_global", "fixture_weak"}) {
    const ElfSymbol* f = truth.find_function(name);
    ASSERT_NE(f, nullptr) << name;
    ASSERT_GT(f->size, 1u) << name;
    EXPECT_EQ(starts.start_at(f->value), f->value) << name;
    EXPECT_EQ(starts.start_at(f->value + f->size / 2), f->value) << name;
    EXPECT_EQ(starts.start_at(f->value + f->size - 1), f->value) << name;
  }
  // data is in no function (the last function's length was read from its FDE)
  const ElfSymbol* data = nullptr;
  for (const auto& s : truth.symbols())
    if (s.name == "fixture_data") data = &s;
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(starts.start_at(data->value), std::nullopt);
  EXPECT_EQ(starts.start_at(0), std::nullopt);
  // no file, not an ELF file: an empty table
  EXPECT_EQ(FunctionStarts::load(kDir + "/no-such-file").size(), 0u);
  EXPECT_EQ(FunctionStarts::load(kDir + "/CMakeFiles").size(), 0u);
}

// A library loaded into this process, and the address of one of its functions there.
struct Loaded {
  void* handle = nullptr;
  uint64_t base = 0;  // load address minus the file's virtual addresses
  explicit Loaded(const std::string& path) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return;
    void* global = dlsym(handle, "fixture_global");
    ElfSymbols symbols = ElfSymbols::load(kLibrary);
    const ElfSymbol* f = symbols.find_function("fixture_global");
    if (global && f) base = reinterpret_cast<uint64_t>(global) - f->value;
  }
  ~Loaded() {
    if (handle) dlclose(handle);
  }
};

class StrippedFrames : public ::testing::Test {
 protected:
  void SetUp() override {
    local_ = ElfSymbols::load(kLibrary).find_function("fixture_local_static")->value;
    tmp_ = fs::temp_directory_path() / fmt::format("eacgm_debug_{}", getpid());
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }
  Symbolizer::Frame frame(Symbolizer& s, const Loaded& lib, uint64_t vaddr) {
    uint32_t pid = uint32_t(getpid());
    s.update_maps(pid, *read_proc_maps(int(pid)));
    return s.frame_at(pid, lib.base + vaddr);
  }
  // Where the stripped fixture's debug file goes under tmp_ (its folder made).
  fs::path build_id_path(const std::string& id) {
    EXPECT_EQ(id.size(), 40u);
    fs::path at = tmp_ / ".build-id" / id.substr(0, 2) / (id.substr(2) + ".debug");
    fs::create_directories(at.parent_path());
    return at;
  }
  uint64_t local_ = 0;
  fs::path tmp_;
};

TEST_F(StrippedFrames, WithoutADebugFileTheFunctionIsNamedByItsStart) {
  Loaded lib(kStripped);
  ASSERT_NE(lib.base, 0u) << dlerror();
  Symbolizer s({tmp_.string()});  // nothing there
  auto f = frame(s, lib, local_ + 1);
  EXPECT_EQ(f.function, fmt::format("fn@{:#x}", local_));
  EXPECT_EQ(f.module, "libelf_fixture_stripped.so");
  EXPECT_EQ(frame(s, lib, local_).function, f.function);  // the same function, one entry
  // exported functions keep their .dynsym names
  EXPECT_EQ(
      frame(s, lib, ElfSymbols::load(kLibrary).find_function("fixture_global")->value + 1).function,
      "fixture_global");
}

TEST_F(StrippedFrames, TheDebugFileOfThisBuildNamesStaticFunctions) {
  Loaded lib(kStripped);
  ASSERT_NE(lib.base, 0u) << dlerror();
  const std::string id = read_debug_refs(kStripped).build_id;
  const fs::path at = build_id_path(id);
  // another build's debug file at that path is not trusted: here, this one with another ID
  {
    std::ifstream in(kDir + "/.debug/libelf_fixture_linked.debug", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string raw;
    for (size_t i = 0; i < id.size(); i += 2) raw += char(std::stoi(id.substr(i, 2), nullptr, 16));
    size_t where = bytes.find(raw);
    ASSERT_NE(where, std::string::npos);
    bytes[where] = char(bytes[where] ^ 1);
    std::ofstream(at, std::ios::binary) << bytes;
    ASSERT_NE(read_debug_refs(at.string()).build_id, id);
    ASSERT_TRUE(ElfSymbols::load(at.string()).find_function("fixture_local_static"));
  }
  {
    Symbolizer s({tmp_.string()});
    EXPECT_EQ(frame(s, lib, local_ + 1).function, fmt::format("fn@{:#x}", local_));
  }
  fs::remove(at);
  fs::copy_file(kDir + "/.debug/libelf_fixture_linked.debug", at);
  Symbolizer s({tmp_.string()});
  EXPECT_EQ(frame(s, lib, local_ + 1).function, "fixture_local_static");
}

// A FIFO where the debug file would be (a container's /usr/lib/debug is the container's to
// fill) is not opened for good: no hang, the function named by its start.
TEST_F(StrippedFrames, AFifoWhereTheDebugFileWouldBeIsNotWaitedOn) {
  Loaded lib(kStripped);
  ASSERT_NE(lib.base, 0u) << dlerror();
  const std::string id = read_debug_refs(kStripped).build_id;
  const fs::path at = build_id_path(id);
  ASSERT_EQ(mkfifo(at.c_str(), 0600), 0);
  EXPECT_EQ(read_debug_refs(at.string()).build_id, "");
  EXPECT_EQ(FunctionStarts::load(at.string()).size(), 0u);
  EXPECT_THROW(ElfSymbols::load(at.string()), Error);
  Symbolizer s({tmp_.string()});
  EXPECT_EQ(frame(s, lib, local_ + 1).function, fmt::format("fn@{:#x}", local_));
}

TEST_F(StrippedFrames, ADebuglinkBesideTheFileIsFollowed) {
  Loaded lib(kLinked);
  ASSERT_NE(lib.base, 0u) << dlerror();
  Symbolizer s({tmp_.string()});
  auto f = frame(s, lib, local_ + 1);
  EXPECT_EQ(f.function, "fixture_local_static");
  EXPECT_EQ(f.module, "libelf_fixture_linked.so");
}

}  // namespace
}  // namespace eacgm
