#include "util/output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iterator>
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

namespace {

// Paths removed when a stop signal ends eacgm: the handler unlinks them (async-signal-safe) and
// lets the signal end the process as it would have. A slot whose first byte is 0 is free; a path
// is put in with its first byte last, so the handler never sees half of one.
constexpr int kMaxTempFiles = 32;
char g_temp_files[kMaxTempFiles][4096];
std::atomic<int> g_temp_count{0};
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

void remove_temp_files_and_stop(int sig) {
  for (int i = 0; i < g_temp_count.load(); ++i)
    if (__atomic_load_n(&g_temp_files[i][0], __ATOMIC_SEQ_CST)) unlink(g_temp_files[i]);
  signal(sig, SIG_DFL);
  raise(sig);
}

// The slot `path` went into, or -1 when there is none (or the path is too long).
int put_temp_file(const std::string& path) {
  if (path.empty() || path.size() >= sizeof g_temp_files[0]) return -1;
  int i = 0;
  while (i < g_temp_count.load() && g_temp_files[i][0]) ++i;
  if (i >= kMaxTempFiles) return -1;
  std::memcpy(g_temp_files[i] + 1, path.c_str() + 1, path.size());  // with its NUL
  __atomic_store_n(&g_temp_files[i][0], path[0], __ATOMIC_SEQ_CST);
  if (i == g_temp_count.load()) g_temp_count.store(i + 1);
  return i;
}

void install_handler(struct sigaction* before) {
  struct sigaction sa {};
  sa.sa_handler = remove_temp_files_and_stop;
  sigemptyset(&sa.sa_mask);
  for (size_t k = 0; k < std::size(kStopSignals); ++k)
    sigaction(kStopSignals[k], &sa, before ? &before[k] : nullptr);
}

}  // namespace

void remove_on_stop_signal(const std::string& path) {
  if (put_temp_file(path) >= 0) install_handler(nullptr);
}

RemovedOnStopSignal::RemovedOnStopSignal(const std::string& path)
    : slot_(put_temp_file(path)) {
  static_assert(std::size(kStopSignals) == std::size(decltype(before_){}));
  install_handler(before_);
}

RemovedOnStopSignal::~RemovedOnStopSignal() {
  for (size_t k = 0; k < std::size(kStopSignals); ++k)
    sigaction(kStopSignals[k], &before_[k], nullptr);
  if (slot_ >= 0) __atomic_store_n(&g_temp_files[slot_][0], '\0', __ATOMIC_SEQ_CST);
}

void write_then_rename(const std::string& out, const std::function<void(std::ostream&)>& write) {
  std::string tmp = out + ".tmp";
  if (!remove_regular_file(tmp))
    fail("cannot write {}: {} is in the way and is not a regular file (remove it)", out, tmp);
  std::error_code ec;
  RemovedOnStopSignal removed_on_stop(tmp);
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
