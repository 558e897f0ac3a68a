// The CPU and off-CPU profiles of a recording (record --sample-hz): each sample's stack with
// Python and native frames together, for `report`, `export --pprof` and the page.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace eacgm {

class RecordingReader;

// A native function without a symbol (see Symbolizer::frame_at: "fn@0x...", "unknown+0x..."):
// only an address, and likely built without frame pointers, so that a frame-pointer walk above
// it is not to be trusted.
bool unnamed_native(std::string_view name);

struct ProfileFrame {
  std::string name;   // Python: module.qualname; native: the function (or unknown+0x...)
  std::string file;   // Python: the source file; native: the module (file name of the code)
  int64_t line = -1;  // Python: the line executing; -1: unknown or native
  bool python = false;
};

// One sample's stack, innermost frame first. Where a thread runs Python, its native frames go
// from the leaf up to the interpreter's eval loop, then its Python frames follow: the native
// frames under the Python ones are the interpreter's own. Code without frame pointers breaks
// the native walk above it: past the innermost frame (always right), the native frames stop at
// the first one that cannot be named.
enum class ProfileKind {
  Cpu,     // stack_samples: where threads ran, one sample per period of CPU
  OffCpu,  // offcpu_samples: where threads blocked, weighted by the time they stand for
};

class CpuProfile {
 public:
  // Reads the recording's samples of that kind; empty when it has none (an older recording, or
  // no profile).
  explicit CpuProfile(const RecordingReader& rec, ProfileKind kind = ProfileKind::Cpu);

  struct Sample {
    uint64_t ts_ns = 0;
    uint32_t pid = 0, tid = 0;
    uint32_t stack = 0;   // index into stacks()
    uint64_t weight = 1;  // Cpu: 1 (a sample); OffCpu: nanoseconds of waiting it stands for
  };
  ProfileKind kind() const { return kind_; }
  bool empty() const { return samples_.empty(); }
  // The samples' weights summed: Cpu, the samples; OffCpu, nanoseconds blocked.
  uint64_t total_weight() const { return total_weight_; }
  const std::vector<Sample>& samples() const { return samples_; }
  const std::vector<std::vector<uint32_t>>& stacks() const { return stacks_; }  // frame indices
  const std::vector<ProfileFrame>& frames() const { return frames_; }
  // Samples per second of CPU (the recording's sample_hz; 0 when not said).
  uint32_t hz() const { return hz_; }

  // Functions by the weight of the samples they were the innermost frame in (self), and in any
  // frame (total, counted once per sample), the most self first. Python functions are told
  // apart by file.
  struct Function {
    std::string name, where;  // where: the Python file, or the native module
    bool python = false;
    uint64_t self = 0, total = 0;
  };
  std::vector<Function> functions() const;
  // A bounded list for reports: the `n` most self and the `n` most total, in functions()'
  // order. By self alone, a caller whose time is all in its callees (a Python function calling
  // C) falls out behind the many leaves of a stripped binary (`unknown+0x...`), whatever its
  // total.
  std::vector<Function> top_functions(size_t n) const;

  // Threads by the weight of their samples, the most first, each with its heaviest stack's
  // innermost Python function and innermost native one: which threads ran (or waited), and
  // where. A training job's off-CPU time is mostly idle helper threads waiting for work; this
  // tells them from the thread that waited in the step.
  struct Thread {
    uint32_t pid = 0, tid = 0;
    std::string name;  // from the recording's threads table; empty if it has none
    uint64_t weight = 0;
    std::string python, native;  // empty: that stack has no frame of the kind
  };
  std::vector<Thread> threads() const;

 private:
  std::vector<Sample> samples_;
  std::vector<std::vector<uint32_t>> stacks_;
  std::vector<ProfileFrame> frames_;
  std::map<std::pair<uint32_t, uint32_t>, std::string> thread_names_;
  uint32_t hz_ = 0;
  uint64_t total_weight_ = 0;
  ProfileKind kind_ = ProfileKind::Cpu;
};

// `eacgm report`'s section: the top functions by self weight with their totals, or nothing when
// the recording has no profile of that kind.
// An off-CPU profile's thread that waits for work (a pool's idle worker, a launcher in wait4):
// on the CPU under 5% of the time it blocked.
bool is_idle_thread(double cpu_seconds, uint64_t blocked_ns);

// For the off-CPU profile, `on_cpu` (the same recording's CPU profile) puts the threads that ran
// before the idle ones, which are summed in one line.
void print_cpu_profile(const CpuProfile& profile, FILE* out, size_t top = 15,
                       const CpuProfile* on_cpu = nullptr);

}  // namespace eacgm
