// Tests for /proc/PID/maps parsing and lookup, on sample text and on this test process itself.
#include "probe/proc_maps.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "util/error.h"

namespace eacgm {
namespace {

// Layout and padding as the kernel prints them (the path column starts after a run of spaces).
constexpr std::string_view kSample =
    "55d0c6a00000-55d0c6a2c000 r--p 00000000 08:01 1234567                    "
    "/usr/bin/python3.11\n"
    "55d0c6a2c000-55d0c6b00000 r-xp 0002c000 08:01 1234567                    "
    "/usr/bin/python3.11\n"
    "55d0c7e00000-55d0c7f00000 rw-p 00000000 00:00 0                          [heap]\n"
    "7f1234000000-7f1234021000 rw-p 00000000 00:00 0 \n"
    "7f1235000000-7f1235100000 r-xp 00010000 fd:02 42                         "
    "/home/user/My Models/lib foo  bar.so\n"
    "7f1236000000-7f1236001000 r-xp 00000000 103:05 99                        "
    "/tmp/libgone.so (deleted)\n"
    "7f1237000000-7f1237001000 rw-s 00000000 00:05 77                         "
    "/SYSV00000000 (deleted)\n"
    "this line is not a mapping\n"
    "7ffd5a1e0000-7ffd5a201000 rw-p 00000000 00:00 0                          [stack]\n"
    "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]";

TEST(ParseProcMaps, FileBackedMapping) {
  const auto maps = parse_proc_maps(kSample);
  ASSERT_EQ(maps.size(), 9u);  // the malformed line is skipped
  const Mapping& text = maps[1];
  EXPECT_EQ(text.start, 0x55d0c6a2c000u);
  EXPECT_EQ(text.end, 0x55d0c6b00000u);
  EXPECT_TRUE(text.readable);
  EXPECT_FALSE(text.writable);
  EXPECT_TRUE(text.executable);
  EXPECT_FALSE(text.shared);
  EXPECT_EQ(text.file_offset, 0x2c000u);
  EXPECT_EQ(text.dev_major, 8u);
  EXPECT_EQ(text.dev_minor, 1u);
  EXPECT_EQ(text.inode, 1234567u);
  EXPECT_EQ(text.path, "/usr/bin/python3.11");
  EXPECT_FALSE(text.deleted);
  EXPECT_TRUE(text.file_backed());
}

TEST(ParseProcMaps, HeapAndAnonymous) {
  const auto maps = parse_proc_maps(kSample);
  ASSERT_EQ(maps.size(), 9u);
  EXPECT_EQ(maps[2].path, "[heap]");
  EXPECT_EQ(maps[2].inode, 0u);
  EXPECT_FALSE(maps[2].file_backed());

  const Mapping& anon = maps[3];
  EXPECT_EQ(anon.start, 0x7f1234000000u);
  EXPECT_TRUE(anon.path.empty());
  EXPECT_FALSE(anon.file_backed());
  EXPECT_TRUE(anon.readable && anon.writable && !anon.executable);

  EXPECT_EQ(maps[7].path, "[stack]");
  EXPECT_EQ(maps[8].path, "[vsyscall]");
  EXPECT_EQ(maps[8].start, 0xffffffffff600000u);
  EXPECT_FALSE(maps[8].readable);
  EXPECT_TRUE(maps[8].executable);
}

TEST(ParseProcMaps, PathWithSpacesKeepsThem) {
  const auto maps = parse_proc_maps(kSample);
  ASSERT_EQ(maps.size(), 9u);
  EXPECT_EQ(maps[4].path, "/home/user/My Models/lib foo  bar.so");
  EXPECT_EQ(maps[4].dev_major, 0xfdu);
  EXPECT_EQ(maps[4].dev_minor, 2u);
  EXPECT_EQ(maps[4].file_offset, 0x10000u);
  EXPECT_TRUE(maps[4].file_backed());
}

TEST(ParseProcMaps, DeletedSuffixIsStripped) {
  const auto maps = parse_proc_maps(kSample);
  ASSERT_EQ(maps.size(), 9u);
  EXPECT_EQ(maps[5].path, "/tmp/libgone.so");
  EXPECT_TRUE(maps[5].deleted);
  EXPECT_EQ(maps[5].dev_major, 0x103u);  // major numbers above 255 are printed in hex too
  EXPECT_EQ(maps[6].path, "/SYSV00000000");
  EXPECT_TRUE(maps[6].deleted);
  EXPECT_TRUE(maps[6].shared);
}

TEST(ParseProcMaps, EmptyAndTrailingNewline) {
  EXPECT_TRUE(parse_proc_maps("").empty());
  const auto maps = parse_proc_maps("1000-2000 r-xp 00000000 00:00 0\n\n");
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_TRUE(maps[0].path.empty());
}

TEST(FindMapping, HitsAndMisses) {
  const auto maps = parse_proc_maps(kSample);
  ASSERT_EQ(maps.size(), 9u);
  EXPECT_EQ(find_mapping(maps, 0x1000), nullptr);  // before the first
  EXPECT_EQ(find_mapping(maps, 0x55d0c6a00000), &maps[0]);
  EXPECT_EQ(find_mapping(maps, 0x55d0c6a2bfff), &maps[0]);
  EXPECT_EQ(find_mapping(maps, 0x55d0c6a2c000), &maps[1]);  // end is exclusive
  EXPECT_EQ(find_mapping(maps, 0x55d0c6b00000), nullptr);   // gap before [heap]
  EXPECT_EQ(find_mapping(maps, 0x7f1235012345), &maps[4]);
  EXPECT_EQ(find_mapping(maps, 0xffffffffff600fff), &maps[8]);
  EXPECT_EQ(find_mapping(maps, 0xffffffffff601000), nullptr);  // past the last
  EXPECT_EQ(find_mapping({}, 0x1000), nullptr);
}

__attribute__((noinline)) int function_in_test_binary() { return 42; }

TEST(ReadProcMaps, OwnProcessContainsTestBinary) {
  const auto maps = read_proc_maps(static_cast<int>(::getpid()));
  ASSERT_TRUE(maps.has_value());
  ASSERT_FALSE(maps->empty());
  const std::string exe = std::filesystem::canonical("/proc/self/exe").string();

  const auto code = reinterpret_cast<uintptr_t>(&function_in_test_binary);
  const Mapping* m = find_mapping(*maps, code);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->path, exe);
  EXPECT_TRUE(m->executable);
  EXPECT_TRUE(m->file_backed());
  EXPECT_FALSE(m->deleted);

  for (size_t i = 1; i < maps->size(); ++i) {
    EXPECT_LE((*maps)[i - 1].end, (*maps)[i].start) << "maps must be sorted and disjoint";
  }
}

TEST(ReadProcMaps, MissingProcessIsNullopt) {
  EXPECT_FALSE(read_proc_maps(INT_MAX).has_value());  // above any pid_max
}

TEST(ReadProcMaps, ExitedProcessIsNullopt) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_FALSE(read_proc_maps(static_cast<int>(child)).has_value());
}

// Checked in a child that drops to an unprivileged user (as root, every maps file is
// readable; as a user, pid 1's is not). The child reports through its exit status.
TEST(ReadProcMaps, PermissionDeniedThrows) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    try {
      read_proc_maps(1);
      _exit(1);  // no error
    } catch (const Error& e) {
      _exit(std::string(e.what()).find("permission denied (another user's process: eacgm needs CAP_PERFMON or CAP_SYS_PTRACE") !=
                    std::string::npos
                ? 0
                : 2);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: read_proc_maps(1) did not throw; 2: wrong message; 3: could not drop privileges";
}

}  // namespace
}  // namespace eacgm
