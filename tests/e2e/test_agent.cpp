// eacgm agent end to end: /metrics served on loopback, scraped by Debian's real Prometheus while
// a known workload runs, and PromQL answering with the calls the workload made.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "e2e_util.h"

namespace e2e {
namespace {

// A TCP port on loopback that nothing listens on now.
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("no free port");
  close(fd);
  return ntohs(a.sin_port);
}

// GET until it answers 200 or `timeout_s` passes.
std::optional<std::string> get_when_up(int port, const std::string& path, int timeout_s) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto r = c.Get(path.c_str()); r && r->status == 200) return r->body;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

class Agent : public RecordingTest {
 protected:
  void SetUp() override {
    RecordingTest::SetUp();
    if (IsSkipped()) return;
    port_ = free_port();
    agent_ = std::make_unique<Process>(std::vector<std::string>{
        kEacgm, "agent", "--listen", "127.0.0.1:" + std::to_string(port_), "--duration", "90"});
    ASSERT_TRUE(agent_->wait_for_stderr("agent tracing this node", 30)) << agent_->err();
    ASSERT_TRUE(get_when_up(port_, "/metrics", 10)) << agent_->err();
  }
  void TearDown() override {
    if (agent_) {
      kill(agent_->pid(), SIGTERM);
      EXPECT_EQ(agent_->wait(20), 0) << agent_->err();  // a clean stop on SIGTERM
    }
  }
  int port_ = 0;
  std::unique_ptr<Process> agent_;
};

TEST_F(Agent, ServesOnlyGetOfKnownPaths) {
  httplib::Client c("127.0.0.1", port_);
  auto post = c.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_GE(post->status, 400);
  EXPECT_LT(post->status, 500);
  auto unknown = c.Get("/no-such-page");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  EXPECT_NE(metrics->body.find("# TYPE eacgm_agent_probes gauge"), std::string::npos);
}

TEST_F(Agent, BadListenAddressIsAUsageError) {
  auto r = run({kEacgm, "agent", "--listen", "127.0.0.1:99999"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--listen 127.0.0.1:99999: the port must be a number from 1 to 65535"),
            std::string::npos)
      << r.err;
  // NaN compares false with every bound: it once meant "no limit", an agent that never stopped
  auto nan = run({kEacgm, "agent", "--duration", "nan"}, {}, 20);
  EXPECT_EQ(nan.exit_code, 2) << nan.err;
  // the port the agent holds is refused with a line that says so
  auto busy = run({kEacgm, "agent", "--listen", "127.0.0.1:" + std::to_string(port_)}, {}, 20);
  EXPECT_EQ(busy.exit_code, 1);
  EXPECT_NE(busy.err.find("cannot listen on 127.0.0.1:" + std::to_string(port_)), std::string::npos)
      << busy.err;
}

// Prometheus (Debian's 2.42) scrapes the agent every second; the increase of cudaMalloc calls
// it reports equals the calls the workload made (3 per run, 2 runs).
TEST_F(Agent, PrometheusSeesTheCallsTheWorkloadMade) {
  E2E_REQUIRE_CUDA();
  if (!std::filesystem::exists("/usr/bin/prometheus"))
    GTEST_SKIP() << "prometheus is not installed (scripts/setup.sh installs it)";
  int prom_port = free_port();
  std::string config = dir_ + "/prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        << "scrape_configs:\n  - job_name: eacgm\n    static_configs:\n"
                        << "      - targets: ['127.0.0.1:" << port_ << "']\n";
  Process prom({"/usr/bin/prometheus", "--config.file=" + config,
                "--storage.tsdb.path=" + dir_ + "/tsdb",
                "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)});
  ASSERT_TRUE(get_when_up(prom_port, "/-/ready", 30)) << prom.err();

  for (int i = 0; i < 2; ++i) {
    auto w = run({kWorkloads + "/cuda_api_calls"});
    ASSERT_EQ(w.exit_code, 0) << w.err;
  }
  httplib::Client c("127.0.0.1", prom_port);
  const std::string query =
      "sum(eacgm_calls_total{layer=\"cuda\",op=\"cudaMalloc\",process=\"cuda_api_calls\"})";
  double value = -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline && value != 6) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto r = c.Get("/api/v1/query", httplib::Params{{"query", query}}, httplib::Headers{});
    if (!r || r->status != 200) continue;
    auto j = nlohmann::json::parse(r->body);
    const auto& result = j["data"]["result"];
    if (!result.empty()) value = std::stod(result[0]["value"][1].template get<std::string>());
  }
  EXPECT_EQ(value, 6) << "last answer to " << query;
  // every call of the run is in the latency histogram too
  auto r =
      c.Get("/api/v1/query",
            httplib::Params{{"query", "sum(eacgm_call_duration_seconds_count{op=\"cudaMalloc\"})"}},
            httplib::Headers{});
  ASSERT_TRUE(r);
  auto j = nlohmann::json::parse(r->body);
  ASSERT_FALSE(j["data"]["result"].empty()) << r->body;
  EXPECT_EQ(std::stod(j["data"]["result"][0]["value"][1].template get<std::string>()), 6);
  kill(prom.pid(), SIGTERM);
  EXPECT_EQ(prom.wait(30), 0) << prom.err();
}

}  // namespace
}  // namespace e2e
