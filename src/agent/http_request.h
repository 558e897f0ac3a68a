// Reading one HTTP/1.x request from the bytes a connection has sent so far (the agent's
// endpoint's parser, a pure function so that it can be tested and fuzzed alone), and which user
// sent it over loopback.
#pragma once
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace eacgm {

struct ParsedRequest {
  enum class State { incomplete, complete, refused } state = State::incomplete;
  int status = 0;      // refused: the answer's status (400, 413, 431, 501)
  std::string reason;  // refused: one line saying why
  std::string method, path, body;
  bool keep_alive = true;
  size_t consumed = 0;  // complete: the bytes of this request (a next one may follow)
};

ParsedRequest parse_request(std::string_view in, size_t max_header_bytes, size_t max_body_bytes);

// The uid owning the TCP socket at `peer` connected to `local` (both this host's loopback), from
// /proc/net/tcp and tcp6 as identd finds it; -1 when not found.
int64_t loopback_peer_uid(const sockaddr_storage& peer, const sockaddr_storage& local);

}  // namespace eacgm
