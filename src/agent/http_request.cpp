// The agent's HTTP request parser and who sent it (agent/http_request.h).
#include "agent/http_request.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cctype>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

namespace eacgm {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// An address as /proc/net/tcp{,6} prints it: the raw 32-bit words in hex, then the port.
std::string proc_net_address(const sockaddr_storage& a) {
  uint32_t words[4];
  int n = 0, port = 0;
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    std::memcpy(words, &in.sin_addr, 4);
    n = 1, port = ntohs(in.sin_port);
  } else {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    std::memcpy(words, &in6.sin6_addr, 16);
    n = 4, port = ntohs(in6.sin6_port);
  }
  std::string s;
  for (int i = 0; i < n; ++i) s += fmt::format("{:08X}", words[i]);
  return fmt::format("{}:{:04X}", s, port);
}

ParsedRequest refuse(int status, std::string reason) {
  ParsedRequest r;
  r.state = ParsedRequest::State::refused;
  r.status = status;
  r.reason = std::move(reason);
  r.keep_alive = false;
  return r;
}

}  // namespace

ParsedRequest parse_request(std::string_view in, size_t max_header_bytes, size_t max_body_bytes) {
  size_t end = in.find("\r\n\r\n");
  if (end == std::string_view::npos)
    return in.size() > max_header_bytes ? refuse(431, "request headers too large")
                                        : ParsedRequest{};
  if (end > max_header_bytes) return refuse(431, "request headers too large");
  std::string_view head = in.substr(0, end);
  size_t line_end = head.find("\r\n");
  std::string_view line = head.substr(0, line_end);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 <= sp1 || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0)
    return refuse(400, "malformed request line");
  ParsedRequest r;
  r.method = std::string(line.substr(0, sp1));
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  r.path = std::string(target.substr(0, target.find('?')));
  r.keep_alive = line.substr(sp2 + 1) != "HTTP/1.0";
  size_t body_bytes = 0;
  for (size_t at = line_end; at != std::string_view::npos && at < head.size();) {
    size_t next = head.find("\r\n", at + 2);
    std::string_view field =
        head.substr(at + 2, next == std::string_view::npos ? head.npos : next - at - 2);
    at = next;
    size_t colon = field.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name = lower(field.substr(0, colon));
    std::string_view value = field.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    if (name == "content-length") {
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), body_bytes);
      if (ec != std::errc() || body_bytes > max_body_bytes)
        return refuse(413, "request body too large or malformed");
    } else if (name == "transfer-encoding") {
      return refuse(501, "chunked request bodies are not taken");
    } else if (name == "connection") {
      std::string v = lower(value);
      if (v.find("close") != std::string::npos) r.keep_alive = false;
      if (v.find("keep-alive") != std::string::npos) r.keep_alive = true;
    }
  }
  if (in.size() < end + 4 + body_bytes) return ParsedRequest{};  // the body is still coming
  r.body = std::string(in.substr(end + 4, body_bytes));
  r.consumed = end + 4 + body_bytes;
  r.state = ParsedRequest::State::complete;
  return r;
}

int64_t loopback_peer_uid(const sockaddr_storage& peer, const sockaddr_storage& local) {
  // The client's socket has our peer's address as its local one and ours as its remote one.
  std::string want_local = proc_net_address(peer), want_remote = proc_net_address(local);
  const char* file = peer.ss_family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6";
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
    std::istringstream fields(line);
    std::string sl, loc, rem, st, queues, timer, retr;
    int64_t uid = -1;
    if (fields >> sl >> loc >> rem >> st >> queues >> timer >> retr >> uid && loc == want_local &&
        rem == want_remote)
      return uid;
  }
  return -1;
}

}  // namespace eacgm
