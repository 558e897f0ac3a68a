// The record driver: the pipeline runs until the target ends (or Ctrl-C, or --duration), into
// the recording; a complete recording however the run ends.
#include "record/recorder.h"

#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
#include "gputime/embedded.h"
#include "probe/library_finder.h"  // looks_like_gputime_library
#include "record/record_sinks.h"
#include "probe/target.h"
#include "report/report.h"
#include "util/error.h"
#include "util/output_file.h"
#include "util/privileges.h"

namespace eacgm {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_signals{0};         // how many arrived
std::atomic<bool> g_sent_by_process{false};  // the last one came from kill(), not a terminal

void on_stop_signal(int sig, siginfo_t* info, void*) {
  g_sent_by_process.store(info && info->si_code <= 0);  // SI_USER, SI_QUEUE, SI_TKILL
  g_stop_signal.store(sig);
  g_stop_signals.fetch_add(1);
}

// Handlers without SA_RESTART so the ring-buffer poll returns at once on Ctrl-C.
void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // the launched command gets its own back (inherited_signals.h)
}

// One line per privilege that is missing (util/privileges.h says which part needs what):
// without CAP_BPF and CAP_PERFMON nothing can be traced; other users' processes (-p, --all)
// are traced without some of what they hold unless CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH.
void check_privileges(const RecordOptions& o) {
  require_tracing_privileges("recording");
  Privileges p = current_privileges();
  bool others = o.all;
  for (uint32_t pid : o.pids) {
    struct stat st {};
    others |= stat(fmt::format("/proc/{}", pid).c_str(), &st) == 0 && st.st_uid != geteuid();
  }
  if (std::string gaps = other_users_gaps(p); !gaps.empty() && others)
    fprintf(stderr, "eacgm: %s\n", gaps.c_str());
  if (p.memlock_matters)
    fprintf(stderr,
            "eacgm: no CAP_SYS_RESOURCE on a kernel before 5.11: BPF maps count against "
            "RLIMIT_MEMLOCK (raise it with ulimit -l, or grant CAP_SYS_RESOURCE)\n");
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
  std::vector<std::string> gputime_environment();
  bool targets_done();
  void progress(uint64_t now_ns);
  void finish(std::optional<int> exit_status);
  void record_until_done();
  bool stop_step(uint64_t now, uint64_t start);
  int result(std::optional<int> status, bool write_failed) const;

  const RecordOptions& opts_;
  RecordSinks sinks_;
  Pipeline pipeline_;
  // the gputime layer's injection library, written for the command (removed at the end: the
  // processes that loaded it keep it mapped)
  std::unique_ptr<gputime::LibraryFile> gputime_;
  std::unique_ptr<LaunchedCommand> command_;
  std::set<uint32_t> live_;  // -p targets still running
  uint64_t last_progress_ = 0;
  bool stopped_by_duration_ = false;  // --duration ended a launched command
  // stopping a launched command (record_until_done)
  int signals_handled_ = 0;
  uint64_t stopping_since_ = 0;
  bool said_waiting_ = false, killed_ = false;
};

// The gputime layer in the command eacgm launches: CUDA loads the injection library that
// CUDA_INJECTION64_PATH names at the command's first CUDA call, NCCL the profiler plugin that
// NCCL_PROFILER_PLUGIN names at its first communicator; eacgm's one library is both. A variable
// set already (another profiler's library, or ours) is left as it is, and the other still set.
std::vector<std::string> RecordSession::gputime_environment() {
  std::vector<std::string> taken;  // the variables another tool holds
  std::vector<const char*> ours;
  for (const char* var : {"CUDA_INJECTION64_PATH", "NCCL_PROFILER_PLUGIN"}) {
    const char* set = getenv(var);
    if (!set || !*set)
      ours.push_back(var);
    else if (!looks_like_gputime_library(set))
      taken.push_back(fmt::format("{} is already set ({}, another tool's library): left as it is",
                                  var, set));
  }
  if (ours.empty()) {
    if (!taken.empty()) pipeline_.gputime_off(join(taken, "; "));
    return {};
  }
  gputime_ = std::make_unique<gputime::LibraryFile>();
  if (gputime_->path().empty()) {
    pipeline_.gputime_off(gputime_->why());
    return {};
  }
  for (const std::string& why : taken) fprintf(stderr, "eacgm: layer gputime: %s\n", why.c_str());
  std::vector<std::string> env;
  for (const char* var : ours) env.push_back(std::string(var) + "=" + gputime_->path());
  env.push_back("EACGM_GPUTIME_DUTY=" + opts_.gputime_duty);
  return env;
}

