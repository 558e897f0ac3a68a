// Whether slow calls are worth reporting (detect/materiality.h): the agent's rule, which
// `detect` applies too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "detect/materiality.h"

namespace eacgm::detect {
namespace {

constexpr uint64_t kMs = 1'000'000, kS = 1'000'000'000;

// A call of `name` at `ts` flagged for its duration, `lost_ms` beyond its usual 0.5 ms.
Anomaly slow(const std::string& name, uint64_t ts, double lost_ms, const char* layer = "torch") {
  Anomaly a;
  a.ts_ns = ts;
  a.usual_us = 500;
  a.dur_ns = uint64_t((0.5 + lost_ms) * 1e6);
  a.layer = layer;
  a.name = name;
  a.top_features = {{"log_duration_us", 5.0}};
  return a;
}

std::vector<uint64_t> times(const std::vector<Anomaly>& v) {
  std::vector<uint64_t> t;
  for (const auto& a : v) t.push_back(a.ts_ns);
  return t;
}

TEST(Materiality, ALossIsJudgedOverItsSpanOfOneToTenSeconds) {
  EXPECT_TRUE(material_loss(10'000, 0, 0.01, 10 * kS)) << "10 ms in a second is 1%";
  EXPECT_FALSE(material_loss(9'000, 0, 0.01, 10 * kS));
  EXPECT_FALSE(material_loss(9'000, 500 * kMs, 0.01, 10 * kS)) << "half a second counts as one";
  EXPECT_TRUE(material_loss(50'000, 5 * kS, 0.01, 10 * kS));
  EXPECT_FALSE(material_loss(50'000, 6 * kS, 0.01, 10 * kS));
  EXPECT_FALSE(material_loss(99'000, 20 * kS, 0.01, 10 * kS)) << "at most 10 s: 100 ms";
  EXPECT_TRUE(material_loss(100'000, 20 * kS, 0.01, 10 * kS));
  EXPECT_TRUE(material_loss(0, 5 * kS, 0, 10 * kS)) << "a share of 0 reports every one";
}

// Three aten::addmm calls 1.3 ms slow, 4 s apart (a healthy job on a busy machine): none is
// reported; late joins and windows are not judged by their time lost.
TEST(Materiality, ScatteredSlowCallsGoOthersStay) {
  std::vector<Anomaly> v = {slow("aten::addmm", 10 * kS, 1.3), slow("aten::addmm", 14 * kS, 1.3),
                            slow("aten::addmm", 18 * kS, 1.3)};
  Anomaly late = slow("gloo:all_reduce", 11 * kS, 2, "comm");
  late.top_features = {{"log_straggler_wait_10us", 5.0}};
  Anomaly window;
  window.layer = "window";
  window.name = "window";
  window.ts_ns = 12 * kS;
  window.top_features = {{"log_duration_us", 3.0}};  // (a window is never judged by it)
  v.insert(v.begin() + 1, late);
  v.push_back(window);
  EXPECT_EQ(drop_immaterial(v, 0.01, 10 * kS), 3u);
  EXPECT_EQ(times(v), (std::vector<uint64_t>{11 * kS, 12 * kS}));
}

// A burst of 20 aten::gelu calls 5 ms slow in 2 s (100 ms lost) stays, and so does a call 2 ms
// slow 7 s after it (102 ms in 9 s from the burst's first call); one 13 s after the burst's
// last is alone (2 ms in a second) and goes. Each operation is judged by its own calls: two
// 6 ms ones of two operations in one second go, though together they lost 12 ms.
TEST(Materiality, ACallStaysWhereARunOfItsOperationsSlowCallsLostTheShare) {
  std::vector<Anomaly> v;
  for (int i = 0; i < 20; ++i) v.push_back(slow("aten::gelu", 100 * kS + uint64_t(i) * 100 * kMs, 5));
  v.push_back(slow("aten::gelu", 109 * kS, 2));
  v.push_back(slow("aten::gelu", 115 * kS, 2));
  v.push_back(slow("aten::mm", 200 * kS, 6));
  v.push_back(slow("aten::bmm", 200 * kS + 300 * kMs, 6));
  std::vector<Anomaly> all = v;
  EXPECT_EQ(drop_immaterial(v, 0.01, 10 * kS), 3u);
  ASSERT_EQ(v.size(), 21u);
  EXPECT_EQ(v.back().ts_ns, 109 * kS);
  EXPECT_EQ(drop_immaterial(all, 0, 10 * kS), 0u) << "a share of 0 keeps every one";
  EXPECT_EQ(all.size(), 24u);
  // the same calls out of time order: the same verdicts, the kept ones in their given order
  std::vector<Anomaly> shuffled(v.rbegin(), v.rend());
  shuffled.push_back(slow("aten::gelu", 115 * kS, 2));
  EXPECT_EQ(drop_immaterial(shuffled, 0.01, 10 * kS), 1u);
  EXPECT_EQ(shuffled.front().ts_ns, 109 * kS);
}

// Many calls, each a little slow: 200,000 calls 2 us slow over 100 s (4 ms a second) go, and
// each of 200,000 calls 6 us slow (12 ms a second) stays; judged without a pass over every
// pair (this finishes at once).
TEST(Materiality, ManySlowCallsAreJudgedAsTheirRate) {
  for (double lost_ms : {0.002, 0.006}) {
    std::vector<Anomaly> v;
    for (uint64_t i = 0; i < 200'000; ++i) v.push_back(slow("python:f", i * 500'000, lost_ms, "python"));
    size_t dropped = drop_immaterial(v, 0.01, 10 * kS);
    EXPECT_EQ(dropped, lost_ms < 0.005 ? 200'000u : 0u) << lost_ms << " ms each";
  }
}

}  // namespace
}  // namespace eacgm::detect
