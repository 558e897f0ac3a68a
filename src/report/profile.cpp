// The CPU and off-CPU profiles read from stack_samples or offcpu_samples, native_stacks and
// python_stacks.
#include "report/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "store/reader.h"
#include "store/table_readers.h"

namespace eacgm {
namespace {

// The interpreter's eval loop: a native frame that runs Python frames.
bool is_eval_loop(const std::string& name) {
  return name.starts_with("_PyEval_EvalFrame") || name.starts_with("PyEval_EvalFrame");
}

}  // namespace

bool unnamed_native(std::string_view name) {
  return name.starts_with("unknown+") || name.starts_with("fn@");
}

CpuProfile::CpuProfile(const RecordingReader& rec, ProfileKind kind) : kind_(kind) {
  const char* table = kind == ProfileKind::Cpu ? "stack_samples" : "offcpu_samples";
  if (!rec.has_table(table)) return;
  std::string hz = rec.meta_or("sample_hz", "0");
  hz_ = uint32_t(std::clamp<long long>(std::atoll(hz.c_str()), 0, 1'000'000));

  std::map<std::tuple<std::string, std::string, int64_t, bool>, uint32_t> frame_ids;
  auto frame_id = [&](ProfileFrame f) {
    auto [it, fresh] = frame_ids.try_emplace({f.name, f.file, f.line, f.python},
                                             uint32_t(frames_.size()));
    if (fresh) frames_.push_back(std::move(f));
    return it->second;
  };
  // the stacks, as frame indices, innermost first (a damaged recording's depths may have gaps:
  // the frames are taken in depth order)
  std::unordered_map<int64_t, std::vector<uint32_t>> native, python;
  each_native_frame(rec, UINT32_MAX, [&](const NativeFrameRow& r) {
    native[r.id].push_back(frame_id({std::string(r.name), std::string(r.module), -1, false}));
  });
  each_python_frame(rec, [&](const PythonStackFrameRow& r) {
    python[r.id].push_back(frame_id({std::string(r.name), std::string(r.file), r.line, true}));
  });

  std::map<std::pair<int64_t, int64_t>, uint32_t> merged;  // (native, python) -> stack
  auto stack_of = [&](int64_t native_id, int64_t python_id) {
    auto [it, fresh] = merged.try_emplace({native_id, python_id}, uint32_t(stacks_.size()));
    if (!fresh) return it->second;
    std::vector<uint32_t> stack;
    auto n = native.find(native_id);
    auto p = python.find(python_id);
    if (p == python.end() || p->second.empty()) {
      if (n != native.end()) stack = n->second;
    } else {
      // the innermost native frame is always right; the frame-pointer walk above it holds
      // while each frame is a function eacgm could name, up to the interpreter's eval loop
      if (n != native.end())
        for (size_t i = 0; i < n->second.size(); ++i) {
          const ProfileFrame& f = frames_[n->second[i]];
          if (is_eval_loop(f.name) || (i > 0 && unnamed_native(f.name))) break;
          stack.push_back(n->second[i]);
        }
      stack.insert(stack.end(), p->second.begin(), p->second.end());
    }
    stacks_.push_back(std::move(stack));
    return it->second;
  };
  // an off-CPU weight is at most the recording's length: a damaged row's is clamped to an hour
  // a row, so that sums cannot overflow
  auto add = [&](uint64_t ts_ns, uint32_t pid, uint32_t tid, int64_t native_stack,
                 int64_t py_stack, uint64_t weight) {
    uint64_t w = std::min<uint64_t>(weight, 3'600'000'000'000);
    if (!w) return;
    samples_.push_back({ts_ns, pid, tid, stack_of(native_stack, py_stack), w});
    total_weight_ += w;
  };
  if (kind == ProfileKind::Cpu)
    each_stack_sample(rec, [&](const StackSampleRow& r) {
      add(r.ts_ns, r.pid, r.tid, r.native_stack, r.py_stack, 1);
    });
  else
    each_offcpu_sample(rec, [&](const OffCpuSampleRow& r) {
      add(r.ts_ns, r.pid, r.tid, r.native_stack, r.py_stack, r.weight_ns);
    });
  if (!samples_.empty())
    each_thread(rec, [&](const ThreadRow& t) { thread_names_[{t.pid, t.tid}] = t.name; });
}

std::vector<CpuProfile::Thread> CpuProfile::threads() const {
  std::map<std::pair<uint32_t, uint32_t>, std::unordered_map<uint32_t, uint64_t>> by;
  for (const auto& s : samples_) by[{s.pid, s.tid}][s.stack] += s.weight;
  std::vector<Thread> out;
  for (const auto& [id, stacks] : by) {
    Thread t{id.first, id.second, {}, 0, {}, {}};
    if (auto it = thread_names_.find(id); it != thread_names_.end()) t.name = it->second;
    uint32_t heaviest = 0;
    uint64_t most = 0;
    for (auto [stack, w] : stacks) {
      t.weight += w;
      if (w > most || (w == most && stack < heaviest)) heaviest = stack, most = w;
    }
    for (uint32_t f : stacks_[heaviest]) {
      const ProfileFrame& frame = frames_[f];
      std::string& slot = frame.python ? t.python : t.native;
      if (slot.empty()) slot = frame.name;
    }
    out.push_back(std::move(t));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Thread& a, const Thread& b) { return a.weight > b.weight; });
  return out;
}

