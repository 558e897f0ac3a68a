// The agent's HTTP request parser: what it takes, what it waits for, what it refuses.
#include <gtest/gtest.h>

#include "agent/http_request.h"

namespace eacgm {
namespace {

using State = ParsedRequest::State;

TEST(HttpRequest, AWholeRequestWithItsBodyAndWhatFollows) {
  std::string two = "POST /dump?x=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\nhiGET / HTTP/1.1\r\n\r\n";
  auto r = parse_request(two, 1024, 64);
  ASSERT_EQ(r.state, State::complete);
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/dump");  // the query is not part of the path
  EXPECT_EQ(r.body, "hi");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(two.substr(r.consumed), "GET / HTTP/1.1\r\n\r\n");
}

TEST(HttpRequest, WaitsForTheRestOfTheHeaderOrBody) {
  EXPECT_EQ(parse_request("GET /metrics HTTP/1.1\r\nHost: x\r\n", 1024, 64).state,
            State::incomplete);
  EXPECT_EQ(parse_request("POST /dump HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", 1024, 64).state,
            State::incomplete);
}

TEST(HttpRequest, KeepAliveFollowsTheVersionAndConnection) {
  EXPECT_FALSE(parse_request("GET / HTTP/1.0\r\n\r\n", 1024, 64).keep_alive);
  EXPECT_TRUE(
      parse_request("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 1024, 64).keep_alive);
  EXPECT_FALSE(parse_request("GET / HTTP/1.1\r\nconnection: close\r\n\r\n", 1024, 64).keep_alive);
}

TEST(HttpRequest, RefusesWhatItWillNotServe) {
  auto status = [](std::string_view in) {
    auto r = parse_request(in, 64, 16);
    EXPECT_EQ(r.state, State::refused) << in;
    EXPECT_FALSE(r.reason.empty());
    return r.status;
  };
  EXPECT_EQ(status(std::string(65, 'a')), 431);  // no end of header within the limit
  EXPECT_EQ(status("GET / HTTP/1.1\r\nX: " + std::string(60, 'a') + "\r\n\r\n"), 431);
  EXPECT_EQ(status("nonsense\r\n\r\n"), 400);
  EXPECT_EQ(status("GET / SPDY/3\r\n\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n"), 413);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 413);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), 501);
}

}  // namespace
}  // namespace eacgm
