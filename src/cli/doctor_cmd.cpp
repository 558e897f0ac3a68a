// `eacgm doctor`: environment checks.
#include <cstdio>

#include "cli/commands.h"
#include "report/doctor.h"

namespace eacgm::cli {

std::function<int()> add_doctor(CLI::App& app) {
  app.add_subcommand("doctor", "Check what works on this machine: privileges, BPF, BTF, uprobes, "
                               "and which CUDA, NCCL, Python, PyTorch and NVML libraries exist.");
  return []() { return run_doctor(stdout); };
}

}  // namespace eacgm::cli
