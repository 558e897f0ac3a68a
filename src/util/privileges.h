// What each part of eacgm needs from the kernel, checked before anything loads, so that a
// missing privilege is one line naming it rather than a libbpf error. On Linux >= 5.8:
//   the BPF programs, uprobes and tracepoints (every layer but gpu): CAP_BPF and CAP_PERFMON
//     (root has them; CAP_SYS_ADMIN stands for both);
//   another user's processes (-p, --all, the agent), measured on Linux 6.18 with setpriv:
//     CAP_PERFMON reads their /proc/PID/maps, so their calls are traced; their memory (Python
//     stacks, process_vm_readv) and /proc/PID/root (libraries inside containers) need
//     CAP_SYS_PTRACE; their environ (job identity) is mode 0400, so CAP_DAC_READ_SEARCH too.
//     One's own processes need nothing more;
//   BPF maps beyond RLIMIT_MEMLOCK: CAP_SYS_RESOURCE before Linux 5.11 only (memory cgroups
//     account for BPF since);
//   the gpu layer: read access to /dev/nvidia* (a file permission, no capability).
#pragma once
#include <string>

namespace eacgm {

struct Privileges {
  bool root = false;  // euid 0
  bool bpf = false, perfmon = false, sys_ptrace = false, sys_resource = false,
       dac_read_search = false;  // effective, CAP_SYS_ADMIN counted for CAP_BPF and CAP_PERFMON
  bool memlock_matters = false;  // kernel before 5.11 without CAP_SYS_RESOURCE
  std::string missing_for_tracing() const;  // "CAP_PERFMON", "CAP_BPF and CAP_PERFMON", ""
};

Privileges current_privileges();

// What other users' processes are traced without, and the capabilities that would give it
// ("" when nothing is missing), for the one line record and the agent say.
std::string other_users_gaps(const Privileges& p);

// Throws eacgm::Error (one line: what is missing, and how to grant it) unless the BPF layers
// can load. `who` starts the message: "recording", "the agent".
void require_tracing_privileges(const std::string& who);

// One line for `doctor`: what this process may trace with the privileges it has.
std::string describe_privileges(const Privileges& p);

}  // namespace eacgm