// Says what is traced; returns it for the recording's meta.
std::string RecordSession::add_targets() {
  if (!opts_.command.empty()) {
    std::vector<std::string> env;
    if (pipeline_.layer_choice().armed("gputime")) env = gputime_environment();
    command_ = std::make_unique<LaunchedCommand>(opts_.command, env);
    pipeline_.expect_command(uint32_t(command_->pid()), command_->program(),
                             gputime_ ? gputime_->path() : "");
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
    command_->start([&] { pipeline_.command_exec(child); });
  }
  // After the command's exec, so that the first sample names it by its program, not "eacgm".
  pipeline_.start_sampling();
  sinks_.started();  // from here on the recording is kept, however the run ends
  if (!opts_.quiet)
    fprintf(stderr, "eacgm: recording %s to %s (Ctrl-C to stop)\n", target.c_str(),
            opts_.output.c_str());

  record_until_done();
  pipeline_.stop();
  std::optional<int> status = command_ ? command_->poll_exit() : std::nullopt;
  if (command_ && !status && killed_) status = command_->wait_exit(2'000);
  bool write_failed = !sinks_.sink().error().empty();
  finish(status);
  if (command_ && !status)
    fprintf(stderr, "eacgm: recording stopped; %s (pid %d) keeps running untraced\n",
            command_->program().c_str(), int(command_->pid()));
  return result(status, write_failed);
}

// Stopping a launched command is part of its recording: a stop signal is passed on to it
// (SIGINT from the terminal reached its process group already), --duration sends it SIGTERM
// (as nsys does), and eacgm records until it exits. A second signal stops recording at once
// and leaves the command running, said in one line; so does a command that outlives
// --duration's SIGTERM by kStopGrace (then SIGKILL: --duration is a limit, unattended).
constexpr uint64_t kStopGrace = 10'000'000'000ull;

void RecordSession::record_until_done() {
  uint64_t start = pipeline_.start_monotonic_ns();
  for (;;) {
    // Events that need an answer (process lifecycle, new mappings, Python code objects) wake
    // this loop at once, calls when the ring fills; the timeout only paces the periodic work.
    // Every wakeup costs (about 45 us of CPU in a VM): 10 a second, and one at --duration's end.
    int timeout_ms = 100;
    if (opts_.duration_s > 0 && !stopping_since_) {
      double elapsed_ms = double(monotonic_now_ns() - start) / 1e6;
      timeout_ms = std::clamp(int(opts_.duration_s * 1e3 - elapsed_ms) + 1, 1, timeout_ms);
    }
    pipeline_.step(timeout_ms);
    uint64_t now = monotonic_now_ns();
    progress(now);
    if (!sinks_.sink().error().empty()) return;  // e.g. disk full: stop, keep what was written
    if (targets_done()) return;
    if (stop_step(now, start)) return;
  }
}

// Signals and --duration: passes them on to a launched command, says when it is slow to exit,
// kills it when --duration's grace is over. True: stop recording now.
bool RecordSession::stop_step(uint64_t now, uint64_t start) {
  bool duration_over = opts_.duration_s > 0 && double(now - start) / 1e9 >= opts_.duration_s;
  if (int n = g_stop_signals.load(); n > signals_handled_) {
    signals_handled_ = n;
    if (!command_ || stopping_since_) return true;  // the second signal: stop now
    int sig = g_stop_signal.load();
    if (sig != SIGINT || g_sent_by_process.load()) command_->send_signal(sig);
    stopping_since_ = now;
  } else if (duration_over && !stopping_since_) {
    if (!command_) return true;
    stopped_by_duration_ = true;
    command_->send_signal(SIGTERM);
    stopping_since_ = now;
    if (!opts_.quiet)
      fprintf(stderr, "eacgm: --duration %g s reached: sent SIGTERM to %s (pid %d)\n",
              opts_.duration_s, command_->program().c_str(), int(command_->pid()));
  }
  if (stopping_since_ && !said_waiting_ && now - stopping_since_ > kStopGrace / 2) {
    said_waiting_ = true;
    fprintf(stderr,
            "eacgm: waiting for %s (pid %d) to exit; Ctrl-C again stops recording now and "
            "leaves it running\n",
            command_->program().c_str(), int(command_->pid()));
  }
  if (stopped_by_duration_ && !killed_ && now - stopping_since_ > kStopGrace) {
    killed_ = true;
    command_->send_signal(SIGKILL);
    fprintf(stderr, "eacgm: %s (pid %d) did not exit %g s after SIGTERM: sent SIGKILL\n",
            command_->program().c_str(), int(command_->pid()), double(kStopGrace) / 1e9);
  }
  return false;
}

// eacgm's exit status: the launched command's, or 1 when writing failed.
int RecordSession::result(std::optional<int> status, bool write_failed) const {
  if (write_failed) return 1;  // tracing failed, the job did not: it was not stopped
  if (command_) {
    if (status && stopped_by_duration_) {
      // what --duration asked for: a complete recording of that long; the command's own
      // status is in the recording (exit_status) and here
      if (!opts_.quiet)
        fprintf(stderr, "eacgm: %s exited with status %d after --duration's SIGTERM\n",
                command_->program().c_str(), exit_code_of_status(*status));
      return 0;
    }
    if (status) {
      // said last, so that it is not lost above the summary: the command's own output (a
      // traceback) may be far up
      if (!opts_.quiet && !g_stop_signal.load()) {
        fflush(stdout);  // after the summary, also where stdout is a pipe
        if (WIFSIGNALED(*status))
          fprintf(stderr, "eacgm: %s (pid %d) was killed by SIG%s%s; the recording holds its run\n",
                  command_->program().c_str(), int(command_->pid()),
                  sigabbrev_np(WTERMSIG(*status)) ? sigabbrev_np(WTERMSIG(*status)) : "?",
                  WCOREDUMP(*status) ? " (core dumped)" : "");
        else if (exit_code_of_status(*status) != 0)
          fprintf(stderr, "eacgm: %s (pid %d) exited with status %d; the recording holds its run\n",
                  command_->program().c_str(), int(command_->pid()), exit_code_of_status(*status));
      }
      return exit_code_of_status(*status);
    }
    return 128 + (g_stop_signal.load() ? g_stop_signal.load() : SIGTERM);
  }
  return 0;
}

void RecordSession::finish(std::optional<int> exit_status) {
  if (!opts_.quiet && isatty(STDERR_FILENO) && last_progress_) fputc('\n', stderr);
  Sink& out = sinks_.sink();
  // CUDA was used and no injection library reported (else the layer is on, and this is not
  // said): why, as far as eacgm can tell (a reason said earlier stays)
  if (!opts_.command.empty() && gputime_ && !gputime_->path().empty()) {
    std::string none = no_gpu_driver();
    pipeline_.gputime_off(!none.empty() ? none
                                        : "CUDA never loaded eacgm's injection library (the job "
                                          "made no CUDA context, or replaced "
                                          "CUDA_INJECTION64_PATH in its own environment)");
  } else if (opts_.command.empty()) {
    pipeline_.gputime_off("a process eacgm did not launch gets GPU time only when its own "
                          "environment names eacgm's library (eacgm gputime-library)");
  }
  pipeline_.finish();
  if (exit_status) out.set_meta("exit_status", std::to_string(exit_code_of_status(*exit_status)));
  if (int sig = g_stop_signal.load()) out.set_meta("stopped_by_signal", std::to_string(sig));
  if (stopped_by_duration_) out.set_meta("stopped_by_duration_s", fmt::format("{:g}", opts_.duration_s));
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
  LayerChoice::parse(options.layers);  // bad input first, before anything is created or loaded
  if (!options.python_calls.empty()) PythonFilter check_filter(options.python_calls);
  int targets = (!options.command.empty()) + (!options.pids.empty()) + options.all;
  if (targets != 1)
    throw UsageError("say what to trace: -- COMMAND [ARGS], -p PID[,PID...], or --all");
  if (!options.command.empty()) LaunchedCommand::check_program(options.command[0]);
  check_privileges(options);
  if (!options.pids.empty()) check_pids_exist(options.pids);  // before the output is created
  if (!options.perfetto.empty()) check_output_file(options.perfetto, options.force, "--perfetto");
  check_output_file(options.output, options.force, "-o");
  install_signal_handlers();
  RecordSession session(options);
  return session.run();
}

}  // namespace eacgm
