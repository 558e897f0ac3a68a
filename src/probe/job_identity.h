// Who a traced process is in its job: the job id, rank, local rank and world size its launcher
// gave it (torchrun/torchelastic, Open MPI or Slurm environment variables), and the container
// and Kubernetes pod its cgroup names. These label metrics: they identify the job, not the
// call, and are bounded (a node runs few ranks).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace eacgm {

struct JobIdentity {
  std::string job, rank, local_rank, world_size;  // "" when the launcher did not say
  std::string container;  // the container id's first 12 hex digits (docker, containerd, CRI-O)
  std::string pod;        // the Kubernetes pod's UID
  // As Prometheus labels (job_id, rank, local_rank, world_size, container, pod), in a fixed
  // order, empty values included. Not "job": Prometheus gives every scraped series the
  // scrape job's name under that label.
  std::vector<std::pair<std::string, std::string>> labels() const;
};

// From the NUL-separated environment (as /proc/PID/environ has it) and the text of
// /proc/PID/cgroup. Values that are not short printable words are left out.
JobIdentity job_identity_from(std::string_view environ, std::string_view cgroup);
// From /proc/PID; what cannot be read (the process is gone, or not ours to read) stays "".
JobIdentity read_job_identity(uint32_t pid);

// The parent's pid from the text of /proc/PID/stat ("PID (COMM) STATE PPID ..."; COMM may hold
// spaces and parentheses), and from /proc; 0 when it cannot be read.
uint32_t parent_pid_from_stat(std::string_view stat);
uint32_t read_parent_pid(uint32_t pid);

}  // namespace eacgm
