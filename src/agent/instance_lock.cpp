// The agent's instance locks (agent/instance_lock.h).
#include "agent/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "util/error.h"

namespace eacgm {

std::string InstanceLock::take(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  // O_NOFOLLOW: a symlink planted where the lock goes is not followed (the agent runs as root)
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return fmt::format("cannot open {}: {}", path, errno_text(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return fmt::format("{} is not a regular file", path);
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char text[32] = {};
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) return fmt::format("cannot lock {}: {}", path, errno_text(err));
    busy_ = true;
    long pid = n > 0 ? std::strtol(text, nullptr, 10) : 0;
    return pid > 0 ? fmt::format("held by pid {}", pid) : std::string("held by another process");
  }
  std::string me = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
    // the lock stands without the pid in it: a second agent says "another process"
  }
  fd_ = fd;
  return {};
}

InstanceLock::~InstanceLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock; the file stays (unlinking it races a taker)
}

}  // namespace eacgm
