// A rank late in a job's first seconds, named without a model. The agent's models judge a call
// once its operation has 200 calls over 30 s and the calling process is 10 s old (a job's start
// is not its normal): a job of 15 s is never judged, and a straggler there from the start would
// be learnt as the job's normal. Yet a straggler needs no learnt normal: its peers wait for it
// in the same instance of the same collective, and how long a join is usually late is the job's
// own median wait for the last rank. YoungStragglers judges the matched collectives the models
// do not (a process's warm-up; an operation with no model yet, which for a collective called
// less than 200 times in 30 s is its whole life), per job and operation: a call that waited for
// its last rank at least `min_late_ns`, `usual_factor` times the job's median such wait and a
// quarter of its own time is a late join (waits the host saw: NCCL's measured on the GPU are
// the models' alone); the late joins of one rank go out when,
// within `window_ns`, there are `min_events` of them (one per instance: the waiting ranks'
// calls whose last rank joined within `merge_ns` of each other) on which its peers waited at
// least `min_share` of the span they came in (from the first to the last, and one mean interval
// more: n joins a period T apart span nT; at least a second) and `stand_out` times as long as on
// any other rank (ranks late in turns are a busy machine, not a straggler), and each next one
// while that holds (but those under `typical_share` of the rank's median late join: a busy
// machine's 5 ms late join beside a straggler's 30 ms ones). A job's first `start_ns` of
// collectives and first `min_usual` waits are not judged: its ranks meet there for the first
// time.
//
// The case (31): a 2-rank Gloo job of 14 s whose rank 1 sleeps 30 ms before 1% of its
// all_reduces: its peers wait ~10% of the time for it. A healthy irregular job's checkpoint
// (rank 0 late by 5-70 ms every 2 s, bench/irregular_job.py) is 1-2%; a rank that keeps its
// peers waiting 5% of the time or more (a 100 ms checkpoint every 2 s) is named, periodic or not.
//
// One rule for both drivers: the agent feeds it the calls its models do not judge yet, detect
// (young_stragglers() below) each operation's training calls, which would otherwise teach its
// model a rank late from the job's start as the job's normal.
//
// Calls come in the order they ended (not quite in time order across ranks): the joins of the
// window are sorted before they are counted.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "detect/detector.h"

namespace eacgm {
class Collectives;
}

namespace eacgm::detect {

struct YoungStragglerOptions {
  uint64_t start_ns = 500'000'000;
  uint64_t min_late_ns = 5'000'000;
  double usual_factor = 10;
  uint64_t window_ns = 10'000'000'000;
  uint64_t merge_ns = 50'000'000;
  size_t min_events = 3;
  double min_share = 0.05;
  double stand_out = 3;
  double typical_share = 0.5;  // a late join under this share of the rank's median one stays in
  size_t usual_waits = 512;    // the median over the job's last this many waits
  size_t min_usual = 50;     // and none before it has this many
};

// A matched collective call of a rank (PeerWait, report/collectives.h).
struct MatchedCall {
  uint64_t ts_ns = 0, dur_ns = 0;
  uint32_t pid = 0, tid = 0;
  int64_t runq_ns = -1;
  uint64_t straggling_ns = 0;  // the wait for the last rank less what its CPU and previous call explain
  uint64_t joined_ns = 0;      // when the last rank joined (the same for every call of the instance)
  uint32_t late_pid = 0;       // the rank that joined last (0: unknown)
  size_t row = 0;              // its row in its table (the anomaly's `row`)
};

class YoungStragglers {
 public:
  explicit YoungStragglers(YoungStragglerOptions o = {}) : options_(o) {}
  // One matched call of `op` in `job` that the models do not judge. Returns the late joins that
  // go out with it (its own and those
  // of its rank pending in the window), as anomalies of layer comm ("straggling rank: OP waited
  // for a peer"; who joined late is explain_wait's to say).
  std::vector<detect::Anomaly> observe(const std::string& job, const std::string& op,
                                       const MatchedCall& c);
  // Forgets the jobs and operations with no call since `ts_ns`.
  void forget_before(uint64_t ts_ns);

 private:
  struct Candidate {
    MatchedCall call;
    double usual_ns;
    bool reported;
  };
  struct State {
    uint64_t first_ns = 0, last_ns = 0;
    std::deque<uint64_t> waits;     // the last usual_waits waits for the last rank
    std::deque<Candidate> recent;   // late joins of the last window_ns
  };
  YoungStragglerOptions options_;
  std::map<std::pair<std::string, std::string>, State> states_;
};

// Offline (detect), the same rule over a recording (one job): feeds `rule` the matched
// collectives of the comm tables' rows that `unjudged` picks (those no model judges: each
// operation's training calls, and the calls of an operation without a model), each table's in
// time order, and returns the late joins it names (their `row` is their table's). Those rows are
// marked left out of training (FeatureTable::left_out): a rank late from the job's start is not
// its normal, and the models, learnt without its late joins, judge the rest of the job as the
// agent's do.
std::vector<Anomaly> young_stragglers(std::vector<FeatureTable>& tables,
                                      const Collectives& collectives, YoungStragglers& rule,
                                      const std::function<bool(const FeatureTable&, size_t)>& unjudged);

}  // namespace eacgm::detect
