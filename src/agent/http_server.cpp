// The agent's HTTP endpoint (agent/http_server.h): HTTP/1.1 with keep-alive, requests read and
// answers written without blocking, every connection under a deadline.
#include "agent/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agent/http_request.h"

namespace eacgm {
namespace {

using Clock = std::chrono::steady_clock;

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

std::string address_text(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, text, sizeof text);
  else if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, text, sizeof text);
  return text;
}

}  // namespace

struct HttpServer::Connection {
  int fd = -1;
  sockaddr_storage peer{};
  std::string in, out;
  size_t out_done = 0;
  enum class State { reading, awaiting, writing } state = State::reading;
  Clock::time_point deadline, idle_since;
  bool close_after = false, head = false;
  uint64_t awaiting_id = 0;
};

HttpServer::HttpServer(HttpLimits limits) : limits_(limits) {}

HttpServer::~HttpServer() {
  stop();
  for (auto& [fd, c] : connections_) ::close(fd);
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_})
    if (fd >= 0) ::close(fd);
}

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler handler) {
  routes_[path][method] = std::move(handler);
}

bool HttpServer::bind(const std::string& host, int port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints,
                  &found) != 0 ||
      !found) {
    errno = EADDRNOTAVAIL;
    return false;
  }
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int yes = 1;  // SO_REUSEADDR only: with SO_REUSEPORT a second agent would share the port
  bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) == 0 &&
            ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 128) == 0;
  int err = errno;
  freeaddrinfo(found);
  socklen_t len = sizeof local_;
  if (!ok || getsockname(fd, reinterpret_cast<sockaddr*>(&local_), &len) != 0) {
    if (fd >= 0) ::close(fd);
    errno = err;
    return false;
  }
  port_ = ntohs(local_.ss_family == AF_INET ? reinterpret_cast<sockaddr_in&>(local_).sin_port
                                            : reinterpret_cast<sockaddr_in6&>(local_).sin6_port);
  listen_fd_ = fd;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  for (int f : {listen_fd_, wake_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = f;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, f, &ev);
  }
  return true;
}

