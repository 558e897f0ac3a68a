#include "util/output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace eacgm {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// A file name for what `option` writes, for messages.
const char* example_name(const std::string& option) {
  if (option == "--html") return "run.html";
  if (option == "--perfetto") return "run.pftrace";
  if (option == "--chrome") return "run.json";
  return "run.eacgm.db";
}

}  // namespace

void check_output_file(const std::string& path, bool force, const std::string& option) {
  if (path.empty()) throw UsageError(fmt::format("{}: give a file name", option));
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      throw UsageError(fmt::format("{} {}: is a directory (give a file name, e.g. {}/{})", option,
                                   path, path, example_name(option)));
    if (!S_ISREG(st.st_mode))
      throw UsageError(fmt::format(
          "{} {}: is {}; eacgm writes and replaces only regular files, --force or not (choose "
          "another name)",
          option, path, kind_of(st.st_mode)));
    if (!force)
      throw UsageError(
          fmt::format("output {} already exists (use --force to overwrite, or choose another {})",
                      path, option));
  }
  namespace fs = std::filesystem;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("cannot create {}: directory {} does not exist (create it first)", path, dir.string());
  if (access(dir.c_str(), W_OK) != 0)
    fail("cannot create {}: directory {} is not writable ({})", path, dir.string(),
         errno_text(errno));
}

bool remove_regular_file(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  if (!S_ISREG(st.st_mode)) return false;
  return unlink(path.c_str()) == 0 || errno == ENOENT;
}

void write_then_rename(const std::string& out, const std::function<void(std::ostream&)>& write) {
  std::string tmp = out + ".tmp";
  if (!remove_regular_file(tmp))
    fail("cannot write {}: {} is in the way and is not a regular file (remove it)", out, tmp);
  std::error_code ec;
  try {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    if (!file)
      fail("cannot write {}: {} (check the directory exists and is writable)", out,
           errno_text(errno));
    write(file);
    file.close();
    if (!file) fail("cannot write {}: disk full or I/O error (free space and try again)", out);
  } catch (...) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::filesystem::rename(tmp, out, ec);
  if (ec) fail("cannot move {} to {}: {}", tmp, out, ec.message());
}

}  // namespace eacgm
