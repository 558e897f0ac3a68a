// `eacgm record`: options and validation; the work is in record/recorder.cpp.
#include <cmath>
#include <sstream>

#include "cli/commands.h"
#include "probe/torch_ops.h"
#include "events.h"
#include "gputime/duty.h"
#include "record/recorder.h"
#include "util/error.h"

namespace eacgm::cli {

std::vector<std::string> split_list(const std::string& option, const std::string& s,
                                    const char* example) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  if (!s.empty() && s.back() == ',') out.emplace_back();
  if (out.empty())
    throw UsageError(fmt::format("{} '': give at least one (e.g. {} {})", option, option, example));
  for (const auto& i : out)
    if (i.empty())
      throw UsageError(fmt::format("{} {}: an empty element (a stray comma?); e.g. {} {}", option,
                                   s, option, example));
  return out;
}

namespace {

void add_layer_options(CLI::App* cmd, std::string& layers, std::string& torch_ops) {
  cmd->add_option("--layers", layers,
                  "comma-separated layers to trace. auto (the default): each layer whose library "
                  "a traced process maps, decided per process and again at each dlopen: cuda "
                  "for libcudart/libcuda, comm for libnccl or libtorch's c10d, torch for "
                  "libtorch_cpu, python for CPython processes, gpu when NVML loads, gputime "
                  "where CUDA loads eacgm's injection library (record sets "
                  "CUDA_INJECTION64_PATH for the command it launches), host always; "
                  "auto,LAYER adds LAYER, auto,-LAYER leaves it out (e.g. auto,-gputime). Or "
                  "name them: cuda (runtime and driver API calls), "
                  "comm (NCCL collectives and communicators), torch (PyTorch operators through "
                  "the dispatcher, e.g. aten::linear; see --torch-ops), python (CPython "
                  "3.10-3.13: the Python stack of each cuda/comm/torch call and of each CPU "
                  "profile sample, read from the interpreter, no probe per Python call; "
                  "per-call timing of functions is --python-calls), gpu (NVML: "
                  "utilization, memory, power, clocks, PCIe, throttling, ECC, XIDs, per-process "
                  "use; sampled), gputime (CUPTI: when each kernel, copy and memset ran on "
                  "the GPU, linked to its launch; costs a launch-bound job ~10-15%), host "
                  "(scheduler, network and block I/O counters, sampled)")
      ->capture_default_str();
  cmd->add_option("--torch-ops", torch_ops,
                  "PyTorch operators the torch layer traces: comma-separated globs on "
                  "name[.overload] (aten:: optional; a pattern without '.' takes every "
                  "overload). 'default' is the curated set of matmuls, convolutions, attention, "
                  "norms, softmax, activations, embedding, dropout, losses and optimizer "
                  "updates; e.g. default,add,mul or '*' (every operator: thousands of probes, "
                  "slow to attach and costly)")
      ->capture_default_str();
}

struct PythonCallOptions {
  CLI::Option* calls;
  CLI::Option* former;  // --python-filter
};

PythonCallOptions add_python_options(CLI::App* cmd, RecordOptions& o) {
  CLI::Option* python_calls = cmd->add_option("--python-calls", o.python_calls,
                  "python layer: also time each call of these Python functions, "
                  "PATTERN[,PATTERN...]: 'user' (code outside the standard library and "
                  "site-/dist-packages), a dotted name module.qualname with * and ? wildcards "
                  "(a plain name covers what is under it: torch.nn), or a file path (any "
                  "pattern with a '/'); '*' is every function; -PATTERN leaves out what it "
                  "matches (user,torch.nn,-torch.nn.modules.module.Module._* adds torch.nn's "
                  "modules without nn.Module's _call_impl and __getattr__ plumbing). Off by "
                  "default: it puts a probe on every Python call, about 1.5 us each whatever "
                  "the patterns choose (the CPU profile, --sample-hz, shows where Python time "
                  "goes at a fraction of that)");
  CLI::Option* former = cmd->add_option("--python-filter", o.python_calls,
                  "the former name of --python-calls (it now also turns per-call timing on)")
      ->group("");  // (not excludes(): --help would print "Excludes:" and a hidden name)
  cmd->add_option("--python-stack-depth", o.python_stack_depth,
                  "python layer: innermost Python frames kept for each cuda/comm/torch call "
                  "(at most 32; each costs about 0.06 us per call on CPython 3.11+, which reads a "
                  "block of frames at once, up to ~0.25 us on 3.10, or on 3.12+ with "
                  "--python-calls, which read each; CPU profile samples keep 32)")
      ->capture_default_str()
      ->check(number_in(1, EACGM_PY_MAX_STACK, "a count of frames", true));
  cmd->add_flag("--python-no-hook", o.python_no_hook,
                "python layer: leave CPython 3.11+'s inlined Python-to-Python calls alone; then "
                "only calls entered from C are recorded there (stacks are complete either way). "
                "The hook eacgm sets otherwise makes each call a C call, which on 3.12 lowers "
                "the deepest Python recursion to about 745 frames (RecursionError beyond), and "
                "on 3.13 caps a raised sys.setrecursionlimit at about 5,000 frames");
  return {python_calls, former};
}

void add_sampling_options(CLI::App* cmd, RecordOptions& o) {
  cmd->add_option("--sample-hz", o.sample_hz,
                  "CPU profile: sample each traced thread this many times per second of CPU "
                  "it uses (a perf event per CPU), with its native stack and, for CPython, its "
                  "Python stack; 0: no profile. Shown by `eacgm report`, exported by `eacgm "
                  "export --pprof`. With it, an off-CPU profile of the same threads: where they "
                  "block (sleeps, locks, I/O, waits for other ranks), one sample per period of "
                  "blocked time, long waits whole. Needs CAP_PERFMON (root has it)")
      ->capture_default_str()
      ->check(number_in(0, 999, "a number of samples per second", true));
  cmd->add_flag("!--no-off-cpu", o.off_cpu,
                "leave out the off-CPU profile (it reads the stacks of a traced thread at each "
                "switch that blocks it: about 1-4 us on top of the switch)");
  cmd->add_option("--nvml-library", o.nvml_library,
                  "NVML to load for the gpu layer (default: $EACGM_NVML_LIBRARY, else the "
                  "driver's libnvidia-ml.so.1)");
  cmd->add_option("--interval,--gpu-interval", o.interval_ms,
                  "sampling interval of the sampled layers (gpu, host), in milliseconds; GPU "
                  "utilization, temperature, power limit, ECC and per-process use, which NVML "
                  "refreshes or which change slowly, are read at most every 100 ms (so is PCIe "
                  "throughput where the driver has no PCIe byte counters: that call takes 20 ms)")
      ->capture_default_str()
      ->check(number_in(1.0, 60000.0, "a number of milliseconds"));
}

void check_python_calls(const PythonCallOptions& py, const RecordOptions& o) {
  if (py.calls->count() && py.former->count())
    throw UsageError(
        "--python-filter is the former name of --python-calls: give --python-calls only");
  if ((py.calls->count() || py.former->count()) && o.python_calls.empty())
    throw UsageError(
        "--python-calls '': name the functions to time (e.g. user, or mypkg.*), or leave "
        "the option out");
  if (py.former->count() && !o.quiet)
    fprintf(stderr,
            "eacgm: --python-filter is now --python-calls (it turns per-call timing on)\n");
}

std::vector<uint32_t> parse_pids(const std::string& pids) {
  std::vector<uint32_t> out;
  for (const auto& p : pids.empty() ? std::vector<std::string>{}
                                     : split_list("-p", pids, "4242,4243")) {
    try {
      size_t used = 0;
      unsigned long v = std::stoul(p, &used);
      if (used != p.size() || v > UINT32_MAX) throw std::invalid_argument(p);
      out.push_back(uint32_t(v));
    } catch (const std::exception&) {
      throw UsageError(
          fmt::format("-p {}: '{}' is not a process id (give numbers, e.g. "
                      "-p 4242,4243)",
                      pids, p));
    }
  }
  return out;
}

}  // namespace

