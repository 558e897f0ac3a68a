// Loads bpf/calls.bpf.c through its skeleton, attaches uprobes, and drains its ring buffer.
#include "probe/call_tracer.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <functional>

#include "calls.skel.h"
#include "events.h"
#include "probe/link_release.h"
#include "util/error.h"
#include "util/privileges.h"

namespace eacgm {
namespace {

// While the programs load, libbpf's warnings (the verifier's log of a refused program) are
// kept here instead of printed: the error then says in one line what the verifier said, and a
// caller that goes on without a layer prints no log of hundreds of lines (EACGM_DEBUG_BPF=1
// prints them as they come).
std::string* load_log = nullptr;

// libbpf prints its own diagnostics; keep warnings and errors, and only when asked for debug.
int libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
  static const bool debug = getenv("EACGM_DEBUG_BPF") != nullptr;
  if (level == LIBBPF_DEBUG && !debug) return 0;
  if (level == LIBBPF_INFO && !debug) return 0;
  if (load_log && !debug) {
    char line[1024];
    vsnprintf(line, sizeof(line), format, args);
    if (load_log->size() < (1u << 20)) *load_log += line;
    return 0;
  }
  return vfprintf(stderr, format, args);
}

// Whether the running kernel is at least major.minor.
bool kernel_at_least(int major, int minor) {
  utsname u{};
  int ma = 0, mi = 0;
  if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &ma, &mi) != 2) return true;  // (unknown)
  return ma > major || (ma == major && mi >= minor);
}

// From the kernel's uapi (6.6+); Debian 12's headers predate uprobe_multi links.
constexpr uint32_t kTraceUprobeMulti = 48;  // BPF_TRACE_UPROBE_MULTI
constexpr uint32_t kUprobeMultiReturn = 1;  // BPF_F_UPROBE_MULTI_RETURN
constexpr uint32_t kTraceUprobeSession = 57;  // BPF_TRACE_UPROBE_SESSION (6.10+)

// What this kernel's BTF says of its uprobes: uprobe_multi links (6.6+: their link type, or
// the function that makes them, as `eacgm doctor` looks), and session uprobes (6.10+: one
// program at entry and return, the entry able to skip the return; their kfunc). Read once.
struct KernelUprobes {
  bool multi = false, sessions = false;
};
KernelUprobes kernel_uprobes() {
  KernelUprobes k;
  btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return k;
  k.multi = btf__find_by_name_kind(vmlinux, "bpf_uprobe_multi_link", BTF_KIND_STRUCT) >= 0 ||
            btf__find_by_name_kind(vmlinux, "bpf_uprobe_multi_link_attach", BTF_KIND_FUNC) >= 0;
  k.sessions = btf__find_by_name_kind(vmlinux, "bpf_session_is_return", BTF_KIND_FUNC) >= 0;
  btf__free(vmlinux);
  return k;
}

// Kernel errors that say it makes no uprobe_multi links at all (not that one point is bad).
bool refuses_multi_links(int err) { return err == EOPNOTSUPP || err == ENOSYS; }

// The BPF_LINK_CREATE member of union bpf_attr, in its uprobe_multi form.
union UprobeMultiAttr {
  struct {
    uint32_t prog_fd;
    uint32_t target_fd;
    uint32_t attach_type;
    uint32_t link_flags;
    uint64_t path;
    uint64_t offsets;
    uint64_t ref_ctr_offsets;
    uint64_t cookies;
    uint32_t cnt;
    uint32_t flags;
    uint32_t pid;
  } link;
  uint8_t bytes[128];
};

// A uprobe_multi (or session) link of `prog` on `path` at `offsets`; the fd, or -1 and errno.
int create_multi_link(bpf_program* prog, uint32_t attach_type, const std::string& path,
                      const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies,
                      uint32_t flags) {
  UprobeMultiAttr attr{};
  attr.link.prog_fd = uint32_t(bpf_program__fd(prog));
  attr.link.attach_type = attach_type;
  attr.link.path = reinterpret_cast<uint64_t>(path.c_str());
  attr.link.offsets = reinterpret_cast<uint64_t>(offsets.data());
  attr.link.cookies = reinterpret_cast<uint64_t>(cookies.data());
  attr.link.cnt = uint32_t(offsets.size());
  attr.link.flags = flags;
  return int(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr)));
}

