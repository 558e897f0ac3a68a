// Job identity from a process's environment and cgroup (probe/job_identity.h).
#include "probe/job_identity.h"

#include <map>

#include "util/read_file.h"

namespace eacgm {
namespace {

// A label value: short, printable, no quotes (an environment may hold anything).
bool acceptable(std::string_view v) {
  if (v.empty() || v.size() > 64) return false;
  for (char c : v)
    if (c < 0x21 || c > 0x7e || c == '"' || c == '\\') return false;
  return true;
}

bool is_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return !s.empty();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> JobIdentity::labels() const {
  return {{"job_id", job},
          {"rank", rank},
          {"local_rank", local_rank},
          {"world_size", world_size},
          {"container", container},
          {"pod", pod}};
}

JobIdentity job_identity_from(std::string_view environ, std::string_view cgroup) {
  std::map<std::string_view, std::string_view> env;
  while (!environ.empty()) {
    size_t end = environ.find('\0');
    std::string_view kv = environ.substr(0, end);
    if (size_t eq = kv.find('='); eq != std::string_view::npos)
      env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
    if (end == std::string_view::npos) break;
    environ.remove_prefix(end + 1);
  }
  auto first = [&](std::initializer_list<std::string_view> names) -> std::string {
    for (auto n : names)
      if (auto it = env.find(n); it != env.end() && acceptable(it->second))
        return std::string(it->second);
    return {};
  };
  JobIdentity id;
  // torchrun/torchelastic first, then Open MPI's and Slurm's
  id.job = first({"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid"});
  id.rank = first({"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"});
  id.local_rank = first({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"});
  id.world_size = first({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"});
  // cgroup v2 ("0::/path") or v1 lines: the container is the last 64-hex-digit id in the path
  // (docker-ID.scope, cri-containerd-ID.scope, crio-ID.scope, /docker/ID), the pod the UID in
  // a kubepods "podUID" element (underscores for dashes under systemd's cgroup driver).
  size_t pos = 0;
  while (pos < cgroup.size()) {
    size_t end = cgroup.find('\n', pos);
    std::string_view line = cgroup.substr(pos, end == std::string_view::npos ? end : end - pos);
    pos = end == std::string_view::npos ? cgroup.size() : end + 1;
    size_t c1 = line.find(':'), c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;  // "hierarchy:controllers:path"
    std::string_view path = line.substr(c2 + 1);
    for (size_t i = 0; i + 64 <= path.size(); ++i)
      if (is_hex(path.substr(i, 64)) && (i == 0 || !is_hex(path.substr(i - 1, 1))) &&
          (i + 64 == path.size() || !is_hex(path.substr(i + 64, 1))))
        id.container = std::string(path.substr(i, 12));
    // "...-pod<uid>.slice" (systemd driver) or ".../pod<uid>/..." (cgroupfs driver)
    if (path.find("kubepods") != std::string_view::npos)
      for (size_t p = path.find("pod"); p != std::string_view::npos; p = path.find("pod", p + 3)) {
        std::string u(path.substr(p + 3, 36));
        for (char& c : u)
          if (c == '_') c = '-';
        bool uid = u.size() == 36;
        for (size_t i = 0; uid && i < u.size(); ++i)
          uid = (i == 8 || i == 13 || i == 18 || i == 23) ? u[i] == '-' : is_hex(u.substr(i, 1));
        if (uid) id.pod = u;
      }
  }
  return id;
}

JobIdentity read_job_identity(uint32_t pid) {
  std::string base = "/proc/" + std::to_string(pid);
  return job_identity_from(read_small_file(base + "/environ"), read_small_file(base + "/cgroup"));
}

uint32_t parent_pid_from_stat(std::string_view stat) {
  size_t close = stat.rfind(')');  // the comm ends at the last ')'
  if (close == std::string_view::npos || close + 4 >= stat.size()) return 0;
  std::string_view rest = stat.substr(close + 2);  // "STATE PPID ..."
  size_t space = rest.find(' ');
  if (space == std::string_view::npos) return 0;
  uint64_t ppid = 0;
  size_t i = space + 1;
  for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9' && ppid <= UINT32_MAX; ++i)
    ppid = ppid * 10 + uint64_t(rest[i] - '0');
  return i > space + 1 && ppid <= UINT32_MAX ? uint32_t(ppid) : 0;
}

uint32_t read_parent_pid(uint32_t pid) {
  return parent_pid_from_stat(read_small_file("/proc/" + std::to_string(pid) + "/stat"));
}

}  // namespace eacgm
