// `eacgm agent`: the always-on node service. Drives the tracing pipeline over every process on
// the node that loads a traced library, into the agent's sinks (agent/agent_sinks.h), and
// serves /metrics.
#pragma once
#include <string>
#include <vector>

#include "pipeline/pipeline.h"

namespace eacgm {

struct AgentOptions : TraceOptions {
  std::string listen = "127.0.0.1:9464";     // HOST:PORT of the HTTP endpoint
  double duration_s = 0;                     // 0: until SIGINT/SIGTERM (tests and benchmarks)
  std::string state_dir = "/var/lib/eacgm";  // models, anomalies; "": keep nothing
  double window_s = 1;                       // the window model's windows
  double history_s = 3600;                   // models fit on this past
  size_t train_windows = 60, train_calls = 200;
  double train_seconds = 30;  // an operation's first model waits for this much of its calls
  double warm_up_s = 10;      // a process's first seconds are learned from, not judged
  double flight_seconds = 60;  // the flight recorder's past; 0: off
  uint64_t flight_mb = 256, flight_keep_mb = 2048;
  std::vector<std::string> match;  // --match: only processes whose command line matches
  double dump_interval_s = 60;     // at most one flight recording on request (/dump, SIGUSR1)
  bool allow_second_agent = false;  // start beside another agent on this node
  bool all_python = false;          // Python stacks of every CPython process, not only ML jobs'
  size_t gpu_kernel_names = 0;      // kernels with a `kernel` label of their own; 0: none
  // --call-duty: the hot call probes (torch operators, CUDA launches, copies, syncs) on for ON
  // of every PERIOD ("2s/20s"), "full", or "auto" (agent/call_duty.h)
  std::string call_duty = "auto";
};

// Where to listen, from HOST:PORT ([V6]:PORT too). Throws UsageError naming the fix.
struct ListenAddress {
  std::string host;
  int port = 0;
};
ListenAddress parse_listen(const std::string& text);
// Whether a peer's address (as the HTTP server gives it) is this host's loopback.
bool is_loopback_address(const std::string& addr);

// Runs until SIGINT/SIGTERM (or --duration); returns eacgm's exit status.
int run_agent(const AgentOptions& options);

}  // namespace eacgm
