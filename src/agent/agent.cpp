// The agent loop: the pipeline over the whole node, /metrics on an HTTP thread, its own
// health as metrics, and a clean stop on SIGINT/SIGTERM.
#include "agent/agent.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/agent_sinks.h"
#include "agent/anomaly_reporter.h"
#include "agent/call_duty.h"
#include "store/agent_anomalies.h"
#include "agent/http_server.h"
#include "agent/instance_lock.h"
#include "detect/detector.h"  // cause_kinds
#include "export/metrics.h"
#include "gpu/gpu_samples.h"  // monotonic_now_ns, realtime_minus_monotonic_ns
#include "util/error.h"
#include "util/privileges.h"

namespace eacgm {
namespace {

// Held by the agent that traces the node (--allow-second-agent leaves it alone).
constexpr const char* kNodeLock = "/run/eacgm/agent.lock";

std::atomic<int> g_agent_stop{0};
std::atomic<int> g_dump_signal{0};

void on_agent_stop(int sig) { g_agent_stop.store(sig); }
void on_dump_signal(int) { g_dump_signal.store(1); }

// Flight recordings asked for (POST /dump, SIGUSR1): at most one per interval, whoever asks.
// The HTTP thread queues the requests; the loop, which owns the recorder, answers them.
class DumpRequests {
 public:
  explicit DumpRequests(double interval_s) : interval_ns_(uint64_t(interval_s * 1e9)) {}
  void ask(uint64_t id) {
    std::lock_guard lock(mu_);
    asked_.push_back(id);
  }
  // The path being written, or why none is.
  std::pair<std::string, std::string> write(FlightRecorder& flight, const std::string& reason,
                                            uint64_t now) {
    if (last_ns_ && now - last_ns_ < interval_ns_) {
      retry_s_ =
          std::max<uint64_t>(1, (last_ns_ + interval_ns_ - now + 999'999'999) / 1'000'000'000);
      return {"", fmt::format("not written: one was written {:.0f} s ago ({}); the next can be "
                              "asked for in {} s (--dump-interval)",
                              double(now - last_ns_) / 1e9, last_path_, retry_s_)};
    }
    std::string path = flight.request(reason, 0);
    if (path.empty())
      return {"", "the flight recorder is off (--flight-seconds 0 or --state-dir '')"};
    last_ns_ = now;
    last_path_ = path;
    return {path, ""};
  }
  void answer(HttpServer& http, FlightRecorder& flight, uint64_t now) {
    std::vector<uint64_t> ids;
    {
      std::lock_guard lock(mu_);
      ids.swap(asked_);
    }
    for (uint64_t id : ids) {
      auto [path, why] = write(flight, "http", now);
      if (!path.empty()) {
        fprintf(stderr, "eacgm: agent: writing flight recording %s (asked over HTTP)\n",
                path.c_str());
        http.answer(id, {200, "text/plain", path + "\n", {}});
      } else if (why.rfind("not written", 0) == 0) {
        http.answer(id,
                    {429, "text/plain", why + "\n", {{"Retry-After", std::to_string(retry_s_)}}});
      } else {
        http.answer(id, {409, "text/plain", why + "\n", {}});
      }
    }
  }

 private:
  std::mutex mu_;
  std::vector<uint64_t> asked_;
  uint64_t interval_ns_, last_ns_ = 0, retry_s_ = 0;
  std::string last_path_;
};

uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * uint64_t(sysconf(_SC_PAGESIZE));
}

double cpu_seconds() {
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  return double(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
         double(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
}

std::string node_name() {
  utsname u{};
  uname(&u);
  return u.nodename;
}

// The state dir: created (0700: it holds what the traced jobs ran) when missing.
std::string make_state_dir(const std::string& dir) {
  if (dir.empty()) return dir;
  std::error_code ec;
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {  // a directory given that exists keeps its mode
    std::filesystem::path p(dir);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    if (!ec && mkdir(dir.c_str(), 0700) != 0) ec = std::error_code(errno, std::generic_category());
  }
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail(
        "--state-dir {}: {} (give a directory the agent may create and write, or --state-dir '' "
        "to keep no state)",
        dir, ec ? ec.message() : "not a directory");
  return dir;
}

// One agent per state dir (its models and store), one per node unless told: a second's probes
// would sit beside the first's, and every traced call would pay both.
void take_instance_locks(const AgentOptions& o, const std::string& state, InstanceLock& state_lock,
                         InstanceLock& node_lock) {
  if (!state.empty())
    if (std::string why = state_lock.take(state + "/agent.lock"); !why.empty())
      fail(
          "--state-dir {}: {} ({}/agent.lock): stop that agent, or give this one another "
          "--state-dir",
          state, state_lock.busy() ? "another agent uses it, " + why : why, state);
  if (!o.allow_second_agent) {
    std::string why = node_lock.take(kNodeLock);
    if (node_lock.busy())
      fail(
          "another eacgm agent traces this node ({}, {}): a second would attach its probes "
          "beside the first's and every traced call would pay both (stop it, or give "
          "--allow-second-agent)",
          why, kNodeLock);
    if (!why.empty() && !o.quiet)
      fprintf(stderr, "eacgm agent: cannot tell whether another agent traces this node: %s\n",
              why.c_str());
  }
}

}  // namespace

bool is_loopback_address(const std::string& addr) {
  return addr == "::1" || addr.rfind("127.", 0) == 0 || addr.rfind("::ffff:127.", 0) == 0;
}

ListenAddress parse_listen(const std::string& text) {
  auto bad = [&](const char* why) {
    return UsageError(
        fmt::format("--listen {}: {} (give HOST:PORT, e.g. 127.0.0.1:9464, or "
                    "0.0.0.0:9464 to expose it)",
                    text, why));
  };
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) throw bad("no host and port");
  ListenAddress a;
  a.host = text.substr(0, colon);
  if (a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  std::string port = text.substr(colon + 1);
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), a.port);
  if (ec != std::errc() || end != port.data() + port.size() || a.port < 1 || a.port > 65535)
    throw bad("the port must be a number from 1 to 65535");
  return a;
}

namespace {

// Bad options are usage errors before anything is created.
ListenAddress check_options(const AgentOptions& o) {
  ListenAddress where = parse_listen(o.listen);
  CallDutySetting duty;
  if (std::string why; !parse_call_duty(o.call_duty, duty, why))
    throw UsageError(fmt::format("--call-duty {}: {}", o.call_duty, why));
  LayerChoice::parse(o.layers);
  if (!o.python_calls.empty()) PythonFilter check(o.python_calls);
  if (!o.match.empty()) {
    SinkFanout none;
    MatchFilter check(o.match, none, read_command_line);
  }
  return where;
}

// Before anything loads (BPF takes seconds): a stop signal then ends the agent cleanly.
void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_agent_stop;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &sa, nullptr);
  sa.sa_handler = on_dump_signal;
  sigaction(SIGUSR1, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

DetectionOptions detection_options(const AgentOptions& o, const std::string& state) {
  DetectionOptions d;
  d.window_ns = uint64_t(o.window_s * 1e9);
  d.history_ns = uint64_t(o.history_s * 1e9);
  d.refit_every_ns = std::min<uint64_t>(d.refit_every_ns, d.history_ns / 4);
  d.train_windows = o.train_windows;
  d.train_calls = o.train_calls;
  d.train_span_ns = uint64_t(o.train_seconds * 1e9);
  d.warm_up_ns = uint64_t(o.warm_up_s * 1e9);
  d.sample_interval_ns = uint64_t(o.interval_ms * 1e6);
  if (!state.empty()) d.models_path = state + "/models.json";
  return d;
}

FlightOptions flight_options(const AgentOptions& o, const std::string& state) {
  FlightOptions f;
  f.dir = state;
  f.seconds_ns = uint64_t(o.flight_seconds * 1e9);
  f.max_bytes = o.flight_mb << 20;
  f.keep_bytes = o.flight_keep_mb << 20;
  if (o.flight_seconds == 0) f.dir.clear();
  return f;
}

// GET /metrics, GET /, and POST /dump (answered by the loop, which owns the flight recorder).
void add_routes(HttpServer& http, AgentSinks& sinks, DumpRequests& dumps) {
  http.route("GET", "/metrics", [&](const HttpRequest&) -> std::optional<HttpResponse> {
    return HttpResponse{
        200, "text/plain; version=0.0.4; charset=utf-8", sinks.metrics().text(), {}};
  });
  http.route("GET", "/", [](const HttpRequest&) -> std::optional<HttpResponse> {
    return HttpResponse{200,
                        "text/plain; charset=utf-8",
                        "eacgm agent: metrics at /metrics; POST /dump (root on this host) writes "
                        "a flight recording\n",
                        {}};
  });
  http.route("POST", "/dump", [&](const HttpRequest& req) -> std::optional<HttpResponse> {
    if (!is_loopback_address(req.peer))
      return HttpResponse{
          403, "text/plain", "a flight recording is asked for from this host only\n", {}};
    if (req.peer_uid != 0 && req.peer_uid != int64_t(geteuid()))
      return HttpResponse{
          403,
          "text/plain",
          req.peer_uid < 0 ? "the user asking could not be told (/proc/net/tcp): refused\n"
                           : "a flight recording is asked for by root (or the agent's user) only\n",
          {}};
    dumps.ask(req.id);
    return std::nullopt;
  });
}

// What the loop does between two polls of the pipeline: statistics twice a second, flight
// recordings asked for, and their errors (each said once).
struct LoopChores {
  Pipeline& pipeline;
  AgentSinks& sinks;
  HttpServer& http;
  DumpRequests& dumps;
  uint64_t last_stats = 0;
  std::string flight_error;

  void operator()(uint64_t now) {
    if (now - last_stats >= 500'000'000ull) {
      sinks.metrics().set_agent_stats({pipeline.calls(), pipeline.counters().ring_drops,
                                       pipeline.probes(), sinks.metrics().traced_processes(),
                                       cpu_seconds(), resident_bytes()});
      sinks.metrics().set_models(sinks.detection().states(), sinks.detection().models());
      sinks.metrics().set_dismissed({sinks.detection().unreported_calls(),
                                     sinks.detection().lone_windows(),
                                     sinks.detection().brief_windows()});
      sinks.metrics().expire_series(now);
      sinks.flight().note_dropped(pipeline.counters().ring_drops);
      last_stats = now;
    }
    if (g_dump_signal.exchange(0)) {
      auto [path, why] = dumps.write(sinks.flight(), "signal", now);
      fprintf(stderr, "eacgm: agent: SIGUSR1: %s\n",
              path.empty() ? why.c_str() : ("writing flight recording " + path).c_str());
    }
    dumps.answer(http, sinks.flight(), now);
    say_flight_error();
  }
  void say_flight_error() {
    if (std::string e = sinks.flight().last_error(); !e.empty() && e != flight_error) {
      fprintf(stderr, "eacgm: agent: %s\n", e.c_str());
      flight_error = e;
    }
  }
};

// Applies the duty cycle's decisions (--call-duty): the probes off and on, the windows told
// when, the share on /metrics.
struct CallDutyDriver {
  CallDutyCycle& cycle;
  double ratio = -1;
  std::string last_error;

  void operator()(uint64_t now, Pipeline& pipeline, AgentSinks& sinks) {
    switch (cycle.step(now)) {
      case CallDutyCycle::Action::Pause:
        sinks.detection().calls_traced(false, monotonic_now_ns());
        pipeline.pause_calls();
        break;
      case CallDutyCycle::Action::Resume: {
        std::string error = pipeline.resume_calls();
        sinks.detection().calls_traced(true, monotonic_now_ns());
        if (!error.empty() && error != last_error)
          fprintf(stderr, "eacgm: agent: --call-duty: %s\n", error.c_str());
        last_error = error;
        break;
      }
      case CallDutyCycle::Action::None:
        break;
    }
    if (cycle.ratio() != ratio) sinks.metrics().set_call_duty(ratio = cycle.ratio());
  }
};

// Until a stop signal or --duration. Returns the exit status.
int agent_loop(const AgentOptions& o, Pipeline& pipeline, LoopChores& chores,
               CallDutyDriver& duty) {
  uint64_t start = pipeline.start_monotonic_ns();
  int failing = 0;
  std::string last_failure;
  while (!g_agent_stop.load()) {
    try {
      pipeline.step(100);
      uint64_t now = monotonic_now_ns();
      chores(now);
      duty(now, pipeline, chores.sinks);
      if (o.duration_s > 0 && double(now - start) / 1e9 >= o.duration_s) break;
      failing = 0;
    } catch (const std::exception& e) {
      // One event or process the agent could not handle does not end the node's monitoring:
      // said once per distinct reason, and the loop goes on. Should every pass fail, it stops
      // in order (models saved, recordings asked for written) with the reason, never aborts.
      if (e.what() != last_failure) fprintf(stderr, "eacgm: agent: %s\n", e.what());
      last_failure = e.what();
      if (++failing >= 50) {
        fprintf(stderr, "eacgm: agent: stopping: %s, 50 times in a row\n", e.what());
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace

int run_agent(const AgentOptions& given) {
  AgentOptions o = given;
  o.all = true;  // the agent traces the node
  ListenAddress where = check_options(o);
  require_tracing_privileges("the agent (deploy/systemd has a unit with what it needs)");
  if (std::string gaps = other_users_gaps(current_privileges()); !gaps.empty())
    fprintf(stderr, "eacgm agent: %s\n", gaps.c_str());
  install_signal_handlers();
  // scores in this thread, one at a time (see DetectionSink::worker)
  omp_set_max_active_levels(0);

  std::string state = make_state_dir(o.state_dir);
  InstanceLock state_lock, node_lock;
  take_instance_locks(o, state, state_lock, node_lock);
  std::unique_ptr<AnomalyStore> store;
  if (!state.empty()) store = std::make_unique<AnomalyStore>(state + "/anomalies.db");
  FlightOptions f = flight_options(o, state);
  std::unique_ptr<AnomalyReporter> reporter;
  AgentSinks sinks(
      node_name(), detection_options(o, state),
      [&](std::vector<AgentAnomaly>& found) { (*reporter)(found); }, f, o.match);
  reporter = std::make_unique<AnomalyReporter>(
      sinks.metrics(), std::move(store), sinks.flight(), f.seconds_ns,
      realtime_minus_monotonic_ns());
  sinks.metrics().identify = read_job_identity;
  sinks.metrics().set_kernel_names(o.gpu_kernel_names);
  sinks.metrics().zero_anomalies(detect::cause_kinds());
  if (std::string line = sinks.detection().load_models(); !line.empty())
    fprintf(stderr, "eacgm: agent: %s\n", line.c_str());
  // The endpoint binds before BPF loads (seconds): a port in use fails at once.
  HttpServer http;
  DumpRequests dumps(o.dump_interval_s);
  add_routes(http, sinks, dumps);
  if (!http.bind(where.host, where.port))
    fail("cannot listen on {}: {} (is another agent running? choose another --listen)", o.listen,
         errno_text(errno));
  CallDutySetting duty_setting;
  std::string why;
  parse_call_duty(o.call_duty, duty_setting, why);  // (checked)
  // the heat is read before --match: every probed thread pays for the probes
  CallHeat heat;
  SinkFanout traced;
  traced.attach(heat);
  traced.attach(sinks.sink());
  CallDutyCycle cycle(duty_setting, heat);
  CallDutyDriver duty{cycle};
  TraceOptions trace = o;
  trace.python_with_ml_only = !o.all_python;
  trace.duty_cycled_calls = !duty_setting.duty.full();
  Pipeline pipeline(trace, traced);
  http.start();

  pipeline.expect_all();
  pipeline.start("agent");
  pipeline.start_sampling();
  if (!o.quiet)
    fprintf(stderr, "eacgm: agent tracing this node; metrics at http://%s/metrics%s\n",
            o.listen.c_str(),
            duty_setting.duty.full() || duty_setting.automatic
                ? ""
                : fmt::format("; torch operators and CUDA launches traced {:g} s of every {:g} s "
                              "(--call-duty)",
                              double(duty_setting.duty.on_ns) / 1e9,
                              double(duty_setting.duty.period_ns) / 1e9)
                      .c_str());
  LoopChores chores{pipeline, sinks, http, dumps};
  int status = agent_loop(o, pipeline, chores, duty);
  pipeline.stop();
  pipeline.finish();  // gives traced processes back what the python layer changed in them
  sinks.detection().finish();  // anomalies held for a job's start go out
  if (std::string e = sinks.detection().save_models(); !e.empty())
    fprintf(stderr, "eacgm: agent: %s\n", e.c_str());
  http.stop();
  sinks.flight().finish();  // the recordings asked for are written before the agent ends
  chores.say_flight_error();
  if (!o.quiet) fprintf(stderr, "eacgm: agent stopped\n");
  return status;
}

}  // namespace eacgm
