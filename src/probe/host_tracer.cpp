// Host layer: attach the tracepoints, then turn cumulative per-CPU counters into deltas.
#include "probe/host_tracer.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <signal.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string_view>

#include "host.skel.h"
#include "probe/link_release.h"
#include "util/error.h"

namespace eacgm {
namespace {

// Every entry of a per-CPU hash map: keys[i]'s values for each CPU are values[i * ncpu ..].
// In batches, one system call each: a key's get_next_key and lookup were two calls apiece, at
// every sample (10 a second) for every process the node ran, ~70% of the agent's sampling
// thread on an idle 76-process VM (session 59). One by one where batches are refused (kernels
// before 5.6).
template <typename Key, typename Value>
void read_percpu_map(int fd, size_t ncpu, std::vector<Key>& keys, std::vector<Value>& values) {
  static_assert(sizeof(Value) % 8 == 0, "per-CPU values are laid out 8-byte aligned");
  keys.clear();
  values.clear();
  uint32_t chunk = 256;
  uint64_t token_in = 0, token_out = 0;  // a hash map's position: its bucket, a u32
  bool first = true;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  for (;;) {
    size_t have = keys.size();
    keys.resize(have + chunk);
    values.resize((have + chunk) * ncpu);
    uint32_t count = chunk;
    int err = bpf_map_lookup_batch(fd, first ? nullptr : &token_in, &token_out, keys.data() + have,
                                   values.data() + have * ncpu, &count, &opts);
    int e = err ? errno : 0;
    keys.resize(have + (err == 0 || e == ENOENT ? count : 0));
    values.resize(keys.size() * ncpu);
    if (err == 0) {
      token_in = token_out;
      first = false;
      continue;
    }
    if (e == ENOENT) return;  // (the last batch, or an empty map)
    if (e == ENOSPC && chunk < (1u << 20)) {  // a bucket holds more than a batch: larger
      chunk *= 2;
      continue;
    }
    break;
  }
  // one by one
  keys.clear();
  values.clear();
  Key key{}, next{};
  const void* prev = nullptr;
  std::vector<Value> one(ncpu);
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(fd, &key, one.data()) != 0) continue;  // (gone meanwhile)
    keys.push_back(key);
    values.insert(values.end(), one.begin(), one.end());
  }
}

uint64_t delta(uint64_t now, uint64_t before) { return now >= before ? now - before : now; }

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// The scheduler tick's hrtimer handler: tick_nohz_handler (Linux 6.10+) or tick_sched_timer,
// from /proc/kallsyms (0: not there, or its addresses hidden from this process).
uint64_t tick_handler_address() {
  std::ifstream in("/proc/kallsyms");
  for (std::string line; std::getline(in, line);) {
    // "ffffffff814437d0 t tick_nohz_handler"
    size_t a = line.find(' '), b = a == std::string::npos ? a : line.find(' ', a + 1);
    if (b == std::string::npos) continue;
    std::string_view name = std::string_view(line).substr(b + 1);
    if (name != "tick_nohz_handler" && name != "tick_sched_timer") continue;
    char type = line[a + 1];
    if (type != 't' && type != 'T') continue;
    return std::strtoull(line.substr(0, a).c_str(), nullptr, 16);
  }
  return 0;
}

}  // namespace

std::string disk_name(uint32_t kernel_dev) {
  uint32_t major = kernel_dev >> 20, minor = kernel_dev & 0xfffff;
  std::ifstream in(fmt::format("/sys/dev/block/{}:{}/uevent", major, minor));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("DEVNAME=", 0) == 0) return line.substr(8);
  return fmt::format("{}:{}", major, minor);
}

void HostTracer::Deleter::operator()(host_bpf* s) const { host_bpf__destroy(s); }
void HostTracer::LinkDeleter::operator()(bpf_link* l) const { bpf_link__destroy(l); }

