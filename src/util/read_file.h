// Reading a small file (/proc, /sys) whole, without exceptions. A /proc file of a process that
// exits between its open and its read fails the read with ESRCH, which libstdc++'s filebuf
// throws as an exception that an istreambuf_iterator passes on: eacgm once stopped with an
// internal error when a short-lived traced process exited while its job identity was read.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "util/file_descriptor.h"

namespace eacgm {

// What can be read from `fd` up to its end or its first error.
inline std::string read_what_can_be_read(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0)
      out.append(buf, size_t(n));
    else if (n < 0 && errno == EINTR)
      continue;
    else
      return out;
  }
}

// The file's content, or what could be read of it ("" when it cannot be opened).
inline std::string read_small_file(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return fd.get() < 0 ? std::string() : read_what_can_be_read(fd.get());
}

}  // namespace eacgm
