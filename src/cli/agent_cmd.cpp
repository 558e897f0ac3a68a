// `eacgm agent`: options and validation; the work is in agent/agent.cpp.
#include <cmath>
#include <sstream>

#include "agent/agent.h"
#include "cli/commands.h"
#include "agent/call_duty.h"
#include "util/error.h"

namespace eacgm::cli {

namespace {

// The online detector's: windows, history, how much each model learns before it judges.
void add_detection_options(CLI::App* cmd, AgentOptions& o) {
  cmd->add_option("--window", o.window_s,
                  "seconds per window of the window model (the traced processes' run-queue "
                  "wait, CPU, network, memory, GPU and call rates)")
      ->capture_default_str()
      ->check(number_in(0.05, 3600.0, "a number of seconds"));
  cmd->add_option("--history", o.history_s,
                  "seconds of the past the models are fitted on (refitted every minute, or "
                  "every quarter of this if shorter)")
      ->capture_default_str()
      ->check(number_in(10.0, 7 * 86400.0, "a number of seconds"));
  cmd->add_option("--train-windows", o.train_windows,
                  "windows the window model needs before it judges (with --window 1: a minute)")
      ->capture_default_str()
      ->check(number_in(10, 1000000, "a count", true));
  cmd->add_option("--train-calls", o.train_calls,
                  "calls an operation's model needs before it judges")
      ->capture_default_str()
      ->check(number_in(10, 1000000, "a count", true));
  cmd->add_option("--train-seconds", o.train_seconds,
                  "seconds of an operation's calls its first model needs too (a job's start "
                  "is not its normal)")
      ->capture_default_str()
      ->check(number_in(0.0, 86400.0, "a number of seconds"));
  cmd->add_option("--warm-up", o.warm_up_s,
                  "seconds after a process is first seen in which its calls are learned from "
                  "but not judged (first-call allocations, compiles, warm-up steps)")
      ->capture_default_str()
      ->check(number_in(0.0, 86400.0, "a number of seconds"));
}

// The flight recorder's: what is held, when it is written, how much is kept.
void add_flight_options(CLI::App* cmd, AgentOptions& o) {
  cmd->add_option("--flight-seconds", o.flight_seconds,
                  "seconds of full-detail events held in memory; on an anomaly (at most one "
                  "every 5 minutes, written a sixth of this later), SIGUSR1 or POST /dump from "
                  "this host (root only) they are written as STATE_DIR/flight-TIME-REASON.eacgm.db, which "
                  "report, detect and export read; 0: off")
      ->capture_default_str()
      ->check(number_in(0.0, 3600.0, "a number of seconds"));
  cmd->add_option("--dump-interval", o.dump_interval_s,
                  "at most one flight recording on request (POST /dump, SIGUSR1) per this many "
                  "seconds; a request sooner gets 429 and when to ask again (the anomalies' own "
                  "recordings are limited apart); 0: no limit")
      ->capture_default_str()
      ->check(number_in(0.0, 86400.0, "a number of seconds"));
  cmd->add_option("--flight-mb", o.flight_mb,
                  "memory the flight recorder may hold, in MiB (the oldest events go first)")
      ->capture_default_str()
      ->check(number_in(1, 65536, "a number of MiB", true));
  cmd->add_option("--flight-keep-mb", o.flight_keep_mb,
                  "flight recordings kept in the state dir, in MiB (the oldest go first)")
      ->capture_default_str()
      ->check(number_in(1, 1 << 24, "a number of MiB", true));
}

}  // namespace

std::function<int()> add_agent(CLI::App& app) {
  auto opts = std::make_shared<AgentOptions>();
  auto layers = std::make_shared<std::string>("auto");
  CLI::App* cmd = app.add_subcommand(
      "agent",
      "Trace every process on this node that loads a traced library, continuously, and serve "
      "Prometheus metrics.\n"
      "  eacgm agent                           metrics at http://127.0.0.1:9464/metrics\n"
      "  eacgm agent --listen 0.0.0.0:9464     expose them to a Prometheus on another host\n"
      "Stop with SIGINT or SIGTERM. Per-call metrics are labelled by layer, operation (CUDA "
      "and NCCL API names, aten:: operators; Python functions are one series per process) and "
      "process name.\n"
      "Online detection: each operation's calls and each --window of the traced processes' "
      "resources are scored as they come against models fitted on the last --history; an "
      "anomaly is logged (one line with its probable cause), counted in "
      "eacgm_anomalies_total{layer,cause} and stored in STATE_DIR/anomalies.db. Models are "
      "saved in STATE_DIR/models.json: a restart resumes with them.");
  cmd->add_option("--listen", opts->listen,
                  "HOST:PORT of the HTTP endpoint (/metrics); loopback unless you say otherwise")
      ->capture_default_str();
  cmd->add_option("--layers", *layers,
                  "layers to trace, as for record: auto (the default) follows what each process "
                  "loads")
      ->capture_default_str();
  cmd->add_option("--python-calls", opts->python_calls,
                  "also time each call of these Python functions (patterns as for record, e.g. "
                  "user); off by default: it puts a probe on every Python call");
  cmd->add_option("--interval", opts->interval_ms,
                  "sampling interval of the gpu and host layers, in milliseconds")
      ->capture_default_str()
      ->check(number_in(1.0, 60000.0, "a number of milliseconds"));
  cmd->add_option("--nvml-library", opts->nvml_library,
                  "NVML to load for the gpu layer (default: $EACGM_NVML_LIBRARY, else the "
                  "driver's libnvidia-ml.so.1)");
  cmd->add_option("--duration", opts->duration_s, "stop after this many seconds (0: no limit)")
      ->check(number_in(0.0, 1e9, "a number of seconds"));
  cmd->add_option("--ring-mb", opts->ring_mb, "ring buffer size in MiB (power of two)")
      ->capture_default_str()
      ->check(number_in(1, 4096, "a number of MiB", true));
  cmd->add_option("--state-dir", opts->state_dir,
                  "where models and anomalies are kept across restarts (created 0700 if "
                  "missing); '' keeps nothing")
      ->capture_default_str();
  cmd->add_option("--gpu-kernel-names", opts->gpu_kernel_names,
                  "K: the K kernels with the most GPU time in a process's first 30 s of "
                  "kernels get a `kernel` label of their own (the function's name, e.g. "
                  "vectorized_elementwise_kernel) on eacgm_gpu_kernel_seconds_total and "
                  "eacgm_gpu_kernels_total, kept for good; every other kernel, and every kernel "
                  "of those first 30 s, counts under kernel=\"other\". 0 (the default) keeps the "
                  "series per device only")
      ->capture_default_str()
      ->check(number_in(0, 100, "a count", true));
  cmd->add_option("--call-duty", opts->call_duty,
                  "the hot call probes (torch operators; CUDA launches, copies, sets and syncs; "
                  "each traced call costs the calling thread ~1-3 us): 'auto' keeps them on "
                  "while every traced thread makes fewer than 5,000 such calls a second and, "
                  "while one makes more, attaches them 2 s of every 20 s (2s/20s); ON/PERIOD "
                  "cycles them always; 'full' never. While cycled, their metrics count the "
                  "calls of the on phases (eacgm_call_duty_ratio says the share), their models "
                  "learn and judge those calls, the window model carries their rates over the "
                  "off phases, and a flight recording holds none of them from those. "
                  "Collectives, allocations, kernel lookups, host and GPU layers stay on")
      ->capture_default_str()
      ->check([](const std::string& s) {
        CallDutySetting d;
        std::string why;
        return parse_call_duty(s, d, why) ? std::string() : "'" + s + "': " + why;
      });
  add_detection_options(cmd, *opts);
  add_flight_options(cmd, *opts);
  cmd->add_option("--match", opts->match,
                  "only processes whose command line matches this regular expression (searched "
                  "anywhere in it; repeat for more), e.g. --match 'torchrun|train\\.py'. Others "
                  "are still probed, but not counted, modelled or recorded");
  cmd->add_flag("--all-python", opts->all_python,
                "Python stacks in every CPython process; by default only in processes that "
                "map CUDA, NCCL or PyTorch (the jobs; not the node's Python tools)");
  cmd->add_flag("--allow-second-agent", opts->allow_second_agent,
                "start even when another agent traces this node (it holds /run/eacgm/agent.lock): "
                "each traced call then pays both agents' probes. One agent per --state-dir "
                "always");
  cmd->add_flag("-q,--quiet", opts->quiet, "print only errors, warnings and anomalies");
  return [cmd, opts, layers]() {
    (void)cmd;
    if ((opts->ring_mb & (opts->ring_mb - 1)) != 0)
      throw UsageError(
          fmt::format("--ring-mb {}: must be a power of two (e.g. 32, 64)", opts->ring_mb));
    opts->layers = split_list("--layers", *layers, "auto");  // as record's: a stray comma is a typo
    return run_agent(*opts);
  };
}

}  // namespace eacgm::cli
