// Planning the python layer: CPython files and the BPF maps that describe them.
#include "python/python_layer.h"

#include <bpf/bpf.h>
#include <gelf.h>
#include <libelf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <cerrno>
#include <filesystem>

#include "probe/proc_maps.h"
#include "python/layouts.h"
#include "util/error.h"
#include "util/file_key.h"
#include "util/file_descriptor.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

// DT_NEEDED libpython* of an ELF executable and its DT_RUNPATH/DT_RPATH folders.
void needed_libpython(const std::string& path, std::string& needed, std::vector<std::string>& dirs) {
  FileDescriptor fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 || elf_version(EV_CURRENT) == EV_NONE) return;
  Elf* elf = elf_begin(fd.get(), ELF_C_READ, nullptr);
  if (!elf) return;
  for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf, scn));) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNAMIC) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; ++i) {
      GElf_Dyn dyn;
      if (!gelf_getdyn(data, int(i), &dyn)) break;
      const char* s = nullptr;
      if (dyn.d_tag == DT_NEEDED || dyn.d_tag == DT_RUNPATH || dyn.d_tag == DT_RPATH)
        s = elf_strptr(elf, sh.sh_link, dyn.d_un.d_val);
      if (!s) continue;
      std::string v(s);
      if (dyn.d_tag == DT_NEEDED && v.starts_with("libpython")) needed = v;
      if (dyn.d_tag != DT_NEEDED) {
        size_t start = 0;
        while (start <= v.size()) {
          size_t end = v.find(':', start);
          if (end == std::string::npos) end = v.size();
          std::string dir = v.substr(start, end - start);
          if (dir.starts_with("$ORIGIN"))
            dir = fs::path(path).parent_path().string() + dir.substr(7);
          if (!dir.empty()) dirs.push_back(dir);
          start = end + 1;
        }
      }
    }
  }
  elf_end(elf);
}

}  // namespace

PythonLayer::PythonLayer(CallTracer& tracer, bool calls, bool hook)
    : tracer_(tracer),
      calls_(calls),
      hook_(calls && hook),
      layouts_fd_(tracer.map_fd("py_layouts")),
      procs_fd_(tracer.map_fd("py_procs")),
      codes_fd_(tracer.map_fd("py_codes")) {
  if (layouts_fd_ < 0 || procs_fd_ < 0 || codes_fd_ < 0)
    fail("the BPF object has no python layer maps (eacgm binary and BPF object from different "
         "builds?)");
}

bool PythonLayer::plan_file(const std::string& path) {
  std::string key = file_key(path);
  if (key.empty()) return false;
  if (auto it = files_.find(key); it != files_.end()) return it->second >= 0;
  files_[key] = -1;
  std::optional<CPythonBuild> build = inspect_cpython(path);
  if (!build) return false;
  if (!build->layout) {
    problems_.push_back(build->unsupported_message());
    return false;
  }
  for (const std::string& note : build->layout_notes) problems_.push_back(note);
  if (builds_.size() >= EACGM_PY_MAX_LAYOUTS) {
    problems_.push_back(fmt::format("layer python: more than {} CPython builds; {} is not traced",
                                    EACGM_PY_MAX_LAYOUTS, path));
    return false;
  }
  uint32_t index = uint32_t(builds_.size());
  set_read_spans(*build->layout);
  if (bpf_map_update_elem(layouts_fd_, &index, &*build->layout, BPF_ANY) != 0)
    fail("cannot store the CPython layout of {}: {}", path, errno_text(errno));
  std::string err;
  if (calls_) err = tracer_.attach_python_eval(path, build->eval_file_offset, index);
  if (!err.empty()) {
    problems_.push_back(fmt::format("layer python: cannot probe _PyEval_EvalFrameDefault in {}: {}",
                                    path, err));
    return false;
  }
  files_[key] = int(index);
  interpreters_.push_back(fmt::format("{} ({})", build->path, build->version()));
  builds_.push_back(std::move(*build));
  return true;
}

const CPythonBuild* PythonLayer::plan_process(uint32_t pid) {
  auto maps = read_proc_maps(int(pid));
  if (!maps) return nullptr;
  const CPythonBuild* runs = nullptr;
  std::error_code ec;
  std::string exe = fs::read_symlink(fmt::format("/proc/{}/exe", pid), ec).string();
  for (const Mapping& m : *maps) {
    if (!m.file_backed() || !m.executable || m.deleted) continue;
    if (m.path != exe && !looks_like_cpython(m.path)) continue;
    std::string path = fmt::format("/proc/{}/root{}", pid, m.path);
    if (!fs::exists(path, ec)) path = m.path;
    if (!plan_file(path)) continue;
    // Where its _PyRuntime is, for stacks of threads that make calls before their next Python
    // call (the eval probe records it too, from its own address, on its first hit).
    int index = files_[file_key(path)];
    const CPythonBuild& b = builds_[size_t(index)];
    if (b.eval_file_offset < m.file_offset || b.eval_file_offset >= m.file_offset + (m.end - m.start))
      continue;
    uint64_t bias = m.start + (b.eval_file_offset - m.file_offset) - b.eval_vaddr;
    eacgm_py_process p{};
    p.runtime = bias + b.runtime_vaddr;
    p.layout = uint32_t(index);
    if (bpf_map_update_elem(procs_fd_, &pid, &p, BPF_NOEXIST) == 0) tracer_.python_process_added();
    if (hook_ && b.layout->version >= 311 && b.layout->interp_eval_frame) hook_running(pid, b, p.runtime, bias + b.eval_vaddr);
    if (!runs) runs = &b;
  }
  return runs;
}

