// The agent loop: the pipeline over the whole node, /metrics on an HTTP thread, its own
// health as metrics, and a clean stop on SIGINT/SIGTERM.
#include "agent/agent.h"

// clang-format off
// Eigen (through the detector) before httplib.h: httplib includes <resolv.h>, whose `_res`
// macro renames a parameter in Eigen's declarations.
#include "pipeline/sink_sets.h"
// clang-format on

#include <httplib.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/anomaly_store.h"
#include "export/metrics.h"
#include "gpu/gpu_samples.h"  // monotonic_now_ns, realtime_now_ns
#include "util/error.h"
#include "util/privileges.h"

namespace eacgm {
namespace {

std::atomic<int> g_agent_stop{0};
std::atomic<int> g_dump_signal{0};

void on_agent_stop(int sig) { g_agent_stop.store(sig); }
void on_dump_signal(int) { g_dump_signal.store(1); }

// Dumps asked for over HTTP: the HTTP thread waits for the loop, which owns the recorder.
struct DumpRequests {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t asked = 0, answered = 0;
  std::string path;
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

std::string utc_time(uint64_t realtime_ns) {
  time_t secs = time_t(realtime_ns / 1'000'000'000);
  tm t{};
  gmtime_r(&secs, &t);
  char buf[40];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &t);
  return fmt::format("{}.{:03}Z", buf, realtime_ns / 1'000'000 % 1000);
}

std::string ms_text(uint64_t ns) {
  double ms = double(ns) / 1e6;
  return ms >= 100 ? fmt::format("{:.0f} ms", ms) : fmt::format("{:.2g} ms", ms);
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

// What the agent does with each anomaly: one log line (rate-limited per kind: a storm of slow
// calls is one line every 10 s with the count of the others), the counter, and a row in the
// state dir's store (at most 100 a flush).
class AnomalyReporter {
 public:
  AnomalyReporter(MetricsSink& metrics, std::unique_ptr<AnomalyStore> store, FlightRecorder& flight,
                  uint64_t flight_ns, int64_t monotonic_to_realtime_ns)
      : metrics_(metrics),
        store_(std::move(store)),
        flight_(flight),
        flight_ns_(flight_ns),
        to_real_(monotonic_to_realtime_ns) {}

  void operator()(std::vector<AgentAnomaly>& found) {
    std::vector<StoredAnomaly> rows;
    uint64_t now = monotonic_now_ns();
    // One flight recording for the anomalies of a while (a sixth of the held past after the
    // first, so that the recording shows what followed too), at most one every 5 minutes.
    if (now >= dump_due_ + 300'000'000'000ull || dump_due_ == 0) {
      uint64_t after = flight_ns_ / 6;
      dump_path_ = flight_.request("anomaly", after);
      dump_due_ = now + after;
    }
    std::string recording = now <= dump_due_ ? dump_path_ : std::string();
    for (const auto& [a, process] : found) {
      std::string kind = detect::cause_kind(a.cause);
      metrics_.count_anomaly(a.layer, kind);
      uint64_t real = uint64_t(int64_t(a.ts_ns) + to_real_);
      Limit& limit = limits_[a.layer + "\t" + kind];
      if (limit.last == 0 || now - limit.last >= 10'000'000'000ull) {
        std::string what =
            a.layer == "window"
                ? fmt::format("{} in the traced processes, {} s window at {}", a.cause,
                              double(a.dur_ns) / 1e9, utc_time(real))
                : fmt::format("{}, {}, in {} (pid {}) at {}", a.cause, ms_text(a.dur_ns),
                              process.empty() ? "?" : process, a.pid, utc_time(real));
        std::string top;
        for (const auto& [f, c] : a.top_features) top += (top.empty() ? "" : ", ") + f;
        std::string more = limit.suppressed ? fmt::format("; {} more like it since the last line",
                                                          limit.suppressed)
                                            : "";
        std::string where =
            recording.empty() ? "" : fmt::format("; flight recording {}", recording);
        fprintf(stderr, "eacgm: anomaly: %s; score %.1f below %.1f (%s)%s%s\n", what.c_str(),
                a.score, a.threshold, top.c_str(), more.c_str(), where.c_str());
        limit.last = now;
        limit.suppressed = 0;
      } else {
        ++limit.suppressed;
      }
      if (!store_ || rows.size() >= 100) continue;
      StoredAnomaly r;
      r.ts_ns = a.ts_ns;
      r.time_ns = real;
      r.dur_ns = a.dur_ns;
      r.layer = a.layer;
      r.name = a.name;
      r.pid = a.pid;
      r.process = process;
      r.score = a.score;
      r.threshold = a.threshold;
      r.cause = a.cause;
      nlohmann::json f = nlohmann::json::array();
      for (const auto& [name, c] : a.top_features) f.push_back({name, c});
      r.features = f.dump();
      r.recording = recording;
      rows.push_back(std::move(r));
    }
    if (store_)
      if (std::string e = store_->add(rows); !e.empty() && e != last_error_) {
        fprintf(stderr, "eacgm: agent: could not store anomalies in %s: %s\n",
                store_->path().c_str(), e.c_str());
        last_error_ = e;
      }
  }

 private:
  struct Limit {
    uint64_t last = 0;
    size_t suppressed = 0;
  };
  MetricsSink& metrics_;
  std::unique_ptr<AnomalyStore> store_;
  FlightRecorder& flight_;
  uint64_t flight_ns_;
  int64_t to_real_;
  uint64_t dump_due_ = 0;
  std::string dump_path_;
  std::map<std::string, Limit> limits_;
  std::string last_error_;
};

}  // namespace

AgentSinks::AgentSinks(std::string hostname, DetectionOptions detection,
                       std::function<void(std::vector<AgentAnomaly>&)> report, FlightOptions flight,
                       const std::vector<std::string>& match)
    : metrics_(std::move(hostname)),
      detection_(std::move(detection), std::move(report)),
      flight_(std::move(flight)) {
  fanout_.attach(metrics_);
  fanout_.attach(detection_);
  fanout_.attach(flight_);  // last: a dump asked for by this flush's anomalies holds them
  if (!match.empty()) match_ = std::make_unique<MatchFilter>(match, fanout_, read_command_line);
}

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

int run_agent(const AgentOptions& given) {
  AgentOptions o = given;
  o.all = true;  // the agent traces the node
  ListenAddress where = parse_listen(o.listen);
  LayerChoice::parse(o.layers);
  if (!o.python_calls.empty()) PythonFilter check(o.python_calls);
  if (!o.match.empty()) {  // a bad pattern is a usage error before anything is created
    SinkFanout none;
    MatchFilter check(o.match, none, read_command_line);
  }
  require_tracing_privileges("the agent (deploy/systemd has a unit with what it needs)");
  if (std::string gaps = other_users_gaps(current_privileges()); !gaps.empty())
    fprintf(stderr, "eacgm agent: %s\n", gaps.c_str());
  // Before anything loads (BPF takes seconds): a stop signal then ends the agent cleanly.
  struct sigaction sa {};
  sa.sa_handler = on_agent_stop;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &sa, nullptr);
  sa.sa_handler = on_dump_signal;
  sigaction(SIGUSR1, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::string state = make_state_dir(o.state_dir);
  DetectionOptions d;
  d.window_ns = uint64_t(o.window_s * 1e9);
  d.history_ns = uint64_t(o.history_s * 1e9);
  d.refit_every_ns = std::min<uint64_t>(d.refit_every_ns, d.history_ns / 4);
  d.train_windows = o.train_windows;
  d.train_calls = o.train_calls;
  d.sample_interval_ns = uint64_t(o.interval_ms * 1e6);
  if (!state.empty()) d.models_path = state + "/models.json";
  std::unique_ptr<AnomalyStore> store;
  if (!state.empty()) store = std::make_unique<AnomalyStore>(state + "/anomalies.db");
  FlightOptions f;
  f.dir = state;
  f.seconds_ns = uint64_t(o.flight_seconds * 1e9);
  f.max_bytes = o.flight_mb << 20;
  f.keep_bytes = o.flight_keep_mb << 20;
  if (o.flight_seconds == 0) f.dir.clear();
  std::unique_ptr<AnomalyReporter> reporter;
  AgentSinks sinks(
      node_name(), d, [&](std::vector<AgentAnomaly>& found) { (*reporter)(found); }, f, o.match);
  reporter = std::make_unique<AnomalyReporter>(
      sinks.metrics(), std::move(store), sinks.flight(), f.seconds_ns,
      int64_t(realtime_now_ns()) - int64_t(monotonic_now_ns()));
  sinks.metrics().identify = read_job_identity;
  if (std::string line = sinks.detection().load_models(); !line.empty())
    fprintf(stderr, "eacgm: agent: %s\n", line.c_str());
  httplib::Server http;
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second agent on the
  // same port would start and share the connections silently instead of being refused.
  http.set_socket_options([](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(sinks.metrics().text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(
        "eacgm agent: metrics at /metrics; POST /dump (from this host) writes a flight "
        "recording\n",
        "text/plain");
  });
  DumpRequests dumps;
  http.Post("/dump", [&](const httplib::Request& req, httplib::Response& res) {
    if (!is_loopback_address(req.remote_addr)) {
      res.status = 403;
      res.set_content("a flight recording is asked for from this host only\n", "text/plain");
      return;
    }
    std::unique_lock lock(dumps.mu);
    uint64_t mine = ++dumps.asked;
    if (!dumps.cv.wait_for(lock, std::chrono::seconds(5), [&] { return dumps.answered >= mine; })) {
      res.status = 503;
      res.set_content("the agent did not answer in 5 s\n", "text/plain");
    } else if (dumps.path.empty()) {
      res.status = 409;
      res.set_content("the flight recorder is off (--flight-seconds 0 or --state-dir '')\n",
                      "text/plain");
    } else {
      res.set_content(dumps.path + "\n", "text/plain");
    }
  });
  if (!http.bind_to_port(where.host, where.port))
    fail("cannot listen on {}: {} (is another agent running? choose another --listen)", o.listen,
         errno_text(errno));
  Pipeline pipeline(o, sinks.sink());  // after the port: a busy one fails before BPF loads
  std::thread server([&] { http.listen_after_bind(); });

  pipeline.expect_all();
  pipeline.start("agent");
  pipeline.start_sampling();
  if (!o.quiet)
    fprintf(stderr, "eacgm: agent tracing this node; metrics at http://%s/metrics\n",
            o.listen.c_str());
  uint64_t start = pipeline.start_monotonic_ns(), last_stats = 0;
  std::string flight_error;
  while (!g_agent_stop.load()) {
    pipeline.step(100);
    uint64_t now = monotonic_now_ns();
    if (now - last_stats >= 500'000'000ull) {
      sinks.metrics().set_agent_stats({pipeline.calls(), pipeline.counters().ring_drops,
                                       pipeline.probes(), sinks.metrics().traced_processes(),
                                       cpu_seconds(), resident_bytes()});
      sinks.metrics().set_models(sinks.detection().states(), sinks.detection().models());
      sinks.flight().note_dropped(pipeline.counters().ring_drops);
      last_stats = now;
    }
    if (g_dump_signal.exchange(0)) {
      std::string path = sinks.flight().request("signal", 0);
      fprintf(stderr, "eacgm: agent: SIGUSR1: %s\n",
              path.empty() ? "the flight recorder is off (--flight-seconds 0 or --state-dir '')"
                           : ("writing flight recording " + path).c_str());
    }
    {
      std::lock_guard lock(dumps.mu);
      if (dumps.answered < dumps.asked) {
        dumps.path = sinks.flight().request("http", 0);
        if (!dumps.path.empty())
          fprintf(stderr, "eacgm: agent: writing flight recording %s (asked over HTTP)\n",
                  dumps.path.c_str());
        dumps.answered = dumps.asked;
        dumps.cv.notify_all();
      }
    }
    if (std::string e = sinks.flight().last_error(); !e.empty() && e != flight_error) {
      fprintf(stderr, "eacgm: agent: %s\n", e.c_str());
      flight_error = e;
    }
    if (o.duration_s > 0 && double(now - start) / 1e9 >= o.duration_s) break;
  }
  pipeline.stop();
  pipeline.finish();  // gives traced processes back what the python layer changed in them
  if (std::string e = sinks.detection().save_models(); !e.empty())
    fprintf(stderr, "eacgm: agent: %s\n", e.c_str());
  http.stop();
  sinks.flight().finish();  // the recordings asked for are written before the agent ends
  if (std::string e = sinks.flight().last_error(); !e.empty() && e != flight_error)
    fprintf(stderr, "eacgm: agent: %s\n", e.c_str());
  server.join();
  if (!o.quiet) fprintf(stderr, "eacgm: agent stopped\n");
  return 0;
}

}  // namespace eacgm
