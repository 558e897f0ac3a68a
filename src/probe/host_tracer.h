// The host layer's loader and sampler: scheduler, network and block I/O tracepoints whose
// per-CPU counters are read at each sampling interval and turned into per-interval rows.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "events.h"
#include "store/rows.h"

struct host_bpf;
struct bpf_link;

namespace eacgm {

class HostTracer {
 public:
  // Loads and attaches the host tracepoints. `traced_map_fd` is the call tracer's set of traced
  // processes (shared, so both layers follow the same tree); -1 with `trace_all`.
  // Throws eacgm::Error naming the cause and the fix.
  HostTracer(int traced_map_fd, bool trace_all);
  ~HostTracer();
  HostTracer(const HostTracer&) = delete;
  HostTracer& operator=(const HostTracer&) = delete;

  // Reads the counters and returns what changed since the previous sample (or since the
  // programs were attached). `now_ns` is CLOCK_MONOTONIC.
  std::vector<HostSampleRow> sample(uint64_t now_ns);

  // Metrics this kernel cannot give (its tracepoint is missing), with the reason; the rest of
  // the layer works.
  const std::vector<std::string>& unavailable() const { return unavailable_; }

  // How running threads' CPU time is counted up to each sample: "cpus" (each CPU's traced
  // thread), "tasks" (every task of the node: kernels that refuse the first), "none" (at their
  // switch-out only).
  const char* scan_kind() const { return scan_cpus_ ? "cpus" : scan_ ? "tasks" : "none"; }

  // The name to give a process's samples (it exec'd since the kernel side first saw it).
  // Safe to call while another thread samples.
  void name_process(uint32_t pid, const std::string& name) {
    std::lock_guard lock(names_mu_);
    names_[pid] = name;
  }

 private:
  struct Deleter {
    void operator()(host_bpf* s) const;
  };
  struct LinkDeleter {
    void operator()(bpf_link* l) const;
  };
  void scan_tasks(uint64_t now_ns);
  void sample_processes(uint64_t now_ns, uint64_t epoch, bool sweep,
                        std::vector<HostSampleRow>& out);
  void sample_net(uint64_t now_ns, std::vector<HostSampleRow>& out);
  void sample_disks(uint64_t now_ns, uint64_t epoch, std::vector<HostSampleRow>& out);
  void sample_cpus(uint64_t now_ns, std::vector<HostSampleRow>& out);
  void sample_takers(std::vector<HostSampleRow>& out, bool take);
  std::string process_name(uint32_t pid, const char (&bpf_comm)[16]);

  std::unique_ptr<host_bpf, Deleter> skel_;
  std::vector<std::unique_ptr<bpf_link, LinkDeleter>> links_;
  bool scan_cpus_ = false;  // host_scan_cpus runs here; else the task iterator:
  int scan_failures_ = 0;   // host_scan_cpus's runs refused in a row
  std::unique_ptr<bpf_link, LinkDeleter> scan_;  // (host_scan)
  int ncpu_ = 1;
  uint64_t last_ns_ = 0;
  // Whether a map is to be walked: its programs wrote to it since the last look (the sum of
  // their per-CPU write counts moved), or did just before it, so once more after (a write
  // counted before the sum was read may land in its entry just after the walk read it).
  struct MapWatch {
    uint64_t seen = 0;
    bool again = true;
    bool due(uint64_t sum) {
      bool walk = sum != seen || again;
      again = sum != seen;
      seen = sum;
      return walk;
    }
  };
  MapWatch procs_watch_, nets_watch_, disks_watch_, takers_watch_;
  uint64_t passes_ = 0;
  std::map<uint32_t, eacgm_host_proc_stats> procs_;
  std::map<uint64_t, eacgm_net_stats> nets_;  // key: netns << 32 | ifindex
  std::map<uint32_t, eacgm_disk_stats> disks_;
  std::vector<eacgm_cpu_stalls> cpu_seen_;  // per CPU: its counts read last
  // waits for a CPU charged to other processes and not on a row yet (sample_takers): by waiting
  // process, the takers' name and pid
  std::map<uint32_t, std::map<std::string, std::map<uint32_t, uint64_t>>> taken_;
  std::mutex names_mu_;  // names_ is written by the record loop, read by the sampler
  std::map<uint32_t, std::string> names_;
  std::map<uint32_t, std::string> disk_names_;
  std::vector<std::string> unavailable_;
};

// "sda", "nvme0n1", or "MAJ:MIN" for a dev_t in the kernel's encoding.
std::string disk_name(uint32_t kernel_dev);

}  // namespace eacgm