std::string load_error_hint(int err, const std::string& log = {}) {
  // With the privileges (checked before loading), EACCES is the verifier refusing a program,
  // and E2BIG its giving up on one (a million instructions verified)
  if ((err == EACCES || err == E2BIG) && current_privileges().missing_for_tracing().empty()) {
    std::string reason = verifier_reason(log);
    std::string said = reason.empty() ? "" : fmt::format(" ({})", reason);
    utsname u{};
    uname(&u);
    if (!kernel_at_least(6, 6))
      return fmt::format("the kernel's BPF verifier refused a program{}: eacgm needs Linux 6.6 "
                         "or newer, this is {} (run 'eacgm doctor')", said, u.release);
    return fmt::format("the kernel's BPF verifier (Linux {}) refused a program{}: a bug of "
                       "eacgm on this kernel; please report it with the log that "
                       "EACGM_DEBUG_BPF=1 prints",
                       u.release, said);
  }
  if (err == EPERM || err == EACCES)
    return "permission denied (run as root, or grant CAP_BPF and CAP_PERFMON)";
  if (err == ENOENT || err == EINVAL)
    return "the kernel rejected the program (needs BTF at /sys/kernel/btf/vmlinux and "
           "uprobes; run 'eacgm doctor')";
  return errno_text(err);
}

}  // namespace

static constexpr std::string_view kLoadLead = "cannot load the BPF programs: ";

std::string load_refusal(const std::string& error) {
  return error.starts_with(kLoadLead) ? error.substr(kLoadLead.size()) : error;
}

std::string verifier_reason(const std::string& log) {
  std::string prog, last;
  size_t at = 0;
  bool in_log = false;
  while (at < log.size()) {
    size_t end = log.find('\n', at);
    if (end == std::string::npos) end = log.size();
    std::string line = log.substr(at, end - at);
    at = end + 1;
    if (line.find("-- BEGIN PROG LOAD LOG --") != std::string::npos) {
      in_log = true;
      continue;
    }
    if (line.find("-- END PROG LOAD LOG --") != std::string::npos) {
      if (!last.empty()) break;
      in_log = false;
      continue;
    }
    if (auto p = line.find("prog '"); prog.empty() && p != std::string::npos)
      if (auto q = line.find('\'', p + 6); q != std::string::npos) prog = line.substr(p + 6, q - p - 6);
    if (in_log && !line.empty() && !line.starts_with("processed ") &&
        !line.starts_with("verification time"))
      last = line;
  }
  if (last.empty()) return {};
  if (last.size() > 200) last = last.substr(0, 200) + "...";
  return prog.empty() ? last : fmt::format("program {}: {}", prog, last);
}

void CallTracer::SkeletonDeleter::operator()(calls_bpf* s) const { calls_bpf__destroy(s); }
void CallTracer::RingDeleter::operator()(ring_buffer* r) const { ring_buffer__free(r); }
void CallTracer::LinkDeleter::operator()(bpf_link* l) const { bpf_link__destroy(l); }

