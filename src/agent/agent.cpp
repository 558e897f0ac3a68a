// The agent loop: the pipeline over the whole node, /metrics on an HTTP thread, its own
// health as metrics, and a clean stop on SIGINT/SIGTERM.
#include "agent/agent.h"

#include <httplib.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <thread>

#include "export/metrics.h"
#include "pipeline/sink_sets.h"
#include "util/error.h"

namespace eacgm {
namespace {

std::atomic<int> g_agent_stop{0};

void on_agent_stop(int sig) { g_agent_stop.store(sig); }

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

}  // namespace

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
  if (geteuid() != 0)
    fail(
        "the agent needs root (eBPF uprobes on every process): run it as root, or with "
        "CAP_BPF and CAP_PERFMON (deploy/ has a systemd unit)");
  // Before anything loads (BPF takes seconds): a stop signal then ends the agent cleanly.
  struct sigaction sa {};
  sa.sa_handler = on_agent_stop;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  AgentSinks sinks(node_name());
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
    res.set_content("eacgm agent: metrics at /metrics\n", "text/plain");
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
  while (!g_agent_stop.load()) {
    pipeline.step(100);
    uint64_t now = monotonic_now_ns();
    if (now - last_stats >= 500'000'000ull) {
      sinks.metrics().set_agent_stats({pipeline.calls(), pipeline.counters().ring_drops,
                                       pipeline.probes(), sinks.metrics().traced_processes(),
                                       cpu_seconds(), resident_bytes()});
      last_stats = now;
    }
    if (o.duration_s > 0 && double(now - start) / 1e9 >= o.duration_s) break;
  }
  pipeline.stop();
  pipeline.finish();  // gives traced processes back what the python layer changed in them
  http.stop();
  server.join();
  if (!o.quiet) fprintf(stderr, "eacgm: agent stopped\n");
  return 0;
}

}  // namespace eacgm
