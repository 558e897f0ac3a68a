// The agent as a node service under what an SRE's review throws at it, on loopback: idle and
// half-sent connections never stop a scrape, flight recordings on request are rate-limited and
// root's only, one agent per state dir and per node, malformed requests refused, a kill -9 leaves
// a store and models the next agent resumes, and stop signals during traffic end it cleanly.
#include <sqlite3.h>
#include <sys/socket.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "agent_fixture.h"

namespace e2e {
namespace {

// A raw loopback connection (the tests need what httplib's client will not do: half a request).
int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed `fd` (a read gives end of file or a reset), without waiting.
bool closed_by_server(int fd) {
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN);
}

size_t files_ending(const std::string& dir, const std::string& suffix) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().ends_with(suffix)) ++n;
  return n;
}

// 200 connections that each send half a request and wait: the scrape after them is answered at
// once (node_exporter's behaviour), and each of them is closed within the request deadline (5 s).
TEST_F(Agent, IdleConnectionsDoNotStopTheScrapes) {
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    int fd = connect_to(port_);
    ASSERT_GE(fd, 0) << "connection " << i;
    std::string half = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    ASSERT_EQ(send(fd, half.data(), half.size(), MSG_NOSIGNAL), ssize_t(half.size()));
    idle.push_back(fd);
  }
  httplib::Client c("127.0.0.1", port_);
  c.set_connection_timeout(2);
  c.set_read_timeout(2);
  auto start = std::chrono::steady_clock::now();
  auto r = c.Get("/metrics");
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r) << "no answer to the scrape within 2 s beside 200 idle connections";
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("eacgm_agent_probes"), std::string::npos);
  printf("scrape beside 200 idle connections: %.3f s\n", took);
  // none of the half-sent requests lives past the 5 s deadline (polled to 10 s: the agent's
  // HTTP thread closes them when it wakes for the deadline)
  size_t closed = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (closed < idle.size() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    closed = 0;
    for (int fd : idle) closed += closed_by_server(fd);
  }
  EXPECT_EQ(closed, idle.size());
  for (int fd : idle) close(fd);
  // and it still serves
  EXPECT_TRUE(get_when_up(port_, "/metrics", 2));
}

// Many scrapes at once, as several Prometheus servers and dashboards would: all answered.
TEST_F(Agent, ManyConcurrentScrapesAreAllAnswered) {
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 50; ++t)
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", port_);
      c.set_read_timeout(10);
      for (int i = 0; i < 10; ++i)
        if (auto r = c.Get("/metrics"); r && r->status == 200) ++ok;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 500);
}

