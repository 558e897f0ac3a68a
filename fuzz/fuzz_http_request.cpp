// The agent's HTTP request parser (what any local client, or any host with --listen 0.0.0.0,
// sends): any bytes give incomplete, complete or refused without crashing; a complete request
// consumes no more than it was given and its body is what Content-Length said; a refusal says why.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "agent/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto r = eacgm::parse_request(in, 1024, 256);
  using State = eacgm::ParsedRequest::State;
  if (r.state == State::complete &&
      (r.consumed > size || r.body.size() > 256 || r.consumed < r.body.size() + 4))
    std::abort();
  if (r.state == State::refused && (r.status < 400 || r.reason.empty())) std::abort();
  if (r.state == State::incomplete && size > 1024 + 256 + 4 && in.find("\r\n\r\n") == in.npos)
    std::abort();  // a header past the limit is refused, never waited on for ever
  return 0;
}