HostTracer::HostTracer(int traced_map_fd, bool trace_all) {
  skel_.reset(host_bpf__open());
  if (!skel_) fail("cannot open the host-layer BPF programs: {}", errno_text(errno));
  skel_->rodata->filter_mode = trace_all ? EACGM_FILTER_ALL : EACGM_FILTER_PIDS;
  // Userspace walks the hash tables at every sample, and a walk visits every bucket: size them
  // for what is traced (a job's processes), or for a whole host with --all.
  if (int err = bpf_map__set_max_entries(skel_->maps.proc_stats, trace_all ? 16384 : 1024); err)
    fail("cannot size the host-layer process table: {}", errno_text(-err));
  if (traced_map_fd >= 0) {
    if (int err = bpf_map__reuse_fd(skel_->maps.traced, traced_map_fd); err)
      fail("cannot share the traced-process set with the host layer: {}", errno_text(-err));
  }
  // Memory and TCP tracepoints are not on every kernel: leave out
  // what this one lacks, and say so, rather than refuse the whole layer.
  struct Optional {
    bpf_program* prog;
    const char* tracepoint;
    const char* metric;
  } optional[] = {{skel_->progs.host_tcp_retransmit, "tcp_retransmit_skb", "tcp_retransmits"},
                  {skel_->progs.host_direct_reclaim_begin, "mm_vmscan_direct_reclaim_begin",
                   "reclaim_ns"},
                  {skel_->progs.host_direct_reclaim_end, "mm_vmscan_direct_reclaim_end",
                   "reclaim_ns"},
                  {skel_->progs.host_memcg_reclaim_begin, "mm_vmscan_memcg_reclaim_begin",
                   "reclaim_ns (cgroup limits)"},
                  {skel_->progs.host_memcg_reclaim_end, "mm_vmscan_memcg_reclaim_end",
                   "reclaim_ns (cgroup limits)"},
                  {skel_->progs.host_page_cache_add, "mm_filemap_add_to_page_cache",
                   "pagein_bytes"},
                  {skel_->progs.host_timer_late, "hrtimer_expire_entry", "stall_ns (CPU stalls)"}};
  btf* vmlinux = btf__load_vmlinux_btf();
  for (auto& o : optional) {
    std::string type = std::string("btf_trace_") + o.tracepoint;
    if (vmlinux && btf__find_by_name_kind(vmlinux, type.c_str(), BTF_KIND_TYPEDEF) >= 0) continue;
    bpf_program__set_autoload(o.prog, false);
    std::string what = fmt::format("{} (no {} tracepoint in this kernel)", o.metric, o.tracepoint);
    if (std::find(unavailable_.begin(), unavailable_.end(), what) == unavailable_.end())
      unavailable_.push_back(what);
  }
  // CPU stalls look at the scheduler tick alone (host.bpf.c), known by its handler's address
  if (bpf_program__autoload(skel_->progs.host_timer_late)) {
    uint64_t tick = tick_handler_address();
    skel_->rodata->tick_fn = tick;
    if (!tick) {
      bpf_program__set_autoload(skel_->progs.host_timer_late, false);
      unavailable_.push_back(
          "stall_ns (CPU stalls) (/proc/kallsyms gives no address for the scheduler tick's "
          "handler: it needs root, CAP_SYSLOG or kernel.perf_event_paranoid <= 1)");
    }
  }
  btf__free(vmlinux);
  ncpu_ = std::max(1, libbpf_num_possible_cpus());
  skel_->rodata->scan_cpus = uint32_t(ncpu_);
  if (int err = host_bpf__load(skel_.get()); err)
    fail("cannot load the host-layer BPF programs: {} (needs BTF tracepoints, Linux 6.6+; run "
         "'eacgm doctor')",
         errno_text(-err));
  struct {
    bpf_program* prog;
    const char* what;
  } tracepoints[] = {{skel_->progs.host_wakeup, "sched_wakeup"},
                     {skel_->progs.host_wakeup_new, "sched_wakeup_new"},
                     {skel_->progs.host_switch, "sched_switch"},
                     {skel_->progs.host_exit, "sched_process_exit"},
                     {skel_->progs.host_xmit, "net_dev_xmit"},
                     {skel_->progs.host_receive, "netif_receive_skb"},
                     {skel_->progs.host_sock_send, "sock_send_length"},
                     {skel_->progs.host_sock_recv, "sock_recv_length"},
                     {skel_->progs.host_rq_issue, "block_rq_issue"},
                     {skel_->progs.host_rq_complete, "block_rq_complete"},
                     {skel_->progs.host_bio_queue, "block_bio_queue"}};
  for (auto& o : optional) {
    if (!bpf_program__autoload(o.prog)) continue;
    bpf_link* link = bpf_program__attach(o.prog);
    if (!link) fail("cannot attach to the {} tracepoint: {}", o.tracepoint, errno_text(errno));
    links_.emplace_back(link);
  }
  for (auto& tp : tracepoints) {
    bpf_link* link = bpf_program__attach(tp.prog);
    if (!link) fail("cannot attach to the {} tracepoint: {}", tp.what, errno_text(errno));
    links_.emplace_back(link);
  }
  // The scan, run at each sample: running threads' CPU time up to the sample. Without it a
  // thread's time is counted when it leaves the CPU. Each CPU's traced thread (one system call,
  // work per CPU), else a task iterator over every task of the node (work per task).
  skel_->bss->scan_until = 0;  // (a trial run: counts nothing)
  LIBBPF_OPTS(bpf_test_run_opts, trial);
  // (EACGM_TEST_HOST_SCAN_TASKS=1, tests: the task iterator, as on a kernel that refuses it)
  scan_cpus_ = !getenv("EACGM_TEST_HOST_SCAN_TASKS") &&
               bpf_prog_test_run_opts(bpf_program__fd(skel_->progs.host_scan_cpus), &trial) == 0;
  if (!scan_cpus_) {
    scan_.reset(bpf_program__attach_iter(skel_->progs.host_scan, nullptr));
    if (!scan_)
      unavailable_.push_back(fmt::format(
          "oncpu_ns as it accrues (no BPF task iterator: {}; counted when a thread leaves the CPU)",
          errno_text(errno)));
  }
  // The maps start empty: everything counted from here on belongs to the recording.
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  last_ns_ = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

HostTracer::~HostTracer() {
  std::vector<std::function<void()>> releases;
  for (auto& link : links_) releases.emplace_back([l = link.release()] { bpf_link__destroy(l); });
  if (scan_) releases.emplace_back([l = scan_.release()] { bpf_link__destroy(l); });
  links_.clear();
  release_together(std::move(releases));
  skel_.reset();
}

// The name at first sight, from /proc while the process runs, else the one the kernel side
// recorded when it first saw it.
std::string HostTracer::process_name(uint32_t pid, const char (&bpf_comm)[16]) {
  std::lock_guard lock(names_mu_);
  auto it = names_.find(pid);
  if (it != names_.end()) return it->second;
  std::string comm = read_line(fmt::format("/proc/{}/comm", pid));
  if (comm.empty()) comm.assign(bpf_comm, strnlen(bpf_comm, sizeof(bpf_comm)));
  return names_.emplace(pid, comm.empty() ? fmt::format("pid {}", pid) : comm).first->second;
}

std::vector<HostSampleRow> HostTracer::sample(uint64_t now_ns) {
  // New epoch first: updates from here on belong to the next interval's maxima.
  uint64_t epoch = skel_->data->epoch;
  skel_->data->epoch = epoch + 1;
  scan_tasks(now_ns);  // before the change counts: what it counted moves them
  uint64_t procs = 0, nets = 0, disks = 0, takers = 0;
  // Slot = CPU number modulo the slot count: only the first ncpu_ slots are ever written, and
  // reading all 256 cache lines at every pass costs more than the rest of an idle pass.
  size_t slots = std::min<size_t>(size_t(ncpu_), EACGM_CHANGE_SLOTS);
  for (size_t i = 0; i < slots; ++i) {
    const eacgm_changes& c = skel_->bss->changes[i];
    procs += __atomic_load_n(&c.procs, __ATOMIC_RELAXED);
    nets += __atomic_load_n(&c.nets, __ATOMIC_RELAXED);
    disks += __atomic_load_n(&c.disks, __ATOMIC_RELAXED);
    takers += __atomic_load_n(&c.takers, __ATOMIC_RELAXED);
  }
  std::vector<HostSampleRow> out;
  // processes also every 100th pass: entries of idle processes that exited are dropped
  bool sweep = ++passes_ % 100 == 0;
  if (procs_watch_.due(procs) || sweep) sample_processes(now_ns, epoch, sweep, out);
  // (onto the rows just made; what waits for a row of its process, also when nothing changed)
  if (bool due = takers_watch_.due(takers); due || !taken_.empty()) sample_takers(out, due);
  if (nets_watch_.due(nets)) sample_net(now_ns, out);
  if (disks_watch_.due(disks)) sample_disks(now_ns, epoch, out);
  sample_cpus(now_ns, out);
  for (auto& row : out) {
    row.ts_ns = now_ns;
    row.interval_ns = now_ns - last_ns_;
  }
  last_ns_ = now_ns;
  return out;
}

// Counts the running traced threads' CPU time up to the sample.
void HostTracer::scan_tasks(uint64_t now_ns) {
  skel_->bss->scan_until = now_ns;
  if (scan_cpus_) {
    LIBBPF_OPTS(bpf_test_run_opts, run);
    // (a failure leaves this sample's running time to the threads' switch-out)
    // (EACGM_TEST_HOST_SCAN_REFUSED=1, tests: each run refused, as a kernel might later on)
    static const bool refused = getenv("EACGM_TEST_HOST_SCAN_REFUSED") != nullptr;
    if (!refused && bpf_prog_test_run_opts(bpf_program__fd(skel_->progs.host_scan_cpus), &run) == 0) {
      scan_failures_ = 0;
      return;
    }
    if (++scan_failures_ < 3) return;
    scan_cpus_ = false;  // refused again and again: the task iterator from here on
    scan_.reset(bpf_program__attach_iter(skel_->progs.host_scan, nullptr));
  }
  if (!scan_) return;
  int fd = bpf_iter_create(bpf_link__fd(scan_.get()));
  if (fd < 0) return;  // (this sample's running time then lands at the threads' switch-out)
  char buf[64];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
  close(fd);
}

void HostTracer::sample_processes(uint64_t now_ns, uint64_t epoch, bool sweep,
                                  std::vector<HostSampleRow>& out) {
  int fd = bpf_map__fd(skel_->maps.proc_stats);
  const size_t ncpu = size_t(ncpu_);
  std::vector<uint32_t> pids;
  std::vector<eacgm_host_proc_stats> values, one(ncpu);
  read_percpu_map(fd, ncpu, pids, values);
  auto sum = [&](const eacgm_host_proc_stats* per_cpu, eacgm_host_proc_stats& total,
                 uint64_t& max_ns) {
    total = {};
    max_ns = 0;
    for (size_t c = 0; c < ncpu; ++c) {
      const eacgm_host_proc_stats& v = per_cpu[c];
      total.runq_wait_ns += v.runq_wait_ns;
      total.runq_waits += v.runq_waits;
      total.voluntary_switches += v.voluntary_switches;
      total.involuntary_switches += v.involuntary_switches;
      total.offcpu_ns += v.offcpu_ns;
      total.oncpu_ns += v.oncpu_ns;
      total.sock_tx_bytes += v.sock_tx_bytes;
      total.sock_rx_bytes += v.sock_rx_bytes;
      total.io_ops += v.io_ops;
      total.io_bytes += v.io_bytes;
      total.tcp_retransmits += v.tcp_retransmits;
      total.page_faults += v.page_faults;
      total.reclaim_ns += v.reclaim_ns;
      total.reclaims += v.reclaims;
      total.pagein_bytes += v.pagein_bytes;
      total.stall_ns += v.stall_ns;
      total.stall_end_ns = std::max(total.stall_end_ns, v.stall_end_ns);
      total.stalls += v.stalls;
      if (v.runq_epoch == epoch) max_ns = std::max<uint64_t>(max_ns, v.runq_max_ns);
      if (v.comm[0]) std::memcpy(total.comm, v.comm, sizeof(total.comm));
    }
  };
  // What changed since the last sample, as a row; whether anything did.
  auto emit = [&](uint32_t pid, const eacgm_host_proc_stats& total, uint64_t max_ns) {
    const eacgm_host_proc_stats before = procs_[pid];  // zeros when new
    procs_[pid] = total;
    HostSampleRow row;
    row.scope = HostScope::Process;
    row.id = pid;
    row.name = process_name(pid, total.comm);
    row.runq_wait_ns = delta(total.runq_wait_ns, before.runq_wait_ns);
    row.runq_waits = delta(total.runq_waits, before.runq_waits);
    row.runq_max_ns = row.runq_waits ? max_ns : 0;
    row.voluntary_switches = delta(total.voluntary_switches, before.voluntary_switches);
    row.involuntary_switches = delta(total.involuntary_switches, before.involuntary_switches);
    row.offcpu_ns = delta(total.offcpu_ns, before.offcpu_ns);
    row.oncpu_ns = delta(total.oncpu_ns, before.oncpu_ns);
    row.tx_bytes = delta(total.sock_tx_bytes, before.sock_tx_bytes);
    row.rx_bytes = delta(total.sock_rx_bytes, before.sock_rx_bytes);
    row.io_ops = delta(total.io_ops, before.io_ops);
    row.io_bytes = delta(total.io_bytes, before.io_bytes);
    row.tcp_retransmits = delta(total.tcp_retransmits, before.tcp_retransmits);
    row.page_faults = delta(total.page_faults, before.page_faults);
    row.reclaim_ns = delta(total.reclaim_ns, before.reclaim_ns);
    row.reclaims = delta(total.reclaims, before.reclaims);
    row.pagein_bytes = delta(total.pagein_bytes, before.pagein_bytes);
    row.stall_ns = delta(total.stall_ns, before.stall_ns);
    // (a stop that ended while the maps were read, microseconds after now_ns, is counted in this
    // sample, which covers up to now_ns: it ended by then, to within that read; e2e
    // RecordHost.ACpuStallIsChargedToTheProcessItStoppedWithWhenItEnded saw 18 us past it)
    row.stall_end_ns = row.stall_ns ? std::min<uint64_t>(total.stall_end_ns, now_ns) : 0;
    row.stalls = delta(total.stalls, before.stalls);
    bool active = row.runq_waits || row.voluntary_switches || row.involuntary_switches ||
                  row.oncpu_ns || row.tx_bytes || row.rx_bytes || row.io_ops ||
                  row.tcp_retransmits || row.page_faults || row.reclaims || row.pagein_bytes ||
                  row.stall_ns;
    if (active) out.push_back(std::move(row));
    return active;
  };
  for (size_t i = 0; i < pids.size(); ++i) {
    uint32_t pid = pids[i];
    eacgm_host_proc_stats total;
    uint64_t max_ns = 0;
    sum(&values[i * ncpu], total, max_ns);
    if (emit(pid, total, max_ns)) continue;  // it ran this interval: not worth asking if gone
    // Idle since the last sample and a sweep (every 100th pass: most of a node's processes are
    // idle, and asking each at every pass was a system call apiece): gone? A process already
    // gone has made its last update, so one more read after the check loses nothing when its
    // entry goes.
    if (!sweep || kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
    if (bpf_map_lookup_elem(fd, &pid, one.data()) == 0) {
      sum(one.data(), total, max_ns);
      emit(pid, total, max_ns);
    }
    bpf_map_delete_elem(fd, &pid);
    procs_.erase(pid);
    taken_.erase(pid);  // (waits charged after its last row)
    std::lock_guard lock(names_mu_);
    names_.erase(pid);
  }
}

// Takes every entry of a (non-per-CPU) hash map out of it: batches of lookup-and-delete (one
// system call for the lot), or one key at a time where the kernel has no batches for it.
template <typename Key, typename Value>
void take_map(int fd, std::vector<Key>& keys, std::vector<Value>& values) {
  keys.clear();
  values.clear();
  uint32_t chunk = 256;
  uint64_t token_in = 0, token_out = 0;
  bool first = true;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  for (;;) {
    size_t have = keys.size();
    keys.resize(have + chunk);
    values.resize(have + chunk);
    uint32_t count = chunk;
    int err = bpf_map_lookup_and_delete_batch(fd, first ? nullptr : &token_in, &token_out,
                                              keys.data() + have, values.data() + have, &count,
                                              &opts);
    int e = err ? errno : 0;
    keys.resize(have + (err == 0 || e == ENOENT ? count : 0));
    values.resize(keys.size());
    if (err == 0) {
      token_in = token_out;
      first = false;
      continue;
    }
    if (e == ENOENT) return;
    if (e == ENOSPC && chunk < (1u << 20)) {
      chunk *= 2;
      continue;
    }
    if (!keys.empty()) return;  // (what was taken is kept; the rest, next time)
    break;
  }
  // one by one (each taken from the map's start: the last one is gone)
  Key key{};
  Value v{};
  for (size_t n = 0; n < (1u << 20) && bpf_map_get_next_key(fd, nullptr, &key) == 0; ++n) {
    if (bpf_map_lookup_and_delete_elem(fd, &key, &v) != 0) {
      if (bpf_map_delete_elem(fd, &key) != 0) break;  // (neither: leave it, not loop on it)
      continue;  // (its value unread: dropped, not taken with the last one's)
    }
    keys.push_back(key);
    values.push_back(v);
  }
}

// Who had the CPUs each traced process waited for since the last sample (cpu_takers): the
// entries are taken out of the map (each holds the waits charged since), summed by waiting
// process and the takers' name, and the top one goes on the process's row; a process with no
// row this time keeps its sums for its next. (An entry being charged as it is taken may lose
// that one wait, or charge it to the entry that reuses its slot.)
void HostTracer::sample_takers(std::vector<HostSampleRow>& out, bool take) {
  std::vector<eacgm_cpu_taker_key> keys;
  std::vector<eacgm_cpu_taker> values;
  if (take) take_map(bpf_map__fd(skel_->maps.cpu_takers), keys, values);
  for (size_t i = 0; i < keys.size(); ++i) {
    const eacgm_cpu_taker& v = values[i];
    if (!v.wait_ns) continue;
    std::string name(v.comm, strnlen(v.comm, sizeof(v.comm)));
    if (name.empty()) name = fmt::format("pid {}", keys[i].taker);
    taken_[keys[i].victim][name][keys[i].taker] += v.wait_ns;
  }
  for (HostSampleRow& row : out) {
    if (row.scope != HostScope::Process) continue;
    auto taken = taken_.find(uint32_t(row.id));
    if (taken == taken_.end()) continue;
    uint64_t best = 0;
    for (const auto& [name, by_pid] : taken->second) {
      uint64_t ns = 0, most = 0;
      uint32_t most_pid = 0;
      for (const auto& [pid, wait] : by_pid) {
        ns += wait;
        if (wait > most) most = wait, most_pid = pid;
      }
      if (ns <= best) continue;
      best = ns;
      row.taker_name = name;
      row.taker_ns = ns;
      row.taker_procs = uint32_t(by_pid.size());
      row.taker_pid = most_pid;
    }
    taken_.erase(taken);
  }
}

// Each CPU's stops since the last sample (host_timer_late): one lookup of the per-CPU array,
// and a row only for a CPU that stopped.
void HostTracer::sample_cpus(uint64_t now_ns, std::vector<HostSampleRow>& out) {
  if (!bpf_program__autoload(skel_->progs.host_timer_late)) return;
  const size_t ncpu = size_t(ncpu_);
  std::vector<eacgm_cpu_stalls> now(ncpu);
  uint32_t zero = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.cpu_stalls), &zero, now.data()) != 0) return;
  cpu_seen_.resize(ncpu);
  for (size_t i = 0; i < ncpu; ++i) {
    eacgm_cpu_stalls& seen = cpu_seen_[i];
    if (now[i].stalls == seen.stalls) continue;
    HostSampleRow row;
    row.scope = HostScope::Cpu;
    row.id = i;
    row.name = fmt::format("cpu {}", i);
    row.stall_ns = delta(now[i].stall_ns, seen.stall_ns);
    row.stalls = delta(now[i].stalls, seen.stalls);
    row.stall_end_ns = std::min<uint64_t>(now[i].stall_end_ns, now_ns);  // (as a process's, above)
    seen = now[i];
    out.push_back(std::move(row));
  }
}

