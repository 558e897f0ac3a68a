// Tests the Chrome trace-event JSON writer by parsing its output back with nlohmann::json.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "export/chrome_json.h"
#include "util/error.h"

namespace eacgm {
namespace {

using nlohmann::json;

std::string write_json(const std::function<void(TimelineSink&)>& fill) {
  std::ostringstream out;
  auto writer = make_chrome_json_writer(out);
  fill(*writer);
  writer->finish();
  return out.str();
}

json events_of(const std::string& text) {
  const json trace = json::parse(text);
  EXPECT_EQ(trace.at("displayTimeUnit"), "ns");
  return trace.at("traceEvents");
}

TEST(ChromeJsonWriter, CountersAreCounterEventsAndMachineTracksGetAProcess) {
  const json events = events_of(write_json([](TimelineSink& sink) {
    sink.add_counter({1'500'250, 42, "cpu (%)", 12.5});
    sink.add_counter({2'000'000, 0, "eth0 rx (MB/s)", 3.0});
    sink.add_counter({3'000'000, 0, "eth0 rx (MB/s)", 0.0});
  }));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0], json::parse(R"j({"ph":"C","name":"cpu (%)","pid":42,"ts":1500.25,
                                        "args":{"value":12.5}})j"));
  EXPECT_EQ(events[1].at("ph"), "M");  // pid 0 is named once, before its first counter
  EXPECT_EQ(events[1].at("pid"), 0);
  EXPECT_EQ(events[2].at("name"), "eth0 rx (MB/s)");
  EXPECT_EQ(events[3].at("args").at("value"), 0.0);
}

TEST(ChromeJsonWriter, InstantsAreGlobalInstantEvents) {
  const json events = events_of(write_json([](TimelineSink& sink) {
    sink.add_instant({2'000'500, "anomalies", "anomaly", "slow collective: ncclAllReduce",
                      {{"score", -3.5}}});
  }));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], json::parse(R"j({"ph":"i","s":"g","name":"slow collective: ncclAllReduce",
                                        "cat":"anomaly","pid":0,"tid":0,"ts":2000.5,
                                        "args":{"score":-3.5}})j"));
}

TEST(ChromeJsonWriter, EmptyTimeline) {
  const json trace = json::parse(write_json([](TimelineSink&) {}));
  EXPECT_EQ(trace, json::parse(R"({"traceEvents":[],"displayTimeUnit":"ns"})"));
}

TEST(ChromeJsonWriter, MetadataEventsNameProcessesAndThreads) {
  const json events = events_of(write_json([](TimelineSink& sink) {
    sink.add_process({4242, "python3 train.py"});
    sink.add_thread({4242, 4243, "pt_worker"});
  }));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], json::parse(R"({"ph":"M","name":"process_name","pid":4242,"tid":0,
                                       "args":{"name":"python3 train.py"}})"));
  EXPECT_EQ(events[1], json::parse(R"({"ph":"M","name":"thread_name","pid":4242,"tid":4243,
                                       "args":{"name":"pt_worker"}})"));
}

TEST(ChromeJsonWriter, CompleteEventWithMicrosecondTimes) {
  const std::string text = write_json([](TimelineSink& sink) {
    sink.add_slice({1'234'567, 5, 1, 2, "cuda", "cudaLaunchKernel", {}});
  });
  const json events = events_of(text);
  ASSERT_EQ(events.size(), 1u);
  const json& x = events[0];
  EXPECT_EQ(x.at("ph"), "X");
  EXPECT_EQ(x.at("name"), "cudaLaunchKernel");
  EXPECT_EQ(x.at("cat"), "cuda");
  EXPECT_EQ(x.at("pid"), 1);
  EXPECT_EQ(x.at("tid"), 2);
  EXPECT_DOUBLE_EQ(x.at("ts").get<double>(), 1234.567);
  EXPECT_DOUBLE_EQ(x.at("dur").get<double>(), 0.005);
  EXPECT_FALSE(x.contains("args"));
  EXPECT_NE(text.find(R"("ts":1234.567,"dur":0.005)"), std::string::npos) << text;
}