CallTracer::CallTracer(const CallTracerOptions& options) {
  libbpf_set_print(libbpf_print);
  skel_.reset(calls_bpf__open());
  if (!skel_) fail("cannot open the BPF programs: {}", load_error_hint(errno));
  skel_->rodata->filter_mode = options.trace_all ? EACGM_FILTER_ALL : EACGM_FILTER_PIDS;
  skel_->rodata->wakeup_bytes = options.wakeup_bytes;
  skel_->rodata->python_enabled = options.python;
  skel_->rodata->py_stack_depth = options.python_stack_depth;
  if (int err = bpf_map__set_max_entries(skel_->maps.events, options.ring_bytes); err)
    fail("cannot size the ring buffer to {} bytes: {}", options.ring_bytes, errno_text(-err));
  trace_all_ = options.trace_all;
  for (bpf_program* p : {skel_->progs.call_entry_multi, skel_->progs.call_return_multi,
                         skel_->progs.call_exit_multi, skel_->progs.loader_update_multi})
    bpf_program__set_expected_attach_type(p, static_cast<bpf_attach_type>(kTraceUprobeMulti));
  // The perf-event programs (call_entry, call_return, call_exit) are for kernels without
  // uprobe_multi links. The entry one reads Python stacks, which costs the kernel's verifier
  // ~65 ms of CPU at every start here (~1.3 s until session 74, see py_walk_frame): where the
  // kernel's BTF shows multi links they are not loaded, and a file whose points cannot be
  // attached together is attached a point at a time with multi links. EACGM_NO_UPROBE_MULTI=1:
  // the perf-event programs only (what a kernel before 6.6 gets; to compare, or to step around
  // a kernel bug).
  const KernelUprobes kernel = kernel_uprobes();
  if (getenv("EACGM_NO_UPROBE_MULTI")) {
    multi_supported_ = false;
  } else if (kernel.multi) {
    per_event_loaded_ = false;
    for (bpf_program* p : {skel_->progs.call_entry, skel_->progs.call_return,
                           skel_->progs.call_exit})
      bpf_program__set_autoload(p, false);
  }
  // EACGM_NO_UPROBE_SESSIONS=1: the uprobe and uretprobe pair even where sessions exist (to
  // compare, or to step around a kernel bug)
  session_supported_ = options.python && !getenv("EACGM_NO_UPROBE_SESSIONS") &&
                       kernel.sessions;
  if (session_supported_)
    bpf_program__set_expected_attach_type(skel_->progs.py_eval_session,
                                          static_cast<bpf_attach_type>(kTraceUprobeSession));
  else
    bpf_program__set_autoload(skel_->progs.py_eval_session, false);
  sample_hz_ = options.sample_hz;
  if (!sample_hz_) bpf_program__set_autoload(skel_->progs.sample_cpu, false);
  off_cpu_ = options.off_cpu && sample_hz_;
  if (off_cpu_)
    skel_->rodata->offcpu_period_ns = 1'000'000'000ull / sample_hz_;
  else
    bpf_program__set_autoload(skel_->progs.offcpu_switch, false);
  std::string log;
  load_log = &log;
  int err = calls_bpf__load(skel_.get());
  load_log = nullptr;
  // (tests: the python layer's programs refused as a kernel's verifier would, to check that a
  // recording goes on without them and says why)
  if (!err && options.python && getenv("EACGM_TEST_REFUSE_PYTHON")) {
    err = -EACCES;
    log = "libbpf: prog 'call_entry_multi': BPF program load failed: Permission denied\n"
          "libbpf: prog 'call_entry_multi': -- BEGIN PROG LOAD LOG --\n"
          "refused for the test (EACGM_TEST_REFUSE_PYTHON)\n"
          "-- END PROG LOAD LOG --\n";
  }
  if (err) fail("{}{}", kLoadLead, load_error_hint(-err, log));

  // The process-tree tracepoints; the uprobes are attached per library later.
  struct {
    bpf_program* prog;
    const char* what;
  } tracepoints[] = {{skel_->progs.proc_fork, "sched_process_fork"},
                     {skel_->progs.proc_exec, "sched_process_exec"},
                     {skel_->progs.proc_exit, "sched_process_exit"}};
  for (auto& tp : tracepoints) {
    bpf_link* link = bpf_program__attach(tp.prog);
    if (!link) fail("cannot attach to the {} tracepoint: {}", tp.what, load_error_hint(errno));
    base_.links.emplace_back(link);
  }

  auto on_record = [](void* ctx, void* data, size_t size) -> int {
    auto* self = static_cast<CallTracer*>(ctx);
    (*self->handler_)(data, size);
    return 0;
  };
  ring_.reset(ring_buffer__new(bpf_map__fd(skel_->maps.events), on_record, this, nullptr));
  if (!ring_) fail("cannot open the BPF ring buffer: {}", errno_text(errno));
}

CallTracer::~CallTracer() {
  // Links first: no probe may fire into a ring that is going away.
  std::vector<std::function<void()>> releases;
  base_.take(releases);
  for (DutyFile& f : duty_files_) {
    f.links.take(releases);
    close(f.fd);
  }
  release_together(std::move(releases));
  ring_.reset();
  skel_.reset();
}

CallTracer::VerifierLoad CallTracer::most_verified() const {
  VerifierLoad most;
  bpf_program* p = nullptr;
  bpf_object__for_each_program(p, skel_->obj) {
    int fd = bpf_program__fd(p);
    if (fd < 0) continue;  // not loaded (autoload off)
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) continue;
    if (info.verified_insns > most.instructions) most = {bpf_program__name(p), info.verified_insns};
  }
  return most;
}

void CallTracer::trace_pid(uint32_t pid) {
  uint8_t one = 1;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.traced), &pid, &one, BPF_ANY) != 0)
    fail("cannot add pid {} to the traced set: {}", pid, errno_text(errno));
}

