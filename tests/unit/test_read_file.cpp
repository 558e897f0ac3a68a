// util/read_file.h: a /proc file whose process went away between its open and its read fails
// the read with ESRCH; the read gives what it has instead of the exception libstdc++'s filebuf
// throws there (which once ended a recording with an internal error).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <string>

#include "util/read_file.h"

namespace eacgm {
namespace {

TEST(ReadFile, AProcFileOfAProcessThatWentAwayReadsAsWhatItHas) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  std::string path = "/proc/" + std::to_string(child) + "/cgroup";
  FileDescriptor fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_GE(fd.get(), 0);
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  char probe;
  errno = 0;
  EXPECT_EQ(pread(fd.get(), &probe, 1, 0), -1) << "the premise: the read fails";
  EXPECT_EQ(errno, ESRCH);
  EXPECT_EQ(read_what_can_be_read(fd.get()), "");
  EXPECT_EQ(read_small_file(path), "");  // gone: nothing to open
  EXPECT_NE(read_small_file("/proc/self/cgroup"), "");
}

}  // namespace
}  // namespace eacgm
