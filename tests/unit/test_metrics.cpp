// The agent's metrics sink on its own: the collective counters of a node's ranks, as /metrics
// shows them.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>

#include "export/metrics.h"
#include "report/collectives.h"

namespace eacgm {
namespace {

constexpr uint64_t ms = 1'000'000;

// The value of the one series of FAMILY whose labels include LABEL, if /metrics has it.
std::optional<double> series_value(const std::string& text, const std::string& family,
                                   const std::string& label) {
  std::istringstream in(text);
  std::optional<double> found;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family + "{", 0) != 0 || line.find(label) == std::string::npos) continue;
    EXPECT_FALSE(found) << "two series of " << family << " with " << label;
    found = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return found;
}

// One instance of a 2-rank collective where rank 1 joined WAIT_NS after rank 0.
CollectiveMatcher::Instance instance(uint64_t t, uint64_t wait_ns) {
  CollectiveMatcher::Instance inst;
  RankCall r0, r1;
  r0.rank = 0, r0.pid = 100, r0.ts = t, r0.end = t + wait_ns + ms;
  r1.rank = 1, r1.pid = 101, r1.ts = t + wait_ns, r1.end = t + wait_ns + ms;
  inst.calls = {r0, r1};
  PeerWait w0, w1;
  w0.wait_ns = wait_ns, w0.last_rank = 1, w0.last_pid = 101;
  w1.wait_ns = 0, w1.last_rank = 1, w1.last_pid = 101;
  inst.waits = {w0, w1};
  inst.all_ranks = true;
  return inst;
}

TEST(MetricsSink, EveryRankHasItsStragglerCountersFromItsFirstInstanceAtZero) {
  MetricsSink m("node-a");
  m.add_instance("gloo:all_reduce", instance(1'000 * ms, 30 * ms));
  const std::string text = m.text();
  // Rank 0 never joined last: its counters exist at 0, so that its first late join is an
  // increase that rate() and the straggler alert see (a counter born at 1 is not).
  EXPECT_EQ(series_value(text, "eacgm_collective_last_joined_total", "rank=\"0\""), 0.0) << text;
  EXPECT_EQ(series_value(text, "eacgm_collective_straggling_seconds_total", "rank=\"0\""), 0.0);
  // Rank 1 joined last, 30 ms late, with nothing else to explain it: all of it is straggling.
  EXPECT_EQ(series_value(text, "eacgm_collective_last_joined_total", "rank=\"1\""), 1.0);
  EXPECT_NEAR(
      series_value(text, "eacgm_collective_straggling_seconds_total", "rank=\"1\"").value_or(NAN),
      0.030, 1e-9);
  EXPECT_NEAR(
      series_value(text, "eacgm_collective_peer_wait_seconds_total", "rank=\"0\"").value_or(NAN),
      0.030, 1e-9);

  m.add_instance("gloo:all_reduce", instance(2'000 * ms, 10 * ms));
  const std::string later = m.text();
  EXPECT_EQ(series_value(later, "eacgm_collective_last_joined_total", "rank=\"0\""), 0.0);
  EXPECT_EQ(series_value(later, "eacgm_collective_last_joined_total", "rank=\"1\""), 2.0);
  EXPECT_NEAR(
      series_value(later, "eacgm_collective_straggling_seconds_total", "rank=\"1\"").value_or(NAN),
      0.040, 1e-9);
}

}  // namespace
}  // namespace eacgm
