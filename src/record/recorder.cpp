// The record driver: the pipeline runs until the target ends (or Ctrl-C, or --duration), into
// the recording; a complete recording however the run ends.
#include "record/recorder.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>

#include "gpu/gpu_samples.h"  // monotonic_now_ns
#include "pipeline/sink_sets.h"
#include "probe/target.h"
#include "report/report.h"
#include "util/error.h"

namespace eacgm {
namespace {

std::atomic<int> g_stop_signal{0};

void on_stop_signal(int sig) { g_stop_signal.store(sig); }

// Handlers without SA_RESTART so the ring-buffer poll returns at once on Ctrl-C.
void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void check_privileges() {
  if (geteuid() != 0)
    fail(
        "recording needs root (eBPF uprobes): run with sudo, or grant CAP_BPF, CAP_PERFMON "
        "and CAP_SYS_RESOURCE to the eacgm binary");
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

class RecordSession {
 public:
  explicit RecordSession(const RecordOptions& o)
      : opts_(o), sinks_(o.output, o.force, o.perfetto), pipeline_(o, sinks_.sink()) {
    pipeline_.on_process_exit = [this](uint32_t pid) { live_.erase(pid); };
  }

  int run();

 private:
  std::string add_targets();
  bool targets_done();
  void progress(uint64_t now_ns);
  void finish(std::optional<int> exit_status);

  const RecordOptions& opts_;
  RecordSinks sinks_;
  Pipeline pipeline_;
  std::unique_ptr<LaunchedCommand> command_;
  std::set<uint32_t> live_;  // -p targets still running
  uint64_t last_progress_ = 0;
};

// Says what is traced; returns it for the recording's meta.
std::string RecordSession::add_targets() {
  if (!opts_.command.empty()) {
    command_ = std::make_unique<LaunchedCommand>(opts_.command);
    pipeline_.expect_command(uint32_t(command_->pid()), command_->program());
    return join(opts_.command, " ");
  }
  if (opts_.all) {
    pipeline_.expect_all();
    return "--all";
  }
  check_pids_exist(opts_.pids);
  std::vector<std::string> names;
  for (uint32_t pid : opts_.pids) {
    names.push_back(std::to_string(pid));
    for (uint32_t p : pipeline_.attach_process(pid)) live_.insert(p);
  }
  return "-p " + join(names, ",");
}

bool RecordSession::targets_done() {
  if (command_) return command_->poll_exit().has_value();
  if (opts_.all) return false;
  std::erase_if(live_, [](uint32_t pid) { return kill(pid_t(pid), 0) != 0 && errno == ESRCH; });
  return live_.empty();
}

void RecordSession::progress(uint64_t now_ns) {
  if (opts_.quiet || !isatty(STDERR_FILENO) || now_ns - last_progress_ < 2'000'000'000ull) return;
  last_progress_ = now_ns;
  fprintf(stderr, "\reacgm: recording %.0f s, %llu calls, %llu dropped ",
          double(now_ns - pipeline_.start_monotonic_ns()) / 1e9,
          (unsigned long long)pipeline_.calls(),
          (unsigned long long)pipeline_.counters().ring_drops);
  fflush(stderr);
}

int RecordSession::run() {
  std::string target = add_targets();
  pipeline_.start(target);
  if (command_) {
    uint32_t child = uint32_t(command_->pid());
    command_->start([&] { pipeline_.snapshot_maps(child); });
  }
  // After the command's exec, so that the first sample names it by its program, not "eacgm".
  pipeline_.start_sampling();
  if (!opts_.quiet)
    fprintf(stderr, "eacgm: recording %s to %s (Ctrl-C to stop)\n", target.c_str(),
            opts_.output.c_str());

  uint64_t start = pipeline_.start_monotonic_ns();
  uint64_t stop_deadline = 0;  // after a stop signal: how long the command may take to exit
  bool forwarded = false;
  for (;;) {
    // Events that need an answer (process lifecycle, new mappings, Python code objects) wake
    // this loop at once, calls when the ring fills; the timeout only paces the periodic work.
    // Every wakeup costs (about 45 us of CPU in a VM): 10 a second, and one at --duration's end.
    int timeout_ms = 100;
    if (opts_.duration_s > 0) {
      double elapsed_ms = double(monotonic_now_ns() - start) / 1e6;
      timeout_ms = std::clamp(int(opts_.duration_s * 1e3 - elapsed_ms) + 1, 1, timeout_ms);
    }
    pipeline_.step(timeout_ms);
    uint64_t now = monotonic_now_ns();
    progress(now);
    if (!sinks_.sink().error().empty()) break;  // e.g. disk full: stop, keep what was written
    if (targets_done()) break;
    if (opts_.duration_s > 0 && double(now - start) / 1e9 >= opts_.duration_s) break;
    if (int sig = g_stop_signal.load()) {
      if (!command_) break;
      if (!forwarded) {
        // Ctrl-C reached the command too (same process group); SIGTERM/SIGHUP did not.
        if (sig != SIGINT) command_->send_signal(sig);
        forwarded = true;
        stop_deadline = now + 5'000'000'000ull;
      } else if (now > stop_deadline) {
        break;
      }
    }
  }
  pipeline_.stop();
  std::optional<int> status = command_ ? command_->poll_exit() : std::nullopt;
  bool write_failed = !sinks_.sink().error().empty();
  finish(status);
  if (write_failed) {
    // Tracing failed, the job did not: it keeps running, untraced, rather than being killed.
    if (command_ && !status)
      fprintf(stderr, "eacgm: recording stopped; %s (pid %d) keeps running untraced\n",
              command_->program().c_str(), int(command_->pid()));
    return 1;
  }
  if (command_) {
    if (status) return exit_code_of_status(*status);
    return 128 + (g_stop_signal.load() ? g_stop_signal.load() : SIGTERM);
  }
  return 0;
}

void RecordSession::finish(std::optional<int> exit_status) {
  if (!opts_.quiet && isatty(STDERR_FILENO) && last_progress_) fputc('\n', stderr);
  Sink& out = sinks_.sink();
  pipeline_.finish();
  if (exit_status) out.set_meta("exit_status", std::to_string(exit_code_of_status(*exit_status)));
  if (int sig = g_stop_signal.load()) out.set_meta("stopped_by_signal", std::to_string(sig));
  if (std::string err = sinks_.close(); !err.empty())
    fprintf(stderr, "eacgm: %s; the recording holds what was written before\n", err.c_str());
  sinks_.write_perfetto(opts_.force);
  if (!opts_.quiet) {
    print_summary(opts_.output, stdout);
    fprintf(stdout, "recording: %s\n", opts_.output.c_str());
    if (!opts_.perfetto.empty())
      fprintf(stdout, "perfetto trace: %s (open in https://ui.perfetto.dev)\n",
              opts_.perfetto.c_str());
  }
}

}  // namespace

int run_record(const RecordOptions& options) {
  LayerChoice::parse(options.layers);                // bad input first, before anything is
  PythonFilter check_filter(options.python_filter);  // created or loaded
  int targets = (!options.command.empty()) + (!options.pids.empty()) + options.all;
  if (targets != 1)
    throw UsageError("say what to trace: -- COMMAND [ARGS], -p PID[,PID...], or --all");
  if (!options.command.empty()) LaunchedCommand::check_program(options.command[0]);
  check_privileges();
  if (!options.perfetto.empty() && std::filesystem::exists(options.perfetto) && !options.force)
    throw UsageError(fmt::format(
        "output {} already exists (use --force to overwrite, or choose another --perfetto)",
        options.perfetto));
  install_signal_handlers();
  RecordSession session(options);
  return session.run();
}

}  // namespace eacgm