void HostTracer::sample_net(uint64_t, std::vector<HostSampleRow>& out) {
  int fd = bpf_map__fd(skel_->maps.net_stats);
  const size_t ncpu = size_t(ncpu_);
  std::vector<eacgm_net_key> keys;
  std::vector<eacgm_net_stats> values;
  read_percpu_map(fd, ncpu, keys, values);
  for (size_t i = 0; i < keys.size(); ++i) {
    const eacgm_net_key& key = keys[i];
    eacgm_net_stats total{};
    for (size_t c = 0; c < ncpu; ++c) {
      const eacgm_net_stats& v = values[i * ncpu + c];
      total.tx_bytes += v.tx_bytes;
      total.tx_packets += v.tx_packets;
      total.rx_bytes += v.rx_bytes;
      total.rx_packets += v.rx_packets;
      if (v.name[0]) std::memcpy(total.name, v.name, sizeof(total.name));
    }
    uint64_t k = (uint64_t(key.netns) << 32) | key.ifindex;
    const eacgm_net_stats before = nets_[k];
    nets_[k] = total;
    HostSampleRow row;
    row.scope = HostScope::NetDevice;
    row.id = key.ifindex;
    row.netns = key.netns;
    row.name = std::string(total.name, strnlen(total.name, sizeof(total.name)));
    row.tx_bytes = delta(total.tx_bytes, before.tx_bytes);
    row.tx_packets = delta(total.tx_packets, before.tx_packets);
    row.rx_bytes = delta(total.rx_bytes, before.rx_bytes);
    row.rx_packets = delta(total.rx_packets, before.rx_packets);
    if (row.tx_packets || row.rx_packets) out.push_back(std::move(row));
  }
}