// A process already running Python (-p, or planned after start-up) may never enter the eval
// function again by itself: 3.11 inlines its calls. So its hook is written now, from userspace,
// when its main interpreter exists; the BPF side asks for it at its first eval call otherwise.
void PythonLayer::hook_running(uint32_t pid, const CPythonBuild& b, uint64_t runtime,
                               uint64_t eval_addr) {
  eacgm_py_process p{};
  if (bpf_map_lookup_elem(procs_fd_, &pid, &p) != 0 || p.hook != EACGM_PY_HOOK_NONE) return;
  uint64_t interp = 0;
  iovec local{&interp, sizeof(interp)};
  iovec remote{reinterpret_cast<void*>(runtime + b.layout->runtime_interp_main), sizeof(interp)};
  if (process_vm_readv(pid_t(pid), &local, 1, &remote, 1, 0) != sizeof(interp) || !interp) return;
  p.hook_addr = interp + b.layout->interp_eval_frame;
  p.hook_value = eval_addr;
  p.hook = EACGM_PY_HOOK_REQUESTED;
  bpf_map_update_elem(procs_fd_, &pid, &p, BPF_EXIST);
  install_hook({EACGM_REC_PY_HOOK, pid, p.hook_addr, p.hook_value});
}

void PythonLayer::plan_program(const std::string& program) {
  if (plan_file(program)) return;
  std::string needed;
  std::vector<std::string> dirs;
  needed_libpython(program, needed, dirs);
  if (needed.empty()) return;
  const char* ldp = getenv("LD_LIBRARY_PATH");
  std::string extra = ldp ? ldp : "";
  for (size_t start = 0; start < extra.size();) {
    size_t end = extra.find(':', start);
    if (end == std::string::npos) end = extra.size();
    dirs.insert(dirs.begin(), extra.substr(start, end - start));
    start = end + 1;
  }
  for (const char* d : {"/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib"}) dirs.push_back(d);
  std::error_code ec;
  for (const auto& dir : dirs)
    if (fs::exists(fs::path(dir) / needed, ec)) {
      plan_file(fs::canonical(fs::path(dir) / needed, ec).string());
      return;
    }
}

void PythonLayer::set_verdict(const eacgm_py_code_key& key, uint32_t verdict) {
  bpf_map_update_elem(codes_fd_, &key, &verdict, BPF_ANY);
}

void PythonLayer::install_hook(const eacgm_py_hook_event& r) {
  if (!hook_) return;  // --python-no-hook: the request stays unanswered, and is not repeated
  uint32_t pid = r.pid;
  uint64_t current = 0;
  iovec local{&current, sizeof(current)};
  iovec remote{reinterpret_cast<void*>(r.hook_addr), sizeof(current)};
  uint32_t result = EACGM_PY_HOOK_FAILED;
  if (process_vm_readv(pid_t(pid), &local, 1, &remote, 1, 0) == sizeof(current)) {
    if (current != 0) {
      result = EACGM_PY_HOOK_THEIRS;  // a debugger's or JIT's hook already routes every call
    } else {
      uint64_t value = r.hook_value;
      iovec src{&value, sizeof(value)};
      if (process_vm_writev(pid_t(pid), &src, 1, &remote, 1, 0) == sizeof(value))
        result = EACGM_PY_HOOK_OURS;
    }
  }
  eacgm_py_process p{};
  if (bpf_map_lookup_elem(procs_fd_, &pid, &p) != 0) return;  // gone meanwhile
  p.hook = result;
  bpf_map_update_elem(procs_fd_, &pid, &p, BPF_EXIST);
}

void PythonLayer::forget(uint32_t pid) {
  eacgm_py_process p{};
  if (bpf_map_lookup_elem(procs_fd_, &pid, &p) == 0 && p.hook == EACGM_PY_HOOK_FAILED)
    ++hook_failures_;
  bpf_map_delete_elem(procs_fd_, &pid);
}

int PythonLayer::restore_hooks() {
  int restored = 0;
  uint32_t pid = 0, next = 0;
  uint32_t* prev = nullptr;
  while (bpf_map_get_next_key(procs_fd_, prev, &next) == 0) {
    pid = next;
    prev = &pid;
    eacgm_py_process p{};
    if (bpf_map_lookup_elem(procs_fd_, &pid, &p) != 0 || p.hook != EACGM_PY_HOOK_OURS) continue;
    // Only if it still holds what eacgm wrote: the program may have set a hook of its own since.
    uint64_t value = 0, zero = 0;
    iovec local{&value, sizeof(value)}, remote{reinterpret_cast<void*>(p.hook_addr), sizeof(value)};
    if (process_vm_readv(pid_t(pid), &local, 1, &remote, 1, 0) != sizeof(value) ||
        value != p.hook_value)
      continue;
    iovec src{&zero, sizeof(zero)};
    if (process_vm_writev(pid_t(pid), &src, 1, &remote, 1, 0) == sizeof(zero)) ++restored;
  }
  return restored;
}

std::vector<std::string> PythonLayer::warnings() const {
  std::vector<std::string> out = problems_;
  uint32_t pid = 0, next = 0;
  uint32_t* prev = nullptr;
  int failed = hook_failures_;
  while (bpf_map_get_next_key(procs_fd_, prev, &next) == 0) {
    pid = next;
    prev = &pid;
    eacgm_py_process p{};
    if (bpf_map_lookup_elem(procs_fd_, &pid, &p) == 0 && p.hook == EACGM_PY_HOOK_FAILED) ++failed;
  }
  if (failed)
    out.push_back(fmt::format(
        "layer python: could not set the eval-frame hook in {} process(es) (kernel lockdown "
        "forbids bpf_probe_write_user?): Python-to-Python calls in CPython 3.11+ were not seen",
        failed));
  return out;
}

}  // namespace eacgm
