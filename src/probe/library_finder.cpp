// Finding the libraries a target uses (CUDA, NCCL) and attaching their probes.
#include "probe/library_finder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "events.h"
#include "probe/c10d_ops.h"
#include "probe/comm_ops.h"
#include "probe/cuda_ops.h"
#include "probe/elf_symbols.h"
#include "probe/function_exits.h"
#include "probe/proc_maps.h"
#include "util/error.h"
#include "util/file_key.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Paths of libraries in the ld.so cache (`ldconfig -p` lines "name (...) => path").
std::vector<std::string> ld_cache_paths() {
  std::vector<std::string> out;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen("/sbin/ldconfig -p 2>/dev/null", "r"), pclose);
  if (!p) return out;
  char line[4096];
  while (fgets(line, sizeof(line), p.get())) {
    std::string s(line);
    auto arrow = s.find("=> ");
    if (arrow == std::string::npos) continue;
    std::string path = s.substr(arrow + 3);
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
    if (looks_like_cuda_library(path)) out.push_back(path);
  }
  return out;
}

}  // namespace

bool looks_like_cuda_library(const std::string& path) {
  std::string base = fs::path(path).filename().string();
  // shared objects only: libcudart_static.a is linked into executables, found in their maps
  bool shared = base.find(".so") != std::string::npos;
  return shared && (base.starts_with("libcudart") || base.starts_with("libcuda.so"));
}

bool looks_like_gputime_library(const std::string& path) {
  std::string base = fs::path(path).filename().string();
  return base.starts_with("libeacgm_cupti") && base.find(".so") != std::string::npos;
}

std::string no_gpu_driver(const std::string& root) {
  std::error_code ec;
  if (fs::exists(root + "/proc/driver/nvidia/version", ec) || fs::exists(root + "/dev/nvidiactl", ec))
    return {};
  return "no NVIDIA driver on this machine (no /proc/driver/nvidia/version, no /dev/nvidiactl): "
         "CUDA calls fail before CUDA loads eacgm's injection library";
}

static bool looks_like_loader(const std::string& path) {
  std::string base = fs::path(path).filename().string();
  return base.starts_with("ld-linux") || base.starts_with("ld-musl");
}

std::string own_dynamic_loader() {
  if (auto maps = read_proc_maps(getpid()))
    for (const Mapping& m : *maps)
      if (m.file_backed() && looks_like_loader(m.path)) return m.path;
  return {};
}

namespace {

std::vector<std::string> candidate_libraries_matching(
    const std::string& ld_library_path,
    const std::vector<bool (*)(const std::string&)>& matchers) {
  auto wanted = [&](const std::string& path) {
    for (auto m : matchers)
      if (m(path)) return true;
    return false;
  };
  std::vector<std::string> dirs = split(ld_library_path, ':');
  for (const char* d : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                        "/usr/lib/x86_64-linux-gnu", "/usr/lib64"})
    dirs.emplace_back(d);
  std::vector<std::string> out;
  std::set<std::string> keys;
  auto add = [&](const std::string& path) {
    std::string key = file_key(path);
    if (!key.empty() && keys.insert(key).second) out.push_back(path);
  };
  for (const auto& dir : dirs) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (wanted(entry.path().string()) && entry.is_regular_file(ec)) add(entry.path().string());
    }
  }
  for (const auto& path : ld_cache_paths())
    if (wanted(path)) add(path);
  return out;
}

}  // namespace

std::vector<std::string> candidate_cuda_libraries(const std::string& ld_library_path) {
  return candidate_libraries_matching(ld_library_path, {&looks_like_cuda_library});
}

std::vector<std::string> candidate_libraries(const ProbeSet& set,
                                             const std::string& ld_library_path) {
  return candidate_libraries_matching(ld_library_path, set.library_matchers);
}

void add_cuda_probes(ProbeSet& set) {
  auto ops = cuda_ops();
  for (size_t i = 0; i < ops.size(); ++i)
    set.specs.push_back({ops[i].symbol, cuda_op_cookie(uint16_t(i))});
  set.library_matchers.push_back(&looks_like_cuda_library);
}

void add_comm_probes(ProbeSet& set) {
  auto ops = comm_ops();
  for (size_t i = 0; i < ops.size(); ++i)
    set.specs.push_back({ops[i].symbol, comm_op_cookie(uint16_t(i))});
  set.library_matchers.push_back(&looks_like_nccl_library);
}

