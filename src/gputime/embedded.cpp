// The injection library inside eacgm (see embedded.h). CMake builds it first and names its path.
#include "gputime/embedded.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#ifdef EACGM_CUPTI_LIBRARY
asm(".pushsection .rodata\n.balign 16\n.global eacgm_cupti_so_begin\n.hidden eacgm_cupti_so_begin\n"
    "eacgm_cupti_so_begin:\n.incbin \"" EACGM_CUPTI_LIBRARY
    "\"\n.global eacgm_cupti_so_end\n"
    ".hidden eacgm_cupti_so_end\neacgm_cupti_so_end:\n.popsection\n");
extern "C" const char eacgm_cupti_so_begin[], eacgm_cupti_so_end[];
#endif

namespace eacgm::gputime {

std::string_view embedded_library() {
#ifdef EACGM_CUPTI_LIBRARY
  return {eacgm_cupti_so_begin, size_t(eacgm_cupti_so_end - eacgm_cupti_so_begin)};
#else
  return {};
#endif
}

LibraryFile::LibraryFile() {
  std::string_view image = embedded_library();
  if (image.empty()) {
    why_ = "this eacgm was built without CUPTI's headers (cupti_activity.h)";
    return;
  }
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/eacgm-gputime-XXXXXX";
  if (!mkdtemp(pattern.data())) {  // mode 0700, a name no one else had
    why_ = "cannot make a folder for the injection library in " + pattern + ": " + strerror(errno);
    return;
  }
  dir_ = pattern;
  std::string path = dir_ + "/libeacgm_cupti.so";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
  bool ok = fd >= 0;
  for (size_t at = 0; ok && at < image.size();) {
    ssize_t n = write(fd, image.data() + at, image.size() - at);
    if (n <= 0)
      ok = errno == EINTR;
    else
      at += size_t(n);
  }
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (!ok) {
    why_ = "cannot write the injection library to " + path + ": " + strerror(errno);
    unlink(path.c_str());
    return;
  }
  path_ = path;
}

LibraryFile::~LibraryFile() {
  if (!path_.empty()) unlink(path_.c_str());  // the processes that mapped it keep their copy
  if (!dir_.empty()) rmdir(dir_.c_str());
}

}  // namespace eacgm::gputime
