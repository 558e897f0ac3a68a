#include "util/privileges.h"

#include <sys/capability.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>

#include "util/error.h"

namespace eacgm {
namespace {

bool kernel_before(int major, int minor) {
  utsname u{};
  int ma = 0, mi = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma < major || (ma == major && mi < minor);
}

}  // namespace

std::string Privileges::missing_for_tracing() const {
  if (!bpf && !perfmon) return "CAP_BPF and CAP_PERFMON";
  if (!bpf) return "CAP_BPF";
  if (!perfmon) return "CAP_PERFMON";
  return "";
}

Privileges current_privileges() {
  Privileges p;
  p.root = geteuid() == 0;
  cap_t caps = cap_get_proc();
  auto has = [&](cap_value_t c) {
    cap_flag_value_t v = CAP_CLEAR;
    return caps && cap_get_flag(caps, c, CAP_EFFECTIVE, &v) == 0 && v == CAP_SET;
  };
  bool admin = has(CAP_SYS_ADMIN);
  p.bpf = admin || has(CAP_BPF);
  p.perfmon = admin || has(CAP_PERFMON);
  p.sys_ptrace = has(CAP_SYS_PTRACE);
  p.sys_resource = has(CAP_SYS_RESOURCE);
  p.dac_read_search = has(CAP_DAC_READ_SEARCH);
  if (caps) cap_free(caps);
  p.memlock_matters = !p.sys_resource && kernel_before(5, 11);
  return p;
}

void require_tracing_privileges(const std::string& who) {
  Privileges p = current_privileges();
  std::string missing = p.missing_for_tracing();
  if (!missing.empty())
    fail(
        "{} needs CAP_BPF and CAP_PERFMON (eBPF uprobes and tracepoints); missing {}: run as "
        "root (sudo), or grant them (setcap cap_bpf,cap_perfmon+ep on the eacgm binary, or "
        "AmbientCapabilities in a systemd unit)",
        who, missing);
}

std::string other_users_gaps(const Privileges& p) {
  if (p.sys_ptrace && p.dac_read_search) return "";
  std::string lost, need;
  if (!p.dac_read_search) lost = "job identity (environ)", need = "CAP_DAC_READ_SEARCH";
  if (!p.sys_ptrace) {
    lost += std::string(lost.empty() ? "" : ", ") + "Python stacks or libraries inside containers";
    need += std::string(need.empty() ? "" : " and ") + "CAP_SYS_PTRACE";
  }
  return fmt::format(
      "other users' processes are traced without their {} (run as root, or "
      "grant {})",
      lost, need);
}

std::string describe_privileges(const Privileges& p) {
  std::string who = p.root ? "root" : "uid " + std::to_string(geteuid());
  std::string missing = p.missing_for_tracing();
  if (!missing.empty())
    return fmt::format(
        "{}, missing {}: cannot record (run as root, or grant CAP_BPF and "
        "CAP_PERFMON)",
        who, missing);
  std::string out = fmt::format("{} with CAP_BPF and CAP_PERFMON: can record", who);
  std::string gaps = other_users_gaps(p);
  out += gaps.empty() ? "; other users' processes fully (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH)"
                      : "; " + gaps;
  if (p.memlock_matters)
    out +=
        "; no CAP_SYS_RESOURCE on a kernel before 5.11: BPF maps are "
        "limited by RLIMIT_MEMLOCK";
  return out;
}

}  // namespace eacgm
