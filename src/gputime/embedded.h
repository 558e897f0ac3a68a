// The gputime layer's injection library (libeacgm_cupti.so), carried inside eacgm and written
// out for the command `eacgm record` launches (CUDA loads it by the path CUDA_INJECTION64_PATH
// names, so it must be a file).
#pragma once
#include <string>
#include <string_view>

namespace eacgm::gputime {

// The library's bytes; empty when eacgm was built without CUPTI's headers.
std::string_view embedded_library();

// The library written to a fresh private folder (mode 0700, under $TMPDIR or /tmp), removed
// with the folder when this goes. path() is empty, and why() says why, where it could not be.
// The folder is named eacgm-gputime-PID-XXXXXX after the recorder that made it: a recorder
// killed outright (SIGKILL, a crash) cannot remove its own, so each new one removes those of
// recorders gone (remove_stale_library_dirs).
class LibraryFile {
 public:
  LibraryFile();
  ~LibraryFile();
  LibraryFile(const LibraryFile&) = delete;
  LibraryFile& operator=(const LibraryFile&) = delete;
  const std::string& path() const { return path_; }
  const std::string& why() const { return why_; }

 private:
  std::string dir_, path_, why_;
};

// Removes from `tmpdir` each folder eacgm-gputime-PID-* whose recorder PID no longer runs,
// where it is a real folder of this user holding nothing but libeacgm_cupti.so as a regular
// file (what LibraryFile makes; anything else is left alone). Returns how many it removed.
size_t remove_stale_library_dirs(const std::string& tmpdir);

}  // namespace eacgm::gputime