void HttpServer::start() {
  if (listen_fd_ >= 0 && !thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void HttpServer::stop() {
  stopping_ = true;
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    [[maybe_unused]] auto n = write(wake_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
}

void HttpServer::answer(uint64_t request_id, HttpResponse response) {
  {
    std::lock_guard lock(mu_);
    answers_.emplace_back(request_id, std::move(response));
  }
  uint64_t one = 1;
  [[maybe_unused]] auto n = write(wake_fd_, &one, sizeof one);
}

void HttpServer::run() {
  epoll_event events[64];
  while (!stopping_) {
    // wake for the nearest deadline (at most a second on)
    auto next = Clock::now() + std::chrono::seconds(1);
    for (const auto& [fd, c] : connections_) next = std::min(next, c->deadline);
    if (listen_paused_until_) {
      if (*listen_paused_until_ <= Clock::now()) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = listen_fd_;
        epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
        listen_paused_until_.reset();
      } else {
        next = std::min(next, *listen_paused_until_);
      }
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
    int n = epoll_wait(epoll_fd_, events, 64, int(std::max<int64_t>(0, wait.count() + 1)));
    for (int i = 0; i < n && !stopping_; ++i) {
      int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        accept_all();
      } else if (fd == wake_fd_) {
        uint64_t count;
        [[maybe_unused]] auto r = read(wake_fd_, &count, sizeof count);
        deliver_answers();
      } else if (auto it = connections_.find(fd); it != connections_.end()) {
        Connection& c = *it->second;
        if (events[i].events & (EPOLLHUP | EPOLLERR) && c.state != Connection::State::writing) {
          close_connection(fd);
          continue;
        }
        if (c.state == Connection::State::reading)
          on_readable(c);
        else if (c.state == Connection::State::writing)
          on_writable(c);
      }
    }
    close_expired();
  }
}

// Room for one more connection: the oldest idle one (reading, nothing asked yet) goes.
bool HttpServer::make_room() {
  if (connections_.size() < limits_.max_connections) return true;
  Connection* oldest = nullptr;
  for (auto& [fd, c] : connections_)
    if (c->state == Connection::State::reading && (!oldest || c->idle_since < oldest->idle_since))
      oldest = c.get();
  if (!oldest) return false;
  close_connection(oldest->fd);
  return true;
}

void HttpServer::accept_all() {
  while (true) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return;
      // Out of descriptors (EMFILE, ENFILE) or memory: the listening socket stays readable,
      // and waiting on it would spin. Stop listening for a moment; the backlog holds the rest.
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      listen_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    if (!make_room()) {
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->peer = peer;
    c->idle_since = Clock::now();
    c->deadline = c->idle_since + limits_.request_timeout;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    connections_[fd] = std::move(c);
  }
}

void HttpServer::on_readable(Connection& c) {
  char buf[8192];
  bool eof = false;
  while (c.in.size() <= limits_.max_header_bytes + limits_.max_body_bytes) {
    ssize_t n = read(c.fd, buf, sizeof buf);
    if (n > 0) {
      c.in.append(buf, size_t(n));
    } else if (n == 0) {
      eof = true;
      break;
    } else if (errno == EAGAIN) {
      break;
    } else if (errno != EINTR) {
      return close_connection(c.fd);
    }
  }
  int fd = c.fd;
  if (!c.in.empty()) handle(c);
  // a client gone before its request was whole has nothing to wait for; one that half-closed
  // after a whole request still gets its answer
  if (eof) {
    auto it = connections_.find(fd);
    if (it != connections_.end() && it->second->state == Connection::State::reading)
      close_connection(fd);
  }
}

// Parses what has arrived; answers when a whole request is there.
void HttpServer::handle(Connection& c) {
  ParsedRequest p = parse_request(c.in, limits_.max_header_bytes, limits_.max_body_bytes);
  if (p.state == ParsedRequest::State::incomplete) return;
  if (p.state == ParsedRequest::State::refused) {
    c.close_after = true;
    return respond(c, {p.status, "text/plain", p.reason + "\n", {}});
  }
  c.in.erase(0, p.consumed);
  c.close_after = !p.keep_alive;
  c.head = p.method == "HEAD";
  HttpRequest req;
  req.method = std::move(p.method);
  req.path = std::move(p.path);
  req.body = std::move(p.body);
  auto route = routes_.find(req.path);
  if (route == routes_.end()) return respond(c, {404, "text/plain", "not found\n", {}});
  auto handler = route->second.find(c.head ? "GET" : req.method);
  if (handler == route->second.end()) {
    std::string allow;
    for (const auto& [m, h] : route->second) allow += (allow.empty() ? "" : ", ") + m;
    return respond(c, {405, "text/plain", "method not allowed\n", {{"Allow", allow}}});
  }
  req.id = next_id_++;
  req.peer = address_text(c.peer);
  req.peer_uid = loopback_peer_uid(c.peer, local_);
  if (auto r = handler->second(req)) return respond(c, *r);
  c.state = Connection::State::awaiting;
  c.awaiting_id = req.id;
  c.deadline = Clock::now() + limits_.answer_timeout;
  epoll_event ev{};
  ev.events = 0;  // nothing to read until it is answered (errors and hang-ups still come)
  ev.data.fd = c.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void HttpServer::respond(Connection& c, const HttpResponse& r) {
  c.out = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", r.status,
                      reason(r.status), r.content_type, r.body.size());
  for (const auto& [k, v] : r.headers) c.out += fmt::format("{}: {}\r\n", k, v);
  c.out += c.close_after ? "Connection: close\r\n\r\n" : "\r\n";
  if (!c.head) c.out += r.body;
  c.out_done = 0;
  c.state = Connection::State::writing;
  c.deadline = Clock::now() + limits_.write_timeout;
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.fd = c.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  on_writable(c);
}

void HttpServer::on_writable(Connection& c) {
  while (c.out_done < c.out.size()) {
    ssize_t n = send(c.fd, c.out.data() + c.out_done, c.out.size() - c.out_done, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_done += size_t(n);
    } else if (n < 0 && errno == EAGAIN) {
      return;  // the rest when the client takes it (EPOLLOUT)
    } else if (!(n < 0 && errno == EINTR)) {
      return close_connection(c.fd);
    }
  }
  if (c.close_after) return close_connection(c.fd);
  c.out.clear();
  c.state = Connection::State::reading;
  c.idle_since = Clock::now();
  c.deadline = c.idle_since + limits_.request_timeout;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  if (!c.in.empty()) handle(c);  // a request sent before this answer was taken
}

void HttpServer::deliver_answers() {
  std::vector<std::pair<uint64_t, HttpResponse>> ready;
  {
    std::lock_guard lock(mu_);
    ready.swap(answers_);
  }
  for (auto& [id, r] : ready)
    for (auto& [fd, c] : connections_)
      if (c->state == Connection::State::awaiting && c->awaiting_id == id) {
        respond(*c, r);
        break;
      }
}

void HttpServer::close_connection(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  connections_.erase(fd);
}

void HttpServer::close_expired() {
  auto now = Clock::now();
  std::vector<int> expired;
  for (auto& [fd, c] : connections_)
    if (c->deadline <= now) expired.push_back(fd);
  for (int fd : expired) {
    Connection& c = *connections_[fd];
    if (c.state == Connection::State::awaiting) {  // the agent did not answer: say so
      c.close_after = true;
      respond(c, {503, "text/plain", "the agent did not answer in time\n", {}});
    } else {
      close_connection(fd);  // a request never completed, or an answer never taken
    }
  }
}

}  // namespace eacgm
