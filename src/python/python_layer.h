// The python layer's control side: finds CPython interpreters in traced processes, attaches the
// eval probes with each build's layout, answers the BPF side's questions about code objects,
// and undoes the eval-frame hook in processes that outlive the recording.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "events.h"
#include "probe/call_tracer.h"
#include "python/cpython_build.h"

namespace eacgm {

class PythonLayer {
 public:
  // `calls`: probe CPython's eval function to record Python calls (without it, only the Python
  // stacks of other layers' calls are read, from the interpreter's thread states: no probe per
  // Python call). `hook`: with calls, set the eval-frame hook in 3.11+ processes (without it,
  // only Python calls entered from C are seen there; see --python-no-hook).
  PythonLayer(CallTracer& tracer, bool calls, bool hook);

  // Attaches to a CPython interpreter file (executable or libpython), once per file. Returns
  // false when the file is no CPython; an unsupported version is reported once (warnings()).
  bool plan_file(const std::string& path);
  // Plans every CPython file the process maps, and tells the BPF side where its _PyRuntime is.
  // Returns the interpreter it runs (valid until the next plan), or null when it runs none.
  const CPythonBuild* plan_process(uint32_t pid);
  // The libpython a dynamically linked python executable will load, found before it runs (so
  // that the probes are in place from its first call): DT_NEEDED through DT_RUNPATH/RPATH.
  void plan_program(const std::string& program);

  void set_verdict(const eacgm_py_code_key& key, uint32_t verdict);
  // Writes the eval-frame hook a process asked for, unless it has a hook of its own already.
  void install_hook(const eacgm_py_hook_event& request);
  void forget(uint32_t pid);

  // Puts back interp->eval_frame = NULL where eacgm set it and the process still runs.
  // Returns how many hooks were removed.
  int restore_hooks();

  // CPython builds attached to ("path (3.11.7)"), and problems to tell the user.
  const std::vector<std::string>& interpreters() const { return interpreters_; }
  std::vector<std::string> warnings() const;

 private:
  void hook_running(uint32_t pid, const CPythonBuild& build, uint64_t runtime, uint64_t eval_addr);

  CallTracer& tracer_;
  bool calls_;
  bool hook_;
  int layouts_fd_, procs_fd_, codes_fd_;
  std::map<std::string, int> files_;  // "dev:inode" -> layout index, -1: not traceable
  std::vector<CPythonBuild> builds_;  // by layout index
  std::vector<std::string> interpreters_;
  std::vector<std::string> problems_;
  int hook_failures_ = 0;  // in processes that have exited
};

}  // namespace eacgm
