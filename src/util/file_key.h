// Identifies a file by device and inode ("dev:ino"), so that one file reached through several
// paths (symlinks, /proc/PID/root) is examined once. Empty when the file cannot be stat()ed.
#pragma once
#include <sys/stat.h>

#include <string>

#include <fmt/format.h>

namespace eacgm {

inline std::string file_key(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return fmt::format("{}:{}", st.st_dev, st.st_ino);
}

}  // namespace eacgm
