// `eacgm gputime-library DIR`: writes the gputime layer's CUDA injection library where jobs
// that eacgm does not launch (the agent's, a cluster's) can load it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "cli/commands.h"
#include "gputime/embedded.h"
#include "util/error.h"

namespace eacgm::cli {
namespace {

// An earlier copy may be replaced (an upgrade); anything else in the way is not ours to touch.
void check_replaceable(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    fail("cannot check {}: {}", path, errno_text(errno));
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  if (!S_ISREG(st.st_mode) || bytes.find("eacgm_gputime_batch") == std::string::npos)
    throw UsageError(fmt::format(
        "{} exists and is not a copy of eacgm's injection library: move it away, or give "
        "another folder",
        path));
}

int write_library(const std::string& dir) {
  std::string_view image = gputime::embedded_library();
  if (image.empty())
    fail("this eacgm was built without CUPTI's headers: it has no injection library to write "
         "(build it where a CUDA toolkit is installed)");
  if (dir.empty()) throw UsageError("gputime-library: give a folder (e.g. /opt/eacgm)");
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw UsageError(fmt::format("{}: no such folder (create it first, e.g. mkdir -p {})", dir, dir));
  std::string path = dir + "/libeacgm_cupti.so";
  check_replaceable(path);
  // written beside it, then renamed over it: a job that has the old copy mapped keeps it
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
  if (fd < 0) fail("cannot write {}: {}", tmp, errno_text(errno));
  bool ok = true;
  for (size_t at = 0; ok && at < image.size();) {
    ssize_t n = write(fd, image.data() + at, image.size() - at);
    if (n > 0)
      at += size_t(n);
    else if (errno != EINTR)
      ok = false;
  }
  int err = errno;
  if (fchmod(fd, 0755) != 0 || close(fd) != 0) ok = false;  // readable by every job's user
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    err = ok ? errno : err;
    unlink(tmp.c_str());
    fail("cannot write {}: {} (free space, or give another folder)", path, errno_text(err));
  }
  printf("%s\n", path.c_str());
  fprintf(stderr,
          "eacgm: wrote the gputime layer's library; in the job's environment:\n"
          "  CUDA_INJECTION64_PATH=%s\n"
          "  NCCL_PROFILER_PLUGIN=%s\n"
          "then eacgm agent (or record -p) on its node records when its kernels and NCCL "
          "operations ran on the GPU. Kernels, copies and memsets are collected the first 1 s of "
          "every 10 s (CUPTI's cost); EACGM_GPUTIME_DUTY=full in the job collects everything\n",
          path.c_str(), path.c_str());
  return 0;
}

}  // namespace

std::function<int()> add_gputime_library(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "gputime-library",
      "Write the gputime layer's library (libeacgm_cupti.so: CUDA's injection library and NCCL's "
      "profiler plugin) into DIR, for jobs eacgm does not launch: set "
      "CUDA_INJECTION64_PATH=DIR/libeacgm_cupti.so and NCCL_PROFILER_PLUGIN=DIR/libeacgm_cupti.so "
      "in the job (a pod spec, a torchrun wrapper), and the agent or record -p sees when its "
      "kernels, copies, memsets and NCCL operations ran on the GPU. record -- CMD needs none of "
      "this: it gives its command the library itself.");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("DIR", *dir, "an existing folder the job can read (e.g. /opt/eacgm)")
      ->required();
  return [dir]() { return write_library(*dir); };
}

}  // namespace eacgm::cli