// The file offsets of a function's exit instructions, from its code in the file.
static bool exit_offsets(const ElfSymbols& elf, const ElfSymbol& sym, uint64_t offset,
                         std::vector<CallTracer::ProbePoint::Exit>& out, std::string& why) {
  if (sym.size == 0 || sym.size > (1u << 20)) {
    why = "its symbol has no usable size, so its exits cannot be found";
    return false;
  }
  std::vector<uint8_t> code(sym.size);
  int fd = open(elf.path().c_str(), O_RDONLY | O_CLOEXEC);
  ssize_t got = fd >= 0 ? pread(fd, code.data(), code.size(), off_t(offset)) : -1;
  if (fd >= 0) close(fd);
  if (got != ssize_t(code.size())) {
    why = "its code could not be read";
    return false;
  }
  auto starts_function = [&elf](uint64_t target) {
    if (elf.in_plt(target)) return true;
    auto at = elf.symbol_at(target);
    return at && at->offset == 0;
  };
  auto exits = find_function_exits(code, sym.value, starts_function, &why);
  if (!exits) return false;
  for (const ExitPoint& e : exits->exits) {
    if (e.offset < INT16_MIN || e.offset > INT16_MAX) {
      why = fmt::format("its frame at {:#x} is too large to follow", e.address);
      return false;
    }
    uint64_t bits = EACGM_COOKIE_EXIT_INSN | (e.from_rbp ? EACGM_COOKIE_EXIT_RBP : 0) |
                    (uint64_t(uint16_t(int16_t(e.offset))) << EACGM_COOKIE_EXIT_OFFSET_SHIFT);
    out.push_back({offset + (e.address - sym.value), bits});
  }
  return true;
}

void add_c10d_probes(ProbeSet& set, std::function<void(const std::string& path)> use_layout) {
  auto ops = c10d_ops();
  for (size_t i = 0; i < ops.size(); ++i)
    set.specs.push_back({ops[i].symbol, c10d_op_cookie(uint16_t(i)), ProbeSpec::End::None});
  set.providers.push_back([use_layout](const ElfSymbols& elf) {
    if (elf.find_function(c10d_ops().front().symbol)) use_layout(elf.path());
    return std::vector<ProbeSpec>{};
  });
  set.library_matchers.push_back(&looks_like_torch_library);
}

void add_gputime_probes(ProbeSet& set) {
  set.specs.push_back(
      {"eacgm_gputime_batch", kGpuTimeOp | EACGM_COOKIE_GPU_BATCH, ProbeSpec::End::None});
  set.library_matchers.push_back(&looks_like_gputime_library);
}

void add_torch_probes(ProbeSet& set, std::shared_ptr<TorchOps> ops) {
  set.providers.push_back([ops](const ElfSymbols& elf) { return ops->probes_for(elf); });
  set.library_matchers.push_back(&looks_like_torch_library);
}

ProbePlanner::ProbePlanner(CallTracer& tracer, ProbeSet probes)
    : tracer_(tracer), probes_(std::move(probes)) {}

bool ProbePlanner::matches(const std::string& path) const {
  for (auto m : probes_.library_matchers)
    if (m(path)) return true;
  return false;
}

bool ProbePlanner::plan_file(const std::string& path) {
  std::string key = file_key(path);
  if (key.empty() || !seen_.insert(key).second) return false;
  std::unique_ptr<ElfSymbols> elf;
  try {
    elf = std::make_unique<ElfSymbols>(ElfSymbols::load(path));
  } catch (const Error&) {
    return false;  // not an ELF file, or unreadable: nothing to probe in it
  }
  ProbedFile file{path, 0, {}};
  std::vector<CallTracer::ProbePoint> points;
  std::vector<std::string_view> names;
  std::set<uint64_t> offsets;  // aliases (ncclAllReduce = pncclAllReduce) share one probe
  std::vector<ProbeSpec> specs = probes_.specs;
  for (const auto& provider : probes_.providers) {
    std::vector<ProbeSpec> more = provider(*elf);
    specs.insert(specs.end(), more.begin(), more.end());
  }
  for (const ProbeSpec& spec : specs) {
    const ElfSymbol* sym = elf->find_function(spec.symbol);
    if (!sym) continue;
    auto offset = elf->file_offset_of(sym->value);
    if (!offset) {
      file.errors.push_back(fmt::format("{}: address {:#x} is in no loadable segment",
                                        spec.symbol, sym->value));
      continue;
    }
    if (!offsets.insert(*offset).second) continue;
    std::vector<CallTracer::ProbePoint::Exit> exits;
    if (spec.end == ProbeSpec::End::ExitInstructions) {
      std::string why;
      if (!exit_offsets(*elf, *sym, *offset, exits, why)) {
        file.errors.push_back(fmt::format("{}: {}", spec.symbol, why));
        continue;
      }
    }
    points.push_back({*offset, spec.cookie, std::move(exits), spec.end == ProbeSpec::End::None,
                      probes_.duty_cycled && duty_cycled_op(spec.cookie & EACGM_COOKIE_OP_MASK)});
    names.push_back(spec.symbol);
  }
  std::vector<std::string> errors = tracer_.attach(path, points);
  for (size_t i = 0; i < errors.size(); ++i) {
    if (errors[i].empty()) {
      ++file.functions;
      uint64_t op = points[i].cookie & EACGM_COOKIE_OP_MASK;
      file.layers.insert(layer_of_op(op));
      files_of_op_[op].push_back(probed_.size());
    } else
      file.errors.push_back(fmt::format("{}: {}", names[i], errors[i]));
  }
  if (file.functions == 0 && file.errors.empty()) return false;
  probed_keys_.emplace(key, probed_.size());
  probed_.push_back(std::move(file));
  return true;
}

