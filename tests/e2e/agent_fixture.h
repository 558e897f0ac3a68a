// The e2e tests' agent: a plain `eacgm agent` on a free loopback port with a state dir of the
// test's own, started and stopped (SIGTERM, which must end it cleanly) around each test.
#pragma once
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <optional>
#include <string>
#include <vector>

#include "e2e_util.h"

namespace e2e {

// A TCP port on loopback that nothing listens on now.
inline int free_port() {
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
inline std::optional<std::string> get_when_up(int port, const std::string& path, int timeout_s) {
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
    start_agent({});
  }
  void start_agent(const std::vector<std::string>& extra,
                   const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv{
        kEacgm,       "agent", "--listen",    "127.0.0.1:" + std::to_string(port_),
        "--duration", "90",    "--state-dir", dir_ + "/state"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    agent_ = std::make_unique<Process>(argv, env);
    ASSERT_TRUE(agent_->wait_for_stderr("agent tracing this node", 30)) << agent_->err();
    ASSERT_TRUE(get_when_up(port_, "/metrics", 10)) << agent_->err();
  }
  void stop_agent() {
    kill(agent_->pid(), SIGTERM);
    EXPECT_EQ(agent_->wait(20), 0) << agent_->err();  // a clean stop on SIGTERM
    agent_.reset();
  }
  // stop_agent(), returning what the agent wrote to stderr (its log)
  std::string stop_agent_and_read_log() {
    kill(agent_->pid(), SIGTERM);
    EXPECT_EQ(agent_->wait(20), 0);
    std::string err = agent_->err();
    agent_.reset();
    return err;
  }
  void TearDown() override {
    if (agent_) stop_agent();
  }
  // Until the window model judges (its threshold is on /metrics), then a few judged windows.
  void wait_for_window_model() {
    httplib::Client c("127.0.0.1", port_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
    bool ready = false;
    while (!ready && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // as often as the tests poll
      auto r = c.Get("/metrics");
      ready = r && r->body.find("eacgm_detector_threshold{layer=\"window\"") != std::string::npos;
    }
    ASSERT_TRUE(ready) << "no window model after 40 s\n" << agent_->err();
    std::this_thread::sleep_for(std::chrono::seconds(3));
  }
  // Two busy processes on CPU 0 for 3 s, beside the demo loop there.
  static std::vector<std::unique_ptr<Process>> cpu_hogs() {
    std::vector<std::unique_ptr<Process>> hogs;
    for (int i = 0; i < 2; ++i)
      hogs.push_back(std::make_unique<Process>(
          std::vector<std::string>{"/usr/bin/taskset", "-c", "0", "/usr/bin/timeout", "3",
                                   "/bin/sh", "-c", "while :; do :; done"}));
    return hogs;
  }
  int port_ = 0;
  std::unique_ptr<Process> agent_;
};

}  // namespace e2e
