// The agent's HTTP endpoint: one thread, non-blocking sockets and epoll, so that no client, however
// slow or idle, holds up another's scrape. Hand-written (about 400 lines) because the two
// libraries at hand cannot: cpp-httplib and prometheus-cpp's civetweb give each connection a
// worker from a small pool until it sends a whole request (200 idle connections stopped the
// scrapes), and libmicrohttpd refuses new connections at its limit instead of closing the oldest
// idle one. The policies are node_exporter's (Go's http.Server with ReadHeaderTimeout): a request
// must arrive whole within a deadline, a response be taken within another, and the connection
// count is bounded.
#pragma once
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace eacgm {

struct HttpLimits {
  size_t max_connections = 64;  // past it, the oldest idle connection is closed for a new one
  std::chrono::milliseconds request_timeout{5000};  // from accept or the last answer to a request
  std::chrono::milliseconds write_timeout{10000};   // for the client to take an answer
  std::chrono::milliseconds answer_timeout{10000};  // for a deferred answer (answer())
  size_t max_header_bytes = 16384;
  size_t max_body_bytes = 65536;
};

struct HttpRequest {
  uint64_t id = 0;  // to answer() a deferred request
  std::string method, path, body;
  std::string peer;       // the client's address, e.g. 127.0.0.1 or ::1
  int64_t peer_uid = -1;  // the user owning the client's socket, for loopback clients (-1: unknown)
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// A handler answers at once, or returns nullopt and answers later, from any thread, with
// HttpServer::answer(request.id, ...) (the connection waits without holding up the others).
using HttpHandler = std::function<std::optional<HttpResponse>(const HttpRequest&)>;

class HttpServer {
 public:
  HttpServer(HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before bind: GET routes also answer HEAD.
  void route(const std::string& method, const std::string& path, HttpHandler handler);
  // Binds and listens; false with errno set when it cannot (a port in use: EADDRINUSE).
  bool bind(const std::string& host, int port);
  int port() const { return port_; }  // the port bound (for a port 0 given)
  void start();                       // serves on a thread of its own
  void stop();                        // closes every connection and joins the thread
  void answer(uint64_t request_id, HttpResponse response);

 private:
  struct Connection;
  void run();
  void accept_all();
  void on_readable(Connection& c);
  void on_writable(Connection& c);
  void handle(Connection& c);
  void respond(Connection& c, const HttpResponse& r);
  void close_connection(int fd);
  void close_expired();
  void deliver_answers();
  bool make_room();

  HttpLimits limits_;
  std::map<std::string, std::map<std::string, HttpHandler>> routes_;  // path -> method -> handler
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1, port_ = 0;
  sockaddr_storage local_{};
  std::map<int, std::unique_ptr<Connection>> connections_;
  std::optional<std::chrono::steady_clock::time_point> listen_paused_until_;  // out of fds
  std::mutex mu_;  // answers_ from other threads
  std::vector<std::pair<uint64_t, HttpResponse>> answers_;
  uint64_t next_id_ = 1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace eacgm
