// The agent's HTTP endpoint on a loopback port of its own: keep-alive and pipelined requests,
// deadlines for half-sent requests, the oldest idle connection closed for a new one at the
// limit, answers given later from another thread, and the peer's uid from /proc/net/tcp.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <unistd.h>

#include <thread>

#include "agent/http_server.h"

namespace eacgm {
namespace {

using namespace std::chrono_literals;

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{5, 0};  // no test waits for ever on a server that does not answer
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void send_all(int fd, const std::string& s) {
  ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size()));
}

// Reads until `answers` whole answers (Content-Length bodies) or the end; returns them.
std::vector<std::string> read_answers(int fd, size_t answers) {
  std::string in;
  std::vector<std::string> out;
  char buf[4096];
  while (out.size() < answers) {
    size_t end = in.find("\r\n\r\n");
    if (end != std::string::npos) {
      size_t at = in.find("Content-Length: ");
      size_t len = at < end ? std::stoul(in.substr(at + 16)) : 0;
      if (in.size() >= end + 4 + len) {
        out.push_back(in.substr(0, end + 4 + len));
        in.erase(0, end + 4 + len);
        continue;
      }
    }
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, size_t(n));
  }
  return out;
}

bool closed_within(int fd, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  char c;
  while (std::chrono::steady_clock::now() < deadline) {
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void start(HttpLimits limits = {}) {
    server_ = std::make_unique<HttpServer>(limits);
    server_->route("GET", "/metrics", [](const HttpRequest&) -> std::optional<HttpResponse> {
      return HttpResponse{200, "text/plain", "up 1\n", {}};
    });
    server_->route("POST", "/later", [this](const HttpRequest& r) -> std::optional<HttpResponse> {
      later_ = r.id;
      peer_uid_ = r.peer_uid;
      return std::nullopt;
    });
    ASSERT_TRUE(server_->bind("127.0.0.1", 0));
    server_->start();
  }
  std::unique_ptr<HttpServer> server_;
  std::atomic<uint64_t> later_{0};
  std::atomic<int64_t> peer_uid_{-2};
};

TEST_F(HttpServerTest, KeepAliveAndPipelinedRequestsAreAnsweredInOrder) {
  start();
  int fd = connect_to(server_->port());
  send_all(fd, "GET /metrics HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\n\r\n");
  auto a = read_answers(fd, 2);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << a[0];
  EXPECT_TRUE(a[0].ends_with("\r\n\r\nup 1\n")) << a[0];
  EXPECT_EQ(a[1].rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << a[1];
  close(fd);
  // HEAD: what GET would say of its length, no body
  fd = connect_to(server_->port());
  send_all(fd, "HEAD /metrics HTTP/1.0\r\n\r\n");  // 1.0: closed after the answer
  std::string head;
  char buf[512];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) head.append(buf, size_t(n));
  EXPECT_NE(head.find("Content-Length: 5\r\n"), std::string::npos) << head;
  EXPECT_TRUE(head.ends_with("\r\n\r\n")) << head;
  close(fd);
  // Connection: close is honoured
  fd = connect_to(server_->port());
  send_all(fd, "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(read_answers(fd, 1).size(), 1u);
  EXPECT_TRUE(closed_within(fd, 1s));
  close(fd);
}

TEST_F(HttpServerTest, AHalfSentRequestIsClosedAtItsDeadline) {
  HttpLimits limits;
  limits.request_timeout = 200ms;
  start(limits);
  auto start = std::chrono::steady_clock::now();
  int fd = connect_to(server_->port());
  send_all(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n");
  EXPECT_TRUE(closed_within(fd, 5s));
  // not before its deadline, which runs from the accept (after our connect began)
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  close(fd);
  // an idle keep-alive connection too
  fd = connect_to(server_->port());
  send_all(fd, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(read_answers(fd, 1).size(), 1u);
  EXPECT_TRUE(closed_within(fd, 2s));
  close(fd);
}

TEST_F(HttpServerTest, AtTheLimitTheOldestIdleConnectionMakesRoom) {
  HttpLimits limits;
  limits.max_connections = 4;
  start(limits);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(connect_to(server_->port()));
    send_all(idle.back(), "GET /met");  // half a request each
    std::this_thread::sleep_for(20ms);  // accepted in this order
  }
  int fd = connect_to(server_->port());
  send_all(fd, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(read_answers(fd, 1).size(), 1u);
  EXPECT_TRUE(closed_within(idle[0], 1s));  // the oldest went
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(closed_within(idle[i], 50ms)) << i;
  for (int f : idle) close(f);
  close(fd);
}

TEST_F(HttpServerTest, ADeferredRequestIsAnsweredFromAnotherThreadOr503) {
  HttpLimits limits;
  limits.answer_timeout = 300ms;
  start(limits);
  int fd = connect_to(server_->port());
  send_all(fd, "POST /later HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
  while (later_ == 0) std::this_thread::sleep_for(1ms);
  // meanwhile others are served
  int other = connect_to(server_->port());
  send_all(other, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(read_answers(other, 1).size(), 1u);
  close(other);
  std::thread([&] { server_->answer(later_, {200, "text/plain", "done\n", {}}); }).join();
  auto a = read_answers(fd, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_TRUE(a[0].ends_with("done\n")) << a[0];
  // the peer is this process's user, found in /proc/net/tcp
  EXPECT_EQ(peer_uid_, int64_t(geteuid()));
  // not answered in time: 503
  later_ = 0;
  send_all(fd, "POST /later HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  a = read_answers(fd, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].rfind("HTTP/1.1 503", 0), 0u) << a[0];
  close(fd);
}

TEST_F(HttpServerTest, AWrongMethodIs405WithAllowAndABusyPortIsRefused) {
  start();
  int fd = connect_to(server_->port());
  send_all(fd, "DELETE /metrics HTTP/1.1\r\n\r\n");
  auto a = read_answers(fd, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].rfind("HTTP/1.1 405", 0), 0u) << a[0];
  EXPECT_NE(a[0].find("Allow: GET\r\n"), std::string::npos) << a[0];
  close(fd);
  HttpServer second;
  EXPECT_FALSE(second.bind("127.0.0.1", server_->port()));
  EXPECT_EQ(errno, EADDRINUSE);
}

}  // namespace
}  // namespace eacgm