void CallTracer::LinkSet::take(std::vector<std::function<void()>>& releases) {
  for (int fd : fds) releases.emplace_back([fd] { close(fd); });
  for (auto& link : links) releases.emplace_back([l = link.release()] { bpf_link__destroy(l); });
  fds.clear();
  links.clear();
}

std::vector<std::string> CallTracer::attach(const std::string& path,
                                            const std::vector<ProbePoint>& points) {
  std::vector<ProbePoint> kept, duty;
  std::vector<size_t> kept_at, duty_at;
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].duty) {
      duty.push_back(points[i]);
      duty.back().cookie |= EACGM_COOKIE_DUTY;
      duty_at.push_back(i);
    } else {
      kept.push_back(points[i]);
      kept_at.push_back(i);
    }
  }
  std::vector<std::string> errors(points.size());
  std::vector<std::string> e = attach_points(path, kept, base_, false);
  for (size_t i = 0; i < e.size(); ++i) errors[kept_at[i]] = std::move(e[i]);
  if (duty.empty()) return errors;
  DutyFile f;
  f.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    std::string why = errno_text(errno);
    for (size_t i : duty_at) errors[i] = why;
    return errors;
  }
  e = attach_points(path, duty, f.links, false);
  for (size_t i = 0; i < e.size(); ++i) {
    if (e[i].empty()) f.points.push_back(duty[i]);
    errors[duty_at[i]] = std::move(e[i]);
  }
  if (f.points.empty()) {
    close(f.fd);
    return errors;
  }
  if (paused_) {  // (a file found while the calls are paused: attached to learn its errors)
    std::vector<std::function<void()>> releases;
    f.links.take(releases);
    release_together(std::move(releases));
  }
  duty_files_.push_back(std::move(f));
  return errors;
}

void CallTracer::pause_calls() {
  if (paused_) return;
  paused_ = true;
  std::vector<std::function<void()>> releases;
  for (DutyFile& f : duty_files_) f.links.take(releases);
  release_together(std::move(releases));
}

std::string CallTracer::resume_calls() {
  if (!paused_) return {};
  paused_ = false;
  // before any entry probe is back: entries from before the pause are stale from now on
  __atomic_fetch_add(&skel_->bss->calls_gen, 1, __ATOMIC_SEQ_CST);
  size_t failed = 0;
  std::string first;
  for (DutyFile& f : duty_files_) {
    std::vector<std::string> errors =
        attach_points(fmt::format("/proc/self/fd/{}", f.fd), f.points, f.links, true);
    for (const std::string& e : errors)
      if (!e.empty() && !failed++) first = e;
  }
  if (!failed) return {};
  return fmt::format("{} probe point{} could not be attached again ({})", failed,
                     failed == 1 ? "" : "s", first);
}

std::vector<std::string> CallTracer::attach_points(const std::string& path,
                                                   const std::vector<ProbePoint>& points,
                                                   LinkSet& into, bool exits_first) {
  if (points.empty()) return {};
  if (multi_supported_ && attach_multi(path, points, into, exits_first))
    return std::vector<std::string>(points.size());
  // One point at a time, to learn which point failed (or a perf-event uprobe pair per point,
  // on older kernels).
  std::vector<std::string> errors;
  std::string refused;  // the kernel made no multi link: the rest would fail the same way
  for (const auto& p : points) {
    if (per_event_loaded_) {
      errors.push_back(attach_one(path, p, into));
    } else if (!refused.empty()) {
      errors.push_back(refused);
    } else if (attach_multi(path, {p}, into, exits_first)) {
      errors.emplace_back();
    } else {
      int err = errno;
      errors.push_back(errno_text(err));
      if (refuses_multi_links(err))
        refused = errors.back() += " (the kernel refused a uprobe_multi link; "
                                   "EACGM_NO_UPROBE_MULTI=1 uses perf-event uprobes)";
    }
  }
  return errors;
}