std::vector<CpuProfile::Function> CpuProfile::functions() const {
  // per stack, how often it was sampled; then per function (name and where)
  std::vector<uint64_t> weight(stacks_.size(), 0);
  for (const auto& s : samples_) weight[s.stack] += s.weight;
  std::map<std::tuple<std::string, std::string, bool>, Function> by;
  auto fn = [&](uint32_t frame) -> Function& {
    const ProfileFrame& f = frames_[frame];
    Function& out = by[{f.name, f.file, f.python}];
    if (out.name.empty()) out.name = f.name, out.where = f.file, out.python = f.python;
    return out;
  };
  for (size_t i = 0; i < stacks_.size(); ++i) {
    if (!weight[i] || stacks_[i].empty()) continue;
    fn(stacks_[i][0]).self += weight[i];
    std::set<Function*> seen;  // recursion counts once per sample
    for (uint32_t f : stacks_[i])
      if (Function* p = &fn(f); seen.insert(p).second) p->total += weight[i];
  }
  std::vector<Function> out;
  for (auto& [key, f] : by) out.push_back(std::move(f));
  std::stable_sort(out.begin(), out.end(), [](const Function& a, const Function& b) {
    return a.self != b.self ? a.self > b.self : a.total > b.total;
  });
  return out;
}

std::vector<CpuProfile::Function> CpuProfile::top_functions(size_t n) const {
  std::vector<Function> all = functions();
  if (all.size() <= n) return all;
  std::vector<size_t> by_total(all.size());
  for (size_t i = 0; i < all.size(); ++i) by_total[i] = i;
  std::stable_sort(by_total.begin(), by_total.end(),
                   [&](size_t a, size_t b) { return all[a].total > all[b].total; });
  std::vector<bool> keep(all.size(), false);
  for (size_t i = 0; i < n; ++i) keep[i] = keep[by_total[i]] = true;
  std::vector<Function> out;
  for (size_t i = 0; i < all.size(); ++i)
    if (keep[i]) out.push_back(std::move(all[i]));
  return out;
}

bool is_idle_thread(double cpu_seconds, uint64_t blocked_ns) {
  return cpu_seconds < 0.05 * double(blocked_ns) / 1e9;
}

