// Checks privileges, kernel support for eBPF uprobes, and which traced libraries exist.
#include "report/doctor.h"

#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <dlfcn.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/nvml.h"
#include "gputime/embedded.h"
#include "probe/call_tracer.h"
#include "probe/debug_info.h"
#include "probe/elf_symbols.h"
#include "probe/host_tracer.h"
#include "probe/library_finder.h"
#include "probe/torch_ops.h"
#include "util/error.h"
#include "util/privileges.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

struct Doctor {
  FILE* out;
  bool fatal = false;
  void ok(const std::string& what, const std::string& detail) {
    fmt::print(out, "  ok       {:<22} {}\n", what, detail);
  }
  void missing(const std::string& what, const std::string& why, bool blocks = false) {
    fmt::print(out, "  {:<8} {:<22} {}\n", blocks ? "FAIL" : "missing", what, why);
    fatal = fatal || blocks;
  }
};

std::vector<std::string> find_files(const std::vector<std::string>& dirs,
                                    const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& d : dirs) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.path().filename().string().starts_with(prefix)) out.push_back(e.path().string());
  }
  return out;
}

void check_kernel_features(Doctor& d);

// " (the largest, PROGRAM, took the verifier N instructions of the 1000000 it allows a
// program)", or "" where the kernel does not count them: how close a program is to the limit
// that a kernel with a slightly different verifier could cross (its layer is then off there).
std::string verifier_load(const CallTracer& tracer) {
  CallTracer::VerifierLoad most = tracer.most_verified();
  if (!most.instructions) return {};
  return fmt::format(
      " (the largest, {}, took the verifier {} instructions of the 1000000 it allows a program)",
      most.program, most.instructions);
}

void check_kernel(Doctor& d) {
  utsname u{};
  uname(&u);
  d.ok("kernel", fmt::format("{} {}", u.sysname, u.release));
  Privileges privileges = current_privileges();  // as record and the agent check them
  if (privileges.missing_for_tracing().empty())
    d.ok("privileges", describe_privileges(privileges));
  else
    d.missing("privileges", describe_privileges(privileges), true);
  if (fs::exists("/sys/kernel/btf/vmlinux"))
    d.ok("BTF", "/sys/kernel/btf/vmlinux");
  else
    d.missing("BTF", "/sys/kernel/btf/vmlinux absent: kernel built without CONFIG_DEBUG_INFO_BTF",
              true);
  if (fs::exists("/sys/bus/event_source/devices/uprobe/type"))
    d.ok("uprobes", "perf uprobe PMU present");
  else
    d.missing("uprobes", "no uprobe PMU: kernel built without CONFIG_UPROBE_EVENTS", true);
  if (privileges.missing_for_tracing().empty()) {
    check_kernel_features(d);
    try {
      CallTracerOptions options{false, 1 << 20, 4096};
      options.sample_hz = 99;  // as record does by default
      // the programs as record loads them for a Python job (its default): the python layer's
      // stack walk is code the verifier skips without it, and a kernel may refuse only that
      // (6.18.44 refused a version of it); then, as record, without it
      options.python = true;
      options.off_cpu = true;
      std::unique_ptr<CallTracer> loaded;
      try {
        loaded = std::make_unique<CallTracer>(options);
        d.ok("BPF programs", "call tracer loaded and verified" + verifier_load(*loaded) +
                                 ", tracepoints attached");
      } catch (const Error& e) {
        options.python = false;
        loaded = std::make_unique<CallTracer>(options);  // (refused too: the error below)
        d.ok("BPF programs", "call tracer loaded and verified without the python layer's "
                             "programs" + verifier_load(*loaded) + ", tracepoints attached");
        std::string why = load_refusal(e.what());
        d.missing("Python stacks", fmt::format("{} (record and the agent go on without them)", why));
      }
      CallTracer& tracer = *loaded;
      if (std::string why = tracer.start_sampling(); why.empty())
        d.ok("CPU profile", "perf events on every CPU at 99 Hz (record --sample-hz)");
      else
        d.missing("CPU profile", why + " (record goes on without it)");
      try {
        HostTracer host(tracer.traced_map_fd(), false);
        std::string_view scan = host.scan_kind();
        std::string what = "scheduler, network and block tracepoints attached";
        if (scan == "cpus")
          d.ok("host layer", what + "; running threads counted per CPU at each sample");
        else
          d.missing("host layer",
                    what + (scan == "tasks"
                                ? "; running threads counted by a walk of every task at each "
                                  "sample (this kernel refused the per-CPU program: ~0.5 us a "
                                  "task of the node, 10 times a second)"
                                : "; running threads' CPU time counted only when they leave "
                                  "the CPU (no BPF task iterator)"));
      } catch (const Error& e) {
        d.missing("host layer", e.what());
      }
    } catch (const Error& e) {
      d.missing("BPF programs", e.what(), true);
    }
  }
}