std::string ProbePlanner::plan_loader(const std::string& path) {
  std::string key = file_key(path);
  if (key.empty() || !loaders_.insert(key).second) return {};
  try {
    ElfSymbols elf = ElfSymbols::load(path);
    const ElfSymbol* hook = elf.find_function("_dl_debug_state");
    if (!hook) return {};  // another loader: new libraries are found by the periodic rescan
    if (auto offset = elf.file_offset_of(hook->value)) {
      std::string err = tracer_.attach_loader_hook(path, *offset);
      if (!err.empty() && loader_error_.empty()) loader_error_ = err;
      return err;
    }
  } catch (const Error&) {
  }
  return {};
}

const char* layer_of_op(uint64_t op_id) {
  if (op_id == kGpuTimeOp) return "gputime";
  if (op_id < kCommOpBase) return "cuda";
  return op_id < kTorchOpBase ? "comm" : "torch";
}

bool duty_cycled_op(uint64_t op_id) {
  std::string_view layer = layer_of_op(op_id);
  if (layer == "torch") return true;
  if (layer != "cuda" || op_id >= cuda_ops().size()) return false;
  // Allocations and frees pair by address, and kernel lookups name later launches: rare, and
  // what they teach the decoder must not be missed
  switch (cuda_ops()[op_id].kind) {
    case CallKind::Alloc:
    case CallKind::Free:
    case CallKind::KernelLookup:
    case CallKind::KernelToFunction:
      return false;
    default:
      return true;
  }
}

bool ProbePlanner::plan_process(uint32_t pid, std::vector<const ProbedFile*>* mapped) {
  auto maps = read_proc_maps(static_cast<int>(pid));
  if (!maps) return false;
  std::error_code ec;
  std::string exe = fs::read_symlink(fmt::format("/proc/{}/exe", pid), ec).string();
  std::set<std::string> done;
  std::vector<size_t> found;  // indices: probed_ may grow while the loop plans files
  for (const Mapping& m : *maps) {
    if (!m.file_backed() || !m.executable || m.deleted) continue;
    if (looks_like_loader(m.path)) {
      plan_loader(fmt::format("/proc/{}/root{}", pid, m.path));
      continue;
    }
    if (m.path != exe && !matches(m.path)) continue;
    if (!done.insert(m.path).second) continue;
    // through the process's root, so that libraries inside containers are found
    std::string path = fmt::format("/proc/{}/root{}", pid, m.path);
    if (!fs::exists(path, ec)) path = m.path;
    plan_file(path);
    if (auto it = probed_keys_.find(file_key(path)); it != probed_keys_.end()) {
      found_in_target_ = true;
      found.push_back(it->second);
    }
  }
  if (mapped)
    for (size_t i : found) mapped->push_back(&probed_[i]);
  return true;
}

const ProbedFile* ProbePlanner::file_of_op(uint64_t op_id) const {
  auto it = files_of_op_.find(op_id);
  if (it == files_of_op_.end()) return nullptr;
  const ProbedFile* best = nullptr;
  for (size_t i : it->second)
    if (!best || probed_[i].layers.size() < best->layers.size()) best = &probed_[i];
  return best;
}

size_t ProbePlanner::total_probes() const {
  size_t n = 0;
  for (const auto& f : probed_) n += f.functions;
  return n;
}

}  // namespace eacgm