std::function<int()> add_record(CLI::App& app) {
  auto opts = std::make_shared<RecordOptions>();
  auto pids = std::make_shared<std::string>();
  auto layers = std::make_shared<std::string>("auto");
  auto torch_ops = std::make_shared<std::string>("default");
  CLI::App* cmd = app.add_subcommand(
      "record",
      "Trace a program and write a recording.\n"
      "  eacgm record -- python3 train.py      launch and trace a command and its children\n"
      "  eacgm record -p 4242                  trace running processes (and their children)\n"
      "  eacgm record --all --duration 60      trace every process that uses CUDA\n"
      "  eacgm record --python-calls user -- python3 train.py\n"
      "                                        + each call of your own Python functions "
      "(costs a probe per Python call)\n"
      "  eacgm record --layers cuda,gpu --interval 10 -- ./a.out\n"
      "                                        only these layers, GPU sampled at 100 Hz\n"
      "Layers follow what each traced process loads (--layers auto, the default); the line "
      "printed at the end says which were traced and why.\n"
      "CUDA and NCCL durations are host-side API times (enqueue time for async calls), not GPU "
      "time.");
  cmd->add_option("-o,--output", opts->output, "recording file (SQLite)")->capture_default_str();
  cmd->add_flag("-f,--force", opts->force, "overwrite existing output files");
  add_layer_options(cmd, *layers, *torch_ops);
  PythonCallOptions py = add_python_options(cmd, *opts);
  add_sampling_options(cmd, *opts);
  cmd->add_option("--gputime-duty", opts->gputime_duty,
                  "gputime layer in the command record launches: 'full' (CUPTI's records on "
                  "throughout: every kernel, ~3-10 us per launch on the launching thread) or "
                  "ON/PERIOD, on for the first ON of every PERIOD (e.g. 1s/10s: a tenth of the "
                  "cost; units ms, s, m; ON at least 10ms). A job that loads eacgm's library "
                  "itself (the agent, -p) gets $EACGM_GPUTIME_DUTY, else " +
                      std::string(gputime::kDefaultDuty))
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& s) {
            gputime::Duty d;
            return gputime::parse_duty(s.c_str(), d)
                       ? std::string()
                       : "'" + s + "' is not 'full' or ON/PERIOD with units, ON at least 10ms "
                             "and shorter than PERIOD, each at most a day (e.g. 1s/10s, 200ms/5s)";
          },
          "full|ON/PERIOD", ""));
  cmd->add_option("--perfetto", opts->perfetto, "also write a Perfetto trace to this file");
  cmd->add_option("--duration", opts->duration_s, "stop after this many seconds (0: no limit)")
      ->check(number_in(0.0, 1e9, "a number of seconds"));
  cmd->add_option("-p,--pid", *pids, "trace these running processes: PID[,PID...]");
  cmd->add_flag("--all", opts->all, "trace every process mapping a traced library");
  cmd->add_option("--ring-mb", opts->ring_mb, "ring buffer size in MiB (power of two)")
      ->capture_default_str()
      ->check(number_in(1, 4096, "a number of MiB", true));
  cmd->add_flag("-q,--quiet", opts->quiet, "print only errors and warnings");
  cmd->add_option("command", opts->command, "the command to run and trace, after --");
  cmd->positionals_at_end();

  return [cmd, opts, pids, layers, torch_ops, py]() {
    check_python_calls(py, *opts);
    opts->pids = parse_pids(*pids);
    if ((opts->ring_mb & (opts->ring_mb - 1)) != 0)
      throw UsageError(
          fmt::format("--ring-mb {}: must be a power of two (e.g. 32, 64)", opts->ring_mb));
    opts->layers = split_list("--layers", *layers, "auto");
    opts->torch_ops = split_list("--torch-ops", *torch_ops, "default,add,mul");
    TorchOpFilter check_patterns(opts->torch_ops);  // a typo is refused now, not at the end
    (void)cmd;
    return run_record(*opts);
  };
}

}  // namespace eacgm::cli