void HostTracer::sample_disks(uint64_t, uint64_t epoch, std::vector<HostSampleRow>& out) {
  int fd = bpf_map__fd(skel_->maps.disk_stats);
  const size_t ncpu = size_t(ncpu_);
  std::vector<uint32_t> devs;
  std::vector<eacgm_disk_stats> values;
  read_percpu_map(fd, ncpu, devs, values);
  for (size_t i = 0; i < devs.size(); ++i) {
    uint32_t dev = devs[i];
    eacgm_disk_stats total{};
    uint64_t max_ns = 0;
    for (size_t c = 0; c < ncpu; ++c) {
      const eacgm_disk_stats& v = values[i * ncpu + c];
      total.read_ops += v.read_ops;
      total.read_bytes += v.read_bytes;
      total.write_ops += v.write_ops;
      total.write_bytes += v.write_bytes;
      total.latency_ns += v.latency_ns;
      if (v.latency_epoch == epoch) max_ns = std::max<uint64_t>(max_ns, v.latency_max_ns);
    }
    const eacgm_disk_stats before = disks_[dev];
    disks_[dev] = total;
    HostSampleRow row;
    row.scope = HostScope::Disk;
    row.id = dev;
    auto name = disk_names_.find(dev);
    if (name == disk_names_.end()) name = disk_names_.emplace(dev, disk_name(dev)).first;
    row.name = name->second;
    row.read_ops = delta(total.read_ops, before.read_ops);
    row.read_bytes = delta(total.read_bytes, before.read_bytes);
    row.write_ops = delta(total.write_ops, before.write_ops);
    row.write_bytes = delta(total.write_bytes, before.write_bytes);
    row.io_latency_ns = delta(total.latency_ns, before.latency_ns);
    row.io_ops = row.read_ops + row.write_ops;
    row.io_bytes = row.read_bytes + row.write_bytes;
    row.io_latency_max_ns = row.io_ops ? max_ns : 0;
    // (bytes without a request: a request completed in parts, its last part in a later sample;
    // a row only for requests lost those bytes, since the totals above moved on)
    if (row.io_ops || row.io_bytes) out.push_back(std::move(row));
  }
}

}  // namespace eacgm
