// Probe planning for the call layers: which files of a traced process hold probed functions,
// where each function is in its file, and attaching each file's probes once.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "probe/call_tracer.h"
#include "probe/torch_ops.h"

namespace eacgm {

class ElfSymbols;

// A file whose functions are probed.
struct ProbedFile {
  std::string path;
  size_t functions = 0;            // probe points attached (entry+return pairs)
  std::vector<std::string> errors;  // functions that could not be attached, with why
  std::set<std::string> layers;     // the layers of the functions attached (cuda, comm, torch)
};

// The gputime layer's one probe: eacgm_gputime_batch in eacgm's CUDA injection library.
constexpr uint16_t kGpuTimeOp = 0xfffe;

// The layer an op id belongs to: cuda below kCommOpBase, comm (NCCL, c10d) below kTorchOpBase,
// gputime for kGpuTimeOp, torch for the others.
const char* layer_of_op(uint64_t op_id);

// Library files a dynamic loader could pick for libcudart / libcuda: LD_LIBRARY_PATH entries,
// the ld.so cache and the usual CUDA install folder. Attaching to them before the target starts
// catches the first calls after a dlopen, which a scan of the maps could only see late.
std::vector<std::string> candidate_cuda_libraries(const std::string& ld_library_path);

// The dynamic loader eacgm itself runs under (the same one its children use, usually).
std::string own_dynamic_loader();

// True when a mapped file may hold the CUDA runtime or driver API by its name.
bool looks_like_cuda_library(const std::string& path);
// True for eacgm's CUDA injection library (libeacgm_cupti*.so), by its name.
bool looks_like_gputime_library(const std::string& path);

// Empty where this machine has an NVIDIA kernel driver (/proc/driver/nvidia/version, or the
// /dev/nvidiactl a container is given); else one sentence saying there is none. Without it CUDA
// calls fail before CUDA loads an injection library, so the gputime layer can record nothing.
// `root` prefixes both paths (tests).
std::string no_gpu_driver(const std::string& root = "");

// One function to probe wherever it is found, and the cookie its events carry.
struct ProbeSpec {
  std::string_view symbol;
  uint64_t cookie;
  // How the call's end is seen: a uretprobe, the function's exit instructions (C++ functions
  // that may throw: see CallTracer::ProbePoint::exits), or not at all (entry-only records).
  enum class End : uint8_t { Uretprobe, ExitInstructions, None } end = End::Uretprobe;
};

// The probe points of the call layers chosen for a recording, and which mapped files may hold
// them (by name; the executable is always examined, for statically linked libraries).
struct ProbeSet {
  std::vector<ProbeSpec> specs;
  std::vector<bool (*)(const std::string& path)> library_matchers;
  // Layers whose probe points depend on the file (the torch layer's operators): called for
  // each examined file; the symbols of the specs they return must outlive the planner.
  std::vector<std::function<std::vector<ProbeSpec>(const ElfSymbols&)>> providers;
  // The torch layer's points and the cuda layer's launches, copies, sets and synchronisations
  // are duty-cycled (CallTracer::pause_calls): the agent's --call-duty. The comm layer's never
  // are (a straggler is found in every collective), nor CUDA's allocations and kernel lookups.
  bool duty_cycled = false;
};

// Whether an operation's probes are duty-cycled when the set is (see ProbeSet::duty_cycled).
bool duty_cycled_op(uint64_t op_id);

// The cuda layer's and the comm layer's probe points.
void add_cuda_probes(ProbeSet& set);
void add_comm_probes(ProbeSet& set);
// PyTorch c10d's (part of the comm layer): Gloo process groups in libtorch. `use_layout` is
// called with each libtorch file that has them, to learn its tensor layout.
void add_c10d_probes(ProbeSet& set, std::function<void(const std::string& path)> use_layout);
// The torch layer's: the operators `ops` selects, in whichever libtorch a process maps.
void add_torch_probes(ProbeSet& set, std::shared_ptr<TorchOps> ops);
// The gputime layer's: eacgm_gputime_batch, where the injection library hands over its records.
void add_gputime_probes(ProbeSet& set);

// Library files of the chosen layers a dynamic loader could pick (see candidate_cuda_libraries).
std::vector<std::string> candidate_libraries(const ProbeSet& set,
                                             const std::string& ld_library_path);

class ProbePlanner {
 public:
  ProbePlanner(CallTracer& tracer, ProbeSet probes);

  // Attaches the probes of every op the file defines, once per file (by device and inode).
  // Returns true if the file holds any op. Unreadable or non-ELF files are skipped.
  bool plan_file(const std::string& path);

  // Attaches the dlopen hook in a dynamic loader (ld-linux*.so), once per file. Returns why
  // the hook could not be attached ("" when it was, or when the file has no hook to attach).
  std::string plan_loader(const std::string& path);

  // Reads the process's maps and plans its probed libraries and its executable (cudart may be
  // linked statically). Returns false if the process is gone. `mapped`, when given, receives
  // the probed files the process maps (what its layers are traced through).
  bool plan_process(uint32_t pid, std::vector<const ProbedFile*>* mapped = nullptr);

  const std::vector<ProbedFile>& probed_files() const { return probed_; }
  // The file most likely to have made a call of an op id: of the files it was probed in, the
  // one with the fewest layers (cudaMalloc is in libcudart, and in libnccl's static copy of
  // it: libcudart is the CUDA runtime's own file). nullptr if none.
  const ProbedFile* file_of_op(uint64_t op_id) const;
  const ProbeSet& probes() const { return probes_; }
  // Whether a planned process was seen mapping a probed file.
  bool found_in_target() const { return found_in_target_; }
  // Why the first dynamic loader's hook could not be attached ("" if none failed).
  const std::string& loader_error() const { return loader_error_; }
  // Where a function name was found, for `doctor` and the summary.
  size_t total_probes() const;

 private:
  bool matches(const std::string& path) const;

  CallTracer& tracer_;
  ProbeSet probes_;
  std::set<std::string> seen_;     // "dev:inode" of files already examined
  std::set<std::string> loaders_;  // "dev:inode" of loaders with the hook
  std::string loader_error_;
  std::vector<ProbedFile> probed_;
  std::map<std::string, size_t> probed_keys_;  // "dev:inode" -> index in probed_
  std::unordered_map<uint64_t, std::vector<size_t>> files_of_op_;  // op id -> probed_ indices
  bool found_in_target_ = false;
};

}  // namespace eacgm