namespace {

// The idle threads in one line: how long they blocked, and where most of them did.
void print_idle_threads(const std::vector<const CpuProfile::Thread*>& idle, double n, FILE* out) {
  if (idle.empty()) return;
  uint64_t blocked = 0;
  std::map<std::string, uint64_t> by_where;
  for (const auto* t : idle) blocked += t->weight, by_where[t->native] += t->weight;
  std::vector<std::pair<uint64_t, std::string>> mostly;
  for (auto& [w, weight] : by_where)
    if (!w.empty()) mostly.emplace_back(weight, w);
  std::sort(mostly.rbegin(), mostly.rend());
  std::string names;
  for (size_t i = 0; i < mostly.size() && i < 3; ++i)
    names += (i ? ", " : "") + mostly[i].second;
  fmt::print(out,
             "{:>6.1f}% {:>10}  {} idle thread{} (on the CPU under 5% of the time blocked){}\n",
             100.0 * double(blocked) / n, fmt::format("{:.3f} s", double(blocked) / 1e9),
             idle.size(), idle.size() == 1 ? "" : "s", names.empty() ? "" : ": in " + names);
}

// The threads by weight (off-CPU, with the CPU profile at hand: those that also ran first,
// the idle ones in one line).
void print_threads(const CpuProfile& profile, const std::vector<CpuProfile::Thread>& threads,
                   const CpuProfile* on_cpu, FILE* out) {
  const bool off = profile.kind() == ProfileKind::OffCpu;
  const double n = double(profile.total_weight());
  // Off-CPU, with the CPU profile at hand: the threads that also ran first. Helpers waiting
  // for work (a pool's idle workers, a launcher in wait4) block for the whole run and would
  // otherwise hide the threads that waited inside the job's steps.
  const bool split = off && on_cpu && on_cpu->hz();
  std::map<std::pair<uint32_t, uint32_t>, double> ran_s;
  if (split)
    for (const auto& t : on_cpu->threads())
      ran_s[{t.pid, t.tid}] = double(t.weight) / on_cpu->hz();
  auto ran = [&](const CpuProfile::Thread& t) {
    auto it = ran_s.find({t.pid, t.tid});
    return it == ran_s.end() ? 0.0 : it->second;
  };
  std::vector<const CpuProfile::Thread*> shown_first, idle;
  for (const auto& t : threads)
    (split && is_idle_thread(ran(t), t.weight) ? idle : shown_first).push_back(&t);
  auto where = [](const CpuProfile::Thread& t) {
    return t.python.empty()   ? t.native
           : t.native.empty() ? t.python
                              : t.python + " > " + t.native;
  };
  fmt::print(out, "  By thread ({}{} where its {} stack was):\n",
             off            ? "seconds blocked"
             : profile.hz() ? "seconds of CPU"
                            : "samples",
             split ? "; the threads that ran first, with their CPU seconds;" : ",",
             off ? "longest-waiting" : "most sampled");
  const size_t shown = std::min<size_t>(shown_first.size(), 8);
  for (size_t i = 0; i < shown; ++i) {
    const auto& t = *shown_first[i];
    std::string amount = off             ? fmt::format("{:.3f} s", double(t.weight) / 1e9)
                         : profile.hz() ? fmt::format("{:.2f} s", double(t.weight) / profile.hz())
                                        : fmt::format("{}", t.weight);
    if (split)
      amount = fmt::format("{:>10}  {:>11}", amount, fmt::format("ran {:.2f} s", ran(t)));
    fmt::print(out, "{:>6.1f}% {:>10}  pid {} tid {}{}  {}\n", 100.0 * double(t.weight) / n,
               amount, t.pid, t.tid, t.name.empty() ? "" : " (" + t.name + ")", where(t));
  }
  if (shown_first.size() > shown) {
    uint64_t rest = 0;
    for (size_t i = shown; i < shown_first.size(); ++i) rest += shown_first[i]->weight;
    fmt::print(out, "{:>6.1f}% {:>10}  {} more threads\n", 100.0 * double(rest) / n, "",
               shown_first.size() - shown);
  }
  print_idle_threads(idle, n, out);
}

}  // namespace

void print_cpu_profile(const CpuProfile& profile, FILE* out, size_t top, const CpuProfile* on_cpu) {
  if (profile.empty()) return;
  const auto threads = profile.threads();
  const bool off = profile.kind() == ProfileKind::OffCpu;
  const double n = double(profile.total_weight());
  const std::string of_threads =
      fmt::format("{} thread{}", threads.size(), threads.size() == 1 ? "" : "s");
  if (off)
    fmt::print(out,
               "\nOff-CPU profile ({} samples of {}, {:.2f} s blocked: sleeps, locks, I/O, "
               "waits; self: where it blocked, total: anywhere in the stack):\n",
               profile.samples().size(), of_threads, n / 1e9);
  else
    fmt::print(out,
               "\nCPU profile ({} samples of {}{}; self: the innermost frame, total: "
               "anywhere in the stack):\n",
               profile.samples().size(), of_threads,
               profile.hz() ? fmt::format(" at {} Hz, {:.2f} s of CPU", profile.hz(),
                                          n / double(profile.hz()))
                            : "");
  fmt::print(out, "{:>7} {:>7}  {:<6} {}\n", "self", "total", "kind", "function");
  auto functions = profile.functions();
  auto line = [&](const CpuProfile::Function& f) {
    std::string where = f.where.empty() ? "" : fmt::format("  ({})", f.where);
    std::string seconds = off ? fmt::format("  {:.3f} s", double(f.total) / 1e9) : "";
    fmt::print(out, "{:>6.1f}% {:>6.1f}%  {:<6} {}{}{}\n", 100.0 * double(f.self) / n,
               100.0 * double(f.total) / n, f.python ? "python" : "native", f.name, where, seconds);
  };
  for (size_t i = 0; i < functions.size() && i < top; ++i) line(functions[i]);
  // Python code mostly calls into C, so its functions have little self time: by total too
  std::vector<const CpuProfile::Function*> python;
  for (const auto& f : functions)
    if (f.python) python.push_back(&f);
  std::stable_sort(python.begin(), python.end(),
                   [](const auto* a, const auto* b) { return a->total > b->total; });
  if (!python.empty()) {
    fmt::print(out, "  Python functions by total:\n");
    for (size_t i = 0; i < python.size() && i < 8; ++i) line(*python[i]);
  }
  if (threads.size() > 1) print_threads(profile, threads, on_cpu, out);
  fmt::print(out,
             "  (eacgm export --pprof for every frame: go tool pprof{}, speedscope, "
             "Pyroscope)\n",
             off ? " -sample_index=off_cpu" : "");
}

}  // namespace eacgm
