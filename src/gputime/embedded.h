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

}  // namespace eacgm::gputime