// Realtime ns exceed a double's 53-bit mantissa once written as microseconds; the text itself
// must still carry every digit for readers that parse it exactly.
TEST(ChromeJsonWriter, WallClockTimestampsKeepNanosecondDigits) {
  const std::string text = write_json([](TimelineSink& sink) {
    sink.add_slice({1'700'000'000'123'456'789, 1'000'000'007, 1, 1, "cuda", "cudaFree", {}});
    sink.add_slice({999, 1000, 1, 1, "cuda", "cudaFree", {}});
  });
  EXPECT_NE(text.find(R"("ts":1700000000123456.789,"dur":1000000.007)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("ts":0.999,"dur":1.000)"), std::string::npos) << text;
  EXPECT_TRUE(json::accept(text));
}

TEST(ChromeJsonWriter, ArgsKeepTheirTypes) {
  const json events = events_of(write_json([](TimelineSink& sink) {
    sink.add_slice({1000, 1000, 1, 1, "cuda", "cudaMemcpyAsync",
                    {{"kernel", std::string("sgemm")},
                     {"stream", int64_t{-7}},
                     {"bytes", uint64_t{UINT64_MAX}},
                     {"ratio", 0.1},
                     {"bad", std::numeric_limits<double>::quiet_NaN()}}});
  }));
  const json& args = events.at(0).at("args");
  EXPECT_EQ(args.at("kernel"), "sgemm");
  EXPECT_TRUE(args.at("stream").is_number_integer());
  EXPECT_EQ(args.at("stream").get<int64_t>(), -7);
  EXPECT_TRUE(args.at("bytes").is_number_unsigned());
  EXPECT_EQ(args.at("bytes").get<uint64_t>(), UINT64_MAX);
  EXPECT_EQ(args.at("ratio").get<double>(), 0.1);  // shortest round-trip form
  EXPECT_TRUE(args.at("bad").is_null());           // JSON has no NaN
}

TEST(ChromeJsonWriter, EscapesNamesAndValues) {
  const std::string nasty = "say \"hi\"\\ \n\ttab \x01 π→✓";
  const json events = events_of(write_json([&](TimelineSink& sink) {
    sink.add_process({1, nasty});
    sink.add_thread({1, 1, nasty});
    sink.add_slice({0, 1, 1, 1, nasty, nasty, {{nasty, nasty}}});
    sink.add_slice({2, 1, 1, 1, nasty, nasty, {}});  // second use comes from the escape cache
  }));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].at("args").at("name"), nasty);
  EXPECT_EQ(events[1].at("args").at("name"), nasty);
  for (int i : {2, 3}) {
    EXPECT_EQ(events[i].at("name"), nasty);
    EXPECT_EQ(events[i].at("cat"), nasty);
  }
  EXPECT_EQ(events[2].at("args").at(nasty), nasty);
}

// The kernel cuts comms at 15 bytes, possibly inside a UTF-8 sequence.
TEST(ChromeJsonWriter, InvalidUtf8IsReplacedNotFatal) {
  const std::string cut = "python\xcf";  // first byte of a two-byte sequence
  const json events = events_of(write_json([&](TimelineSink& sink) {
    sink.add_thread({1, 1, cut});
  }));
  EXPECT_EQ(events.at(0).at("args").at("name"), "python\xef\xbf\xbd");  // U+FFFD
}

TEST(ChromeJsonWriter, FinishThrowsWhenTheOutputFails) {
  std::ostringstream out;
  auto writer = make_chrome_json_writer(out);
  writer->add_slice({0, 1, 1, 1, "cuda", "cudaFree", {}});
  out.setstate(std::ios::badbit);
  try {
    writer->finish();
    FAIL() << "finish() did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write trace"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace eacgm