// What is not a request the agent serves is refused, and nothing is served from the disk.
TEST_F(Agent, MalformedRequestsAreRefused) {
  auto ask = [&](const std::string& request) {
    int fd = connect_to(port_);
    EXPECT_GE(fd, 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string answer;
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
      answer.append(buf, size_t(n));
      if (answer.find("\r\n\r\n") != std::string::npos) break;
    }
    close(fd);
    return answer.substr(0, answer.find("\r\n"));
  };
  EXPECT_EQ(ask("GET /metrics HTTP/1.1\r\nX: " + std::string(1 << 20, 'a') + "\r\n\r\n"),
            "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(ask("BREW /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(ask("GET /../../etc/passwd HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(ask("POST /metrics HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"),
            "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(ask("nonsense\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(ask("POST /dump HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            "HTTP/1.1 501 Not Implemented");
  EXPECT_TRUE(get_when_up(port_, "/metrics", 2));
}

// 20 POST /dump in a row: one flight recording, 19 answers of 429 saying when to ask again; a
// SIGUSR1 inside the minute writes none either; another user on the host is refused.
TEST_F(Agent, DumpsOnRequestAreRateLimitedAndRootsOnly) {
  httplib::Client c("127.0.0.1", port_);
  int written = 0, limited = 0;
  std::string retry_after, first;
  for (int i = 0; i < 20; ++i) {
    auto r = c.Post("/dump", "", "text/plain");
    ASSERT_TRUE(r);
    if (r->status == 200) ++written, first = r->body;
    if (r->status == 429) ++limited, retry_after = r->get_header_value("Retry-After");
  }
  EXPECT_EQ(written, 1);
  EXPECT_EQ(limited, 19);
  EXPECT_GE(std::stoi(retry_after), 50);  // the default minute, less the time these took
  EXPECT_LE(std::stoi(retry_after), 60);
  kill(agent_->pid(), SIGUSR1);
  EXPECT_TRUE(agent_->wait_for_stderr("SIGUSR1: not written", 10)) << agent_->err();
  // nobody (uid 65534) asking over loopback
  auto other = run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                    "/usr/bin/python3", "-c",
                    "import urllib.request, urllib.error\n"
                    "try:\n"
                    "  urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:" +
                        std::to_string(port_) +
                        "/dump', method='POST'), timeout=5)\n"
                        "except urllib.error.HTTPError as e: print(e.code)\n"});
  EXPECT_EQ(other.out, "403\n") << other.err;
  stop_agent();  // the recordings asked for are written before it ends
  EXPECT_EQ(files_ending(dir_ + "/state", "-http.eacgm.db"), 1u);
  EXPECT_EQ(files_ending(dir_ + "/state", "-signal.eacgm.db"), 0u);
  EXPECT_TRUE(std::filesystem::exists(first.substr(0, first.find('\n')))) << first;
  // --dump-interval 0: no limit
  start_agent({"--dump-interval", "0"});
  for (int i = 0; i < 3; ++i) {
    auto r = c.Post("/dump", "", "text/plain");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
}

// A second agent on the same state dir, or on the same node, says who holds it and exits 1;
// told it may (--allow-second-agent, another state dir), a second agent on the node starts.
TEST_F(Agent, OneAgentPerStateDirAndPerNode) {
  std::string me = std::to_string(agent_->pid());
  int other_port = free_port();
  std::string listen = "127.0.0.1:" + std::to_string(other_port);
  auto same_dir = run(
      {kEacgm, "agent", "--listen", listen, "--state-dir", dir_ + "/state", "--allow-second-agent"},
      {}, 20);
  EXPECT_EQ(same_dir.exit_code, 1) << same_dir.err;
  EXPECT_NE(same_dir.err.find("another agent uses it, held by pid " + me), std::string::npos)
      << same_dir.err;
  auto same_node =
      run({kEacgm, "agent", "--listen", listen, "--state-dir", dir_ + "/state2"}, {}, 20);
  EXPECT_EQ(same_node.exit_code, 1) << same_node.err;
  EXPECT_NE(same_node.err.find("another eacgm agent traces this node (held by pid " + me),
            std::string::npos)
      << same_node.err;
  EXPECT_NE(same_node.err.find("--allow-second-agent"), std::string::npos) << same_node.err;
  Process second({kEacgm, "agent", "--listen", listen, "--state-dir", dir_ + "/state2",
                  "--duration", "60", "--allow-second-agent"});
  ASSERT_TRUE(second.wait_for_stderr("agent tracing this node", 30)) << second.err();
  kill(second.pid(), SIGTERM);
  EXPECT_EQ(second.wait(20), 0) << second.err();
  // the lock goes with the agent: after a kill -9, the next one starts on the same state dir
  kill(agent_->pid(), SIGKILL);
  agent_->wait(20);
  agent_.reset();
  start_agent({});
}

// kill -9 in the middle of its work: the store is a sound SQLite file and the models saved
// before are resumed by the next agent.
TEST_F(Agent, KillNineLeavesASoundStoreAndTheModels) {
  E2E_REQUIRE_CUDA();
  if (!std::filesystem::exists(EACGM_DEMO_TRAIN)) GTEST_SKIP() << "no demo_train (needs nvcc)";
  const std::vector<std::string> quick{"--window", "0.5",       "--train-windows",
                                       "10",       "--history", "20"};
  stop_agent();
  start_agent(quick);
  Process job({EACGM_DEMO_TRAIN, "40000", "0"});
  ASSERT_NO_FATAL_FAILURE(wait_for_window_model());
  stop_agent();  // saves the models it fitted
  start_agent(quick);
  EXPECT_NE(agent_->err().find("resumed "), std::string::npos) << agent_->err();
  EXPECT_EQ(agent_->err().find("resumed 0 models"), std::string::npos) << agent_->err();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // judging the job's calls and windows
  kill(agent_->pid(), SIGKILL);
  EXPECT_EQ(agent_->wait(20), 128 + SIGKILL);
  agent_.reset();
  kill(job.pid(), SIGTERM);
  job.wait(10);
  sqlite3* db = nullptr;
  ASSERT_EQ(
      sqlite3_open_v2((dir_ + "/state/anomalies.db").c_str(), &db, SQLITE_OPEN_READWRITE, nullptr),
      SQLITE_OK);
  std::string check;
  sqlite3_exec(
      db, "PRAGMA integrity_check",
      [](void* out, int, char** v, char**) {
        *static_cast<std::string*>(out) = v[0] ? v[0] : "";
        return 0;
      },
      &check, nullptr);
  sqlite3_close(db);
  EXPECT_EQ(check, "ok");
  start_agent(quick);  // the killed agent's locks are gone with it
  EXPECT_NE(agent_->err().find("resumed "), std::string::npos) << agent_->err();
  EXPECT_EQ(agent_->err().find("resumed 0 models"), std::string::npos) << agent_->err();
}

}  // namespace
}  // namespace e2e