// The kernel features eacgm's BPF programs use, each probed on this kernel (libbpf loads a
// tiny program or map; BTF names the newer ones), with the Linux version that brought it and
// what is lost without it. docs/requirements.md lists the same.
void check_kernel_features(Doctor& d) {
  btf* vmlinux = btf__load_vmlinux_btf();
  auto has_btf_func = [&](const char* name) {
    return vmlinux && btf__find_by_name_kind(vmlinux, name, BTF_KIND_FUNC) >= 0;
  };
  auto has_tracepoint = [&](const char* name) {
    std::string type = std::string("btf_trace_") + name;
    return vmlinux && btf__find_by_name_kind(vmlinux, type.c_str(), BTF_KIND_TYPEDEF) >= 0;
  };
  struct Feature {
    const char* name;
    bool present;
    const char* since;
    const char* without;  // nullptr: nothing records without it
  } features[] = {
      {"ring buffer", libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr) == 1, "5.8",
       nullptr},
      {"task storage", libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, nullptr) == 1,
       "5.11", nullptr},
      {"uprobe cookies",
       libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_get_attach_cookie, nullptr) == 1,
       "5.15", nullptr},
      {"bpf_find_vma", libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_find_vma, nullptr) == 1,
       "5.17", nullptr},
      {"bpf_task_from_pid", has_btf_func("bpf_task_from_pid"), "6.2",
       "the host layer is off (its per-CPU scan of running threads calls it)"},
      {"socket tracepoints", has_tracepoint("sock_send_length"), "6.3",
       "the host layer is off (scheduler, network and block I/O per process)"},
      {"timer tracepoint", has_tracepoint("hrtimer_expire_entry"), "5.5",
       "CPU stalls go unseen (stall_ns: a vCPU its hypervisor did not run)"},
      {"uprobe_multi", has_btf_func("bpf_uprobe_multi_link_attach"), "6.6",
       "one perf uprobe per function: attaching PyTorch's operators takes seconds, not "
       "milliseconds"},
      {"uprobe sessions", has_btf_func("bpf_session_is_return"), "6.12",
       "the python layer pairs a uprobe and a uretprobe per Python call (about twice the cost)"},
  };
  for (const auto& f : features) {
    std::string since = fmt::format("Linux {}+", f.since);
    if (f.present)
      d.ok(f.name, since);
    else if (f.without)
      d.missing(f.name, fmt::format("absent ({}): {}", since, f.without));
    else
      d.missing(f.name, fmt::format("absent ({}): eacgm's BPF programs need it", since), true);
  }
  btf__free(vmlinux);
}

