// The injection library inside eacgm (see embedded.h). CMake builds it first and names its path.
#include "gputime/embedded.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
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

namespace {
constexpr std::string_view kDirPrefix = "eacgm-gputime-", kFile = "libeacgm_cupti.so";

// Whether `dir` (in `parent`, opened as parent_fd) is a folder of this user holding only
// kFile as a regular file, and then removes both.
bool remove_if_ours(int parent_fd, const char* dir) {
  struct stat st;
  if (fstatat(parent_fd, dir, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != geteuid())
    return false;
  int fd = openat(parent_fd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* d = fdopendir(fd);
  if (!d) {
    close(fd);
    return false;
  }
  bool only_ours = true, has_file = false;
  while (dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat f;
    if (name == kFile && fstatat(fd, e->d_name, &f, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(f.st_mode) && f.st_uid == geteuid())
      has_file = true;
    else
      only_ours = false;
  }
  bool removed = only_ours && (!has_file || unlinkat(fd, std::string(kFile).c_str(), 0) == 0) &&
                 unlinkat(parent_fd, dir, AT_REMOVEDIR) == 0;
  closedir(d);
  return removed;
}
}  // namespace

size_t remove_stale_library_dirs(const std::string& tmpdir) {
  DIR* d = opendir(tmpdir.c_str());
  if (!d) return 0;
  size_t removed = 0;
  while (dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    if (!name.starts_with(kDirPrefix)) continue;
    name.remove_prefix(kDirPrefix.size());
    // PID-XXXXXX (folders of eacgm before session 34 have no PID: whose they are is unknown)
    int pid = 0;
    auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (ec != std::errc() || pid <= 0 || end == name.data() + name.size() || *end != '-') continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // running (or not ours to ask: EPERM)
    if (remove_if_ours(dirfd(d), e->d_name)) ++removed;
  }
  closedir(d);
  return removed;
}

LibraryFile::LibraryFile() {
  std::string_view image = embedded_library();
  if (image.empty()) {
    why_ = "this eacgm was built without CUPTI's headers (cupti_activity.h)";
    return;
  }
  const char* tmp = getenv("TMPDIR");
  std::string tmpdir = tmp && *tmp ? tmp : "/tmp";
  remove_stale_library_dirs(tmpdir);
  std::string pattern = tmpdir + "/" + std::string(kDirPrefix) + std::to_string(getpid()) + "-XXXXXX";
  if (!mkdtemp(pattern.data())) {  // mode 0700, a name no one else had
    why_ = "cannot make a folder for the injection library in " + pattern + ": " + strerror(errno);
    return;
  }
  dir_ = pattern;
  std::string path = dir_ + "/" + std::string(kFile);
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