bool CallTracer::attach_multi(const std::string& path, const std::vector<ProbePoint>& points,
                              LinkSet& into, bool exits_first) {
  // entry probes; uretprobes for the points without exit instructions; exit-instruction probes
  std::vector<uint64_t> offsets[3], cookies[3];
  for (const auto& p : points) {
    offsets[0].push_back(p.file_offset);
    cookies[0].push_back(p.cookie);
    if (p.exits.empty() && !p.entry_only) {
      offsets[1].push_back(p.file_offset);
      cookies[1].push_back(p.cookie);
    }
    for (const auto& exit : p.exits) {
      offsets[2].push_back(exit.file_offset);
      cookies[2].push_back(p.cookie | exit.cookie_bits);
    }
  }
  bpf_program* progs[3] = {skel_->progs.call_entry_multi, skel_->progs.call_return_multi,
                           skel_->progs.call_exit_multi};
  std::vector<int> fds;
  // (exits first when attaching again: a call whose entry is seen then has its return seen too)
  static constexpr int kOrder[2][3] = {{0, 1, 2}, {2, 1, 0}};
  for (int kind : kOrder[exits_first]) {
    if (offsets[kind].empty()) continue;
    int fd = create_multi_link(progs[kind], kTraceUprobeMulti, path, offsets[kind],
                               cookies[kind], kind == 1 ? kUprobeMultiReturn : 0);
    if (fd < 0) {
      // EINVAL too: a kernel without uprobe_multi; stop trying where there is a fallback
      int err = errno;
      if (per_event_loaded_ && (err == EINVAL || refuses_multi_links(err)))
        multi_supported_ = false;
      for (int f : fds) close(f);
      errno = err;
      return false;
    }
    fds.push_back(fd);
  }
  into.fds.insert(into.fds.end(), fds.begin(), fds.end());
  return true;
}

std::string CallTracer::attach_one(const std::string& path, const ProbePoint& point,
                                   LinkSet& into) {
  auto attach = [&](bpf_program* prog, uint64_t offset, uint64_t cookie, bool retprobe) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = cookie, .retprobe = retprobe);
    bpf_link* link = bpf_program__attach_uprobe_opts(prog, -1, path.c_str(), offset, &opts);
    if (!link) return errno_text(errno);
    into.links.emplace_back(link);
    return std::string();
  };
  std::string err = attach(skel_->progs.call_entry, point.file_offset, point.cookie, false);
  if (err.empty() && point.exits.empty() && !point.entry_only)
    err = attach(skel_->progs.call_return, point.file_offset, point.cookie, true);
  for (const auto& exit : point.exits)
    if (err.empty())
      err = attach(skel_->progs.call_exit, exit.file_offset, point.cookie | exit.cookie_bits, false);
  return err;
}

void CallTracer::set_torch_layout(const TorchLayout& layout) {
  skel_->bss->torch_numel_offset = layout.numel_offset;
  skel_->bss->torch_dtype_offset = layout.dtype_offset;
  skel_->bss->torch_pg_rank_offset = layout.pg_rank_offset;
  skel_->bss->torch_pg_seq_offset = layout.pg_seq_offset;
}

std::string CallTracer::attach_loader_hook(const std::string& path, uint64_t file_offset) {
  if (trace_all_) return {};  // --all re-plans on a timer: the hook would only cost a trap
  // EACGM_NO_LOADER_HOOK=1: as if it could not be attached (to test the rescan that stands in)
  if (getenv("EACGM_NO_LOADER_HOOK")) return "EACGM_NO_LOADER_HOOK is set";
  if (multi_supported_) {
    // a multi link, as the call probes: a perf-event uprobe on every process wants more than
    // CAP_BPF + CAP_PERFMON on some kernels (EPERM for the agent's systemd unit here)
    int fd = create_multi_link(skel_->progs.loader_update_multi, kTraceUprobeMulti, path,
                               {file_offset}, {0}, 0);
    if (fd >= 0) {
      base_.fds.push_back(fd);
      return {};
    }
    if (errno != EINVAL && !refuses_multi_links(errno)) return errno_text(errno);
    // the perf-event program is loaded either way; the call probes go on with multi links a
    // point at a time where theirs are not loaded
    if (per_event_loaded_) multi_supported_ = false;
  }
  LIBBPF_OPTS(bpf_uprobe_opts, opts);
  bpf_link* link = bpf_program__attach_uprobe_opts(skel_->progs.loader_update, -1, path.c_str(),
                                                   file_offset, &opts);
  if (!link) return errno_text(errno);
  base_.links.emplace_back(link);
  return {};
}