namespace {

// CUDA's runtime and driver, and NCCL.
void check_cuda_and_nccl(Doctor& d) {
  const char* ldp = getenv("LD_LIBRARY_PATH");
  auto cuda = candidate_cuda_libraries(ldp ? ldp : "");
  if (cuda.empty())
    d.missing("CUDA libraries", "no libcudart or libcuda found (targets that bundle their own "
                                "are still found from their maps)");
  for (const auto& lib : cuda) {
    try {
      auto elf = ElfSymbols::load(lib);
      bool runtime = elf.find_function("cudaLaunchKernel") != nullptr;
      bool driver = elf.find_function("cuLaunchKernel") != nullptr;
      d.ok("CUDA library", fmt::format("{} ({})", lib, runtime  ? "runtime API"
                                                       : driver ? "driver API"
                                                                : "no probed functions"));
    } catch (const Error& e) {
      d.missing("CUDA library", e.what());
    }
  }
  std::vector<std::string> libdirs{"/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"};
  auto nccl = find_files(libdirs, "libnccl.so");
  if (nccl.empty())
    d.missing("NCCL", "no libnccl.so in " + libdirs.front() + " or " + libdirs.back() +
                          " (targets that bundle their own are still found from their maps)");
  else
    d.ok("NCCL", nccl.front() + " (comm layer)");
}

// The gputime layer: the injection library inside this eacgm, and a CUPTI for it to load.
void check_cupti(Doctor& d) {
  if (gputime::embedded_library().empty()) {
    d.missing("GPU time", "this eacgm was built without CUPTI's headers (the gputime layer is "
                          "unavailable; build with a CUDA toolkit)");
    return;
  }
  const char* ldp = getenv("LD_LIBRARY_PATH");
  std::vector<std::string> dirs{"/usr/local/cuda/lib64", "/usr/local/cuda/extras/CUPTI/lib64",
                                "/usr/lib/x86_64-linux-gnu"};
  for (const auto& lib : candidate_cuda_libraries(ldp ? ldp : ""))
    dirs.push_back(std::filesystem::path(lib).parent_path().string());
  auto cupti = find_files(dirs, "libcupti.so");
  const std::string no_driver = no_gpu_driver();
  if (cupti.empty())
    d.missing("CUPTI", "no libcupti.so beside the CUDA libraries: jobs that bring their own "
                       "(a wheel's nvidia/cuda_cupti) still get GPU time (gputime layer)");
  else if (!no_driver.empty())
    d.missing("GPU time", no_driver + ": GPU time (kernels, copies, NCCL on the GPU) is off here; "
                          "CUPTI is " + cupti.front() + " for when there is one");
  else
    d.ok("CUPTI", cupti.front() + " (gputime layer: record gives its command eacgm's CUDA "
                                  "injection library)");
  // NCCL loads its profiler plugin itself (2.26+); the library is the plugin too
  if (const char* plugin = getenv("NCCL_PROFILER_PLUGIN");
      plugin && *plugin && !looks_like_gputime_library(plugin))
    d.ok("NCCL GPU time", std::string("NCCL_PROFILER_PLUGIN is set here (") + plugin +
                              "): record leaves it to the command and eacgm's NCCL plugin off");
  else if (no_driver.empty())
    d.ok("NCCL GPU time", "record gives its command eacgm's library as NCCL's profiler plugin "
                          "(interfaces v5 and v4: NCCL 2.26 and newer; an older NCCL ignores it)");
}

// glibc's detached debug file: where profiles' threads block (its internal futex wait) and
// much of their native time is in functions only it names.
void check_debug_symbols(Doctor& d) {
  Dl_info libc{};
  if (dladdr(reinterpret_cast<void*>(&::getpid), &libc) && libc.dli_fname) {
    std::string path = libc.dli_fname;
    ElfDebugRefs refs = read_debug_refs(path);
    std::string found;
    for (const auto& candidate : debug_file_candidates(path, refs, {"/usr/lib/debug"}))
      if (!refs.build_id.empty() && read_debug_refs(candidate).build_id == refs.build_id) {
        found = candidate;
        break;
      }
    if (!found.empty())
      d.ok("debug symbols",
           "glibc's in " + found + " (profiles name its internal functions, e.g. futex waits)");
    else
      d.missing("debug symbols",
                "none for " + path +
                    ": profiles show glibc's internal functions as fn@0x... (install its debug "
                    "symbols: libc6-dbg on Debian and Ubuntu, glibc-debuginfo on Fedora)");
  }
}

void check_pythons(Doctor& d) {
  auto pythons = find_files({"/usr/bin"}, "python3.");
  std::erase_if(pythons, [](const std::string& p) {  // python3.11, not python3.11-config
    return p.find_first_not_of("0123456789", p.rfind("python3.") + 8) != std::string::npos;
  });
  if (pythons.empty())
    d.missing("Python", "no /usr/bin/python3.X");
  for (const auto& p : pythons) {
    int minor = std::atoi(p.c_str() + p.rfind("python3.") + 8);
    if (minor >= 10 && minor <= 13)
      d.ok("Python", p + " (python layer: its stacks at cuda/comm/torch calls by default, every "
                         "call of chosen functions with --python-calls)");
    else
      d.missing("Python", fmt::format("{}: the python layer reads CPython 3.10-3.13, not 3.{} "
                                      "(the other layers trace it all the same)", p, minor));
  }
}

void check_torch(Doctor& d) {
  auto torch = find_files({"/usr/lib/python3/dist-packages/torch/lib"}, "libtorch_cpu");
  if (torch.empty()) {
    d.missing("PyTorch", "no libtorch_cpu.so in Debian's python3-torch location (pip wheels "
                         "elsewhere are still found from the target's maps)");
  } else {
    try {
      TorchOps all(TorchOpFilter({"*"})), chosen(TorchOpFilter({"default"}));
      ElfSymbols elf = ElfSymbols::load(torch.front());
      size_t n = all.probes_for(elf).size(), m = chosen.probes_for(elf).size();
      if (n == 0)
        d.missing("PyTorch", torch.front() + ": no exported at::_ops::<op>::call functions "
                                             "(torch layer unavailable for this build)");
      else
        d.ok("PyTorch", fmt::format("{} (torch layer: {} operators, {} in the default set)",
                                    torch.front(), n, m));
    } catch (const Error& e) {
      d.missing("PyTorch", e.what());
    }
  }
}

void check_nvml(Doctor& d) {
  NvmlLoadResult nvml = NvmlLibrary::load(choose_nvml_library("", getenv("EACGM_NVML_LIBRARY")));
  if (nvml) {
    std::string missing;
    for (const auto& f : nvml.library->missing_functions()) missing += " " + f;
    d.ok("NVML", fmt::format("{} initialises{}", nvml.library->path(),
                             missing.empty() ? "" : "; this driver lacks" + missing));
  } else {
    d.missing("NVML", nvml.failure.warning() + " (gpu layer unavailable)");
  }
}

}  // namespace

void check_libraries(Doctor& d) {
  check_cuda_and_nccl(d);
  check_cupti(d);
  check_debug_symbols(d);
  check_pythons(d);
  check_torch(d);
  check_nvml(d);
}

}  // namespace

int run_doctor(FILE* out) {
  Doctor d{out};
  fmt::print(out, "eacgm doctor\n");
  check_kernel(d);
  check_libraries(d);
  fputs(d.fatal ? "recording cannot work here: fix the FAIL lines above\n"
                : "recording can work here\n",
        out);
  return d.fatal ? 1 : 0;
}

}  // namespace eacgm