std::string CallTracer::attach_python_eval(const std::string& path, uint64_t file_offset,
                                           uint32_t layout) {
  if (session_supported_) {
    // one session probe: calls the filter leaves out skip their return probe
    int fd = create_multi_link(skel_->progs.py_eval_session, kTraceUprobeSession, path,
                               {file_offset}, {layout}, 0);
    if (fd >= 0) {
      base_.fds.push_back(fd);
      return {};
    }
    if (errno != EINVAL && errno != EOPNOTSUPP && errno != ENOSYS) return errno_text(errno);
    session_supported_ = false;  // the pair below, from now on
  }
  for (bool retprobe : {false, true}) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = layout, .retprobe = retprobe);
    bpf_program* prog = retprobe ? skel_->progs.py_eval_return : skel_->progs.py_eval_entry;
    bpf_link* link = bpf_program__attach_uprobe_opts(prog, -1, path.c_str(), file_offset, &opts);
    if (!link) return errno_text(errno);
    base_.links.emplace_back(link);
  }
  return {};
}

std::string CallTracer::start_sampling() {
  if (!sample_hz_) return "not asked for";
  int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return "cannot count the CPUs: " + errno_text(-cpus);
  int attached = 0, last_error = 0;
  for (int cpu = 0; cpu < cpus; ++cpu) {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.freq = 1;
    attr.sample_freq = sample_hz_;
    int fd = int(syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      if (errno != ENODEV) last_error = errno;  // ENODEV: a CPU that is not online
      continue;
    }
    bpf_link* link = bpf_program__attach_perf_event(skel_->progs.sample_cpu, fd);
    if (!link) {
      last_error = errno;
      close(fd);
      continue;
    }
    base_.links.emplace_back(link);  // the link owns the perf event's fd
    ++attached;
  }
  if (attached) return "";
  return fmt::format("cannot open a CPU-clock perf event: {}",
                     last_error == EACCES || last_error == EPERM
                         ? "permission denied (needs CAP_PERFMON, or root)"
                         : errno_text(last_error));
}

std::string CallTracer::start_off_cpu() {
  if (!off_cpu_) return "not asked for";
  bpf_link* link = bpf_program__attach(skel_->progs.offcpu_switch);
  if (!link)
    return fmt::format("cannot attach to the sched_switch tracepoint: {}",
                       errno == EACCES || errno == EPERM
                           ? "permission denied (needs CAP_BPF and CAP_PERFMON, or root)"
                           : errno_text(errno));
  base_.links.emplace_back(link);
  return "";
}

void CallTracer::python_process_added() {
  __atomic_fetch_add(&skel_->data->py_procs_gen, 1, __ATOMIC_SEQ_CST);
}

int CallTracer::map_fd(const char* name) const {
  bpf_map* map = bpf_object__find_map_by_name(skel_->obj, name);
  return map ? bpf_map__fd(map) : -1;
}

int CallTracer::poll(int timeout_ms, const RecordHandler& handler) {
  handler_ = &handler;
  // Producers wake us only past the fill mark, so a quiet ring is drained on the timer too.
  int n = ring_buffer__poll(ring_.get(), timeout_ms);
  if (n >= 0) {
    int m = ring_buffer__consume(ring_.get());
    n = m >= 0 ? n + m : m;
  }
  handler_ = nullptr;
  if (n < 0 && n != -EINTR) fail("reading the BPF ring buffer failed: {}", errno_text(-n));
  return n < 0 ? 0 : n;
}

int CallTracer::traced_map_fd() const { return bpf_map__fd(skel_->maps.traced); }

std::vector<uint32_t> CallTracer::traced_pids() const {
  std::vector<uint32_t> pids;
  int fd = traced_map_fd();
  uint32_t key = 0, next = 0;
  for (uint32_t* prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0; prev = &key) {
    pids.push_back(next);
    key = next;
  }
  return pids;
}

TracerCounters CallTracer::counters() const {
  int ncpu = libbpf_num_possible_cpus();
  std::vector<uint64_t> values(ncpu > 0 ? ncpu : 1);
  auto sum = [&](uint32_t which) {
    uint64_t total = 0;
    if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.counters), &which, values.data()) == 0)
      for (uint64_t v : values) total += v;
    return total;
  };
  return {sum(EACGM_CNT_RING_DROPS), sum(EACGM_CNT_ENTRY_MISSING),
          sum(EACGM_CNT_ENTRY_OVERFLOW), sum(EACGM_CNT_OFFCPU_LOST),
          sum(EACGM_CNT_PY_STACKS_REUSED), sum(EACGM_CNT_OFFCPU_STACKS_REUSED)};
}

}  // namespace eacgm
