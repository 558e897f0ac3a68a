// Anomaly detection on feature tables: one GMM per group (operation, or the cross-layer
// windows), a threshold calibrated on the training samples, and a probable cause from the
// features that pull a sample's score down.
#pragma once
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "detect/features.h"
#include "detect/gmm.h"

namespace eacgm::detect {

struct DetectOptions {
  int components = 0;      // 0: chosen by BIC among 1..max_components
  int max_components = 4;
  double quantile = 0.005;  // threshold: this quantile of the training scores
  std::optional<double> threshold;  // or this log-density, for every group
  size_t min_samples = 30;  // a group with fewer training samples gets no model
  // added to covariances: on log-scale features, a spread below 1% is no spread
  double reg_covar = 1e-4;
  uint64_t seed = 0;
};

struct GroupModel {
  std::string group, layer, name;
  std::vector<std::string> features;
  GaussianMixture model;
  double threshold = 0;  // on the log-density under the most likely component
  size_t train_samples = 0;
  // Online only (the agent's models; 0 where unknown): the share of healthy calls that are
  // anomalies one by one (below the threshold and clearly slower), and the slowest call of the
  // history the model was fitted on. The agent reports a group's anomalies when they come more
  // often than this share explains, or when a call is far slower than any it saw.
  double background_rate = 0;
  uint64_t slowest_ns = 0;
  // and the most such calls that came within one burst window of that history unreported (a
  // healthy job's own bursts: a machine's hiccup slows several calls at once)
  size_t usual_burst = 0;
  // and how much more its count of such calls per burst window varied than a Poisson count
  // of the same mean does (variance over mean, at least 1): a VM's busy minutes make a job's
  // slow calls come in clusters, so a burst is judged against that spread (negbin_tail)
  double dispersion = 1;
  // and the sizes (log2_bytes) its calls had at least 3 times in that history: a size the job
  // uses again and again (a flag all-reduced every 100 steps) is no unusual size, however rare
  std::vector<double> usual_sizes;
  // and, by feature (log_duration_us: the call's duration net of waits; log_straggler_wait_10us:
  // a collective's straggling wait; both in us), its history's highest values (at most
  // kSlowTail, highest first, reported anomalies left out), each with the most calls at least
  // that high within one burst window of the history; with history_calls, the history's size.
  // How often calls as slow, or as late, as a burst's came: a few calls 2,000x slower than
  // usual in seconds are a burst even where the job's many 3x-slower calls make the group's
  // background rate high (a 10 ms delay in 0.2% of cudaMemcpy calls for 2 s), and a rank 30 ms
  // late is, where its 1-2 ms late joins are not.
  struct TailEntry {
    double value = 0;
    size_t burst = 0;
  };
  std::map<std::string, std::vector<TailEntry>> tails;
  size_t history_calls = 0;
  // A collective's straggling wait (log_straggler_wait_10us, in us) that one healthy call in
  // kWaitTailOneIn would exceed, the training calls' tail extrapolated (at most to twice their
  // longest wait), and at least what all
  // but the threshold's quantile of them stayed under (0: no such feature). A call that waited
  // twice that, and min_excess_us more, is a straggler whatever its density: in the feature's
  // log a job's heavy tail of healthy waits (a 2-core machine's contention: 0.3-30 ms) is a
  // component so wide that a 55 ms straggle lies three of its deviations out, above the
  // threshold. And only such a call, or one beyond wait_quantile_us with a neighbour beyond it:
  // one flagged by its density for a shorter wait is not.
  double wait_tail_us = 0;
  // What all but the threshold's quantile of the training calls' straggling waits stayed under
  // (in us; models saved before session 35: their wait_tail_us). A call that waited twice that,
  // and min_excess_us more, is a straggler where the same rank was as late in another instance
  // among the waiting process's 20 calls either side, and was late there more than three times
  // as often as it waited that long itself (a rank late again nearby, not ranks late in turns).
  double wait_quantile_us = 0;
  // Calls: the wait for a CPU during a call (its thread's run-queue time) that all but the
  // threshold's quantile of the training calls stayed under, in us (-1: unknown, as in models
  // saved before session 34). A slow call names CPU interference only where it waited twice
  // that and 1 ms more (CallContext::explain): a job with more runnable threads than cores
  // waits in most of its calls (examples/gpt_ddp.py: 88% of aten::mm's calls waited a quarter
  // of their time or more), and that wait is its own.
  double runq_tail_us = -1;
};

// GroupModel::wait_tail_us: the wait one healthy call in this many would exceed.
constexpr double kWaitTailOneIn = 1000;

struct DetectorModel {
  uint64_t window_ns = 0;
  std::vector<GroupModel> groups;
  // Training windows left out because the job was starved of CPU in them (starved_of_cpu
  // against the training windows' medians): a noisy neighbour while learning is no normal to
  // learn. Not saved with the model; it describes this training only.
  size_t starved_training_windows = 0;
  // Training windows left out as the job's start-up (its leading windows, unusual even to a
  // model fit on them all). Not saved with the model either.
  size_t startup_training_windows = 0;
  // Training windows left out as beyond the model's own 0.5% tail (a model fit on them all
  // would flag them), wherever they came, when at most a tenth. Not saved with the model.
  size_t outlier_training_windows = 0;
};

// The job got under half its usual CPU while it waited for a CPU three times as long (or more)
// per CPU-second it got: something else took the CPUs. (A job waiting elsewhere, on a link or
// a disk, waits less for CPUs as it uses less: its wait per CPU-second stays.)
bool starved_of_cpu(double cores, double usual_cores, double runq_ms_per_s,
                    double usual_runq_ms_per_s);

// The kind of a cause, without the operation it names ("slow cuda call: cudaMalloc" -> "slow
// cuda call", "unusual size of cudaMemcpy" -> "unusual size"): a bounded set, fit for a metric
// label.
std::string cause_kind(std::string_view cause);
// Every (layer, cause kind) that probable_cause gives: the agent exports each anomaly counter
// at 0 from its start, since a counter born at its first increment is invisible to increase().
const std::vector<std::pair<std::string, std::string>>& cause_kinds();

nlohmann::json detector_to_json(const DetectorModel& model);
DetectorModel detector_from_json(const nlohmann::json& j);

// Trains on the rows of each table that start before `until_ns` (all rows: UINT64_MAX).
// Groups too small to model are named in `skipped` with the reason.
DetectorModel train_detector(const std::vector<FeatureTable>& tables, uint64_t until_ns,
                             const DetectOptions& options, std::vector<std::string>* skipped);
// The same with a time per group (groups not in the map: all their rows).
DetectorModel train_detector(const std::vector<FeatureTable>& tables,
                             const std::map<std::string, uint64_t>& until_ns,
                             const DetectOptions& options, std::vector<std::string>* skipped);
// Per group, the start of the row that ends its first `fraction` of rows (by count, in time
// order; UINT64_MAX when the fraction takes them all): training on each operation's first
// calls does not move when a fault makes some calls take much longer, as a split of the time
// would.
std::map<std::string, uint64_t> split_by_count(const std::vector<FeatureTable>& tables,
                                               double fraction);

// A feature of an anomaly as measured and as usual (its component's mean), in the feature's
// own units (ms/s, calls/s, microseconds, bytes): what a person reads, where the score's
// contributions are only how much each feature pulled the score down.
struct Measured {
  std::string feature;
  double value = 0, usual = 0;
};
struct Anomaly {
  uint64_t ts_ns = 0, dur_ns = 0;
  uint32_t pid = 0;      // calls: the calling process; 0 for windows
  uint32_t tid = 0;      // calls: and thread
  int64_t runq_ns = -1;  // calls: the thread's wait for a CPU during the call; -1: unknown
  double runq_tail_us = -1;  // calls: its operation's GroupModel::runq_tail_us
  std::string layer, name;
  double score = 0, threshold = 0;  // log-density under the most likely component
  std::vector<std::pair<std::string, double>> top_features;  // largest contributions first
  std::string cause;
  size_t row = 0;  // the row of its table
  double usual_us = 0;  // calls: the duration usual for it (its component's), in microseconds
  std::vector<Measured> measured;  // the top features (as top_features), in their units
  // Online: the burst that made it worth reporting: `burst` such calls of its operation (or of
  // `burst_of`'s, below) in the `burst_window_ns` before it (the burst window, or the span a
  // severe burst came in) where `burst_expected` were usual; or 0 when it was reported on its
  // own (far slower than any call seen).
  size_t burst = 0;
  double burst_expected = 0;
  uint64_t burst_window_ns = 0;
  // Online: the operation whose burst took it along (OnlineOptions::take_along_share; the
  // burst figures above are that burst's), else empty.
  std::string burst_of;
  // A collective that waited for a straggler (explain_wait): who joined last, how late, and
  // where (" on host H, job J" or ""); late_pid 0 where none was named.
  int64_t late_rank = -1;
  uint32_t late_pid = 0;
  uint64_t late_ns = 0;
  std::string late_where;
  // The CPU stalls the host saw under it (CallContext::explain, explain_window); 0: none
  // worth naming.
  double stalled_ns = 0;
  // Online, a late join in a job's first seconds (detect/young_stragglers.h): the share of the
  // span its `burst` late joins came in (burst_window_ns) that its peers waited for the late
  // rank; 0 for the others.
  double late_share = 0;
};

// How far below its threshold an anomaly's score fell (the lower, the more unusual); +infinity
// for one that no model scored (a late join named against the job's own collectives:
// young_stragglers.h, score and threshold NaN), which ranks after every scored one.
inline double margin(double score, double threshold) {
  double m = score - threshold;
  return std::isnan(m) ? INFINITY : m;
}
inline double margin(const Anomaly& a) { return margin(a.score, a.threshold); }

// The anomaly's measured features in words, joined by ", " ("run-queue wait 458 ms/s (usual 3
// ms/s), CPU 0.3 cores (usual 1 cores)"; those that read as usual left out: describe_features);
// its contributions where it has none.
std::string describe_measured(const Anomaly& a);
// The anomalies table's features column for it (store/anomalies.h): [name, contribution, value,
// usual] per top feature.
std::string features_column(const Anomaly& a);

// Scores the rows of each table that start at or after `from_ns` against the model of its
// group (tables without a model are not scored) and returns those below their threshold,
// except calls flagged mostly for their duration that are not at least `min_slowdown` times
// and `min_excess_us` microseconds slower than their component's typical duration (quicker or
// barely slower is no fault; a 15 us operator taking 60 us is an interrupt, not a problem),
// and windows unusual only in that the job did more per second than in training (more calls,
// more of its own traffic, more CPU, quicker calls: it ran faster) or only in that its calls
// ran a little slower or fewer (less than kMinWindowSlowdown, no resource under pressure),
// counted in `not_flagged`.
struct WindowsNotFlagged {
  size_t faster = 0;
  size_t a_little_slower = 0;
};
constexpr double kMinWindowSlowdown = 1.5;
std::vector<Anomaly> find_anomalies(const DetectorModel& model,
                                    const std::vector<FeatureTable>& tables, uint64_t from_ns,
                                    double min_slowdown = 3, double min_excess_us = 0,
                                    WindowsNotFlagged* not_flagged = nullptr);
// The same with a time per group (groups not in the map: from `otherwise_from_ns`).
std::vector<Anomaly> find_anomalies(const DetectorModel& model,
                                    const std::vector<FeatureTable>& tables,
                                    const std::map<std::string, uint64_t>& from_ns,
                                    double min_slowdown, double min_excess_us,
                                    WindowsNotFlagged* not_flagged, uint64_t otherwise_from_ns = 0);

// Who was late to whom in a group's collectives over the past kLateTurnsSpanNs: each matched
// wait beyond the model's quantile (GroupModel::wait_quantile_us), its time, the waiting
// process and the rank that joined last. A wait beyond the tail names a straggler only where
// that rank was late more than kLateOverWaited times as often as it waited that long for
// others itself in that span: on a busy machine a healthy 2-rank job's ranks join 2-7 ms late
// in turns for tens of seconds (an online eval run: rank 1 named 18 times, rank 0 7 times, in
// 28 s before any fault), and neither is the straggler; a rank late again and again is,
// whatever the machine does to its peers now and then. Only waits within a factor of four of
// the one judged count, either way: a rank 30 ms late that waited 1-3 ms for the other now and
// then (a loaded 2-core machine's e2e test) is not late in turns with it, where counting those
// waits hid a fifth of its late steps. The agent keeps one per group across its batches of
// rows (its history of the last seconds); detect's whole table is one batch. At most
// kLateTurnsKept joins are kept (the latest), so judging a row costs a bounded scan.
struct LateTurns {
  struct Late {
    uint64_t ts_ns = 0;
    uint32_t waiter = 0, late = 0;
    double waited_us = 0;
  };
  std::deque<Late> seen;
};
constexpr uint64_t kLateTurnsSpanNs = 10'000'000'000;
constexpr size_t kLateOverWaited = 3;
// Of the span's waits, only those at least this share of the one judged count (either way).
constexpr double kLateTurnsComparable = 0.25;
constexpr size_t kLateTurnsKept = 1024;

// The same for one group's table against its model, appending to `out` in row order. `turns`:
// the group's recent late joins, carried from earlier tables (null: this table's alone).
void find_anomalies(const GroupModel& model, const FeatureTable& table, uint64_t from_ns,
                    double min_slowdown, std::vector<Anomaly>& out, double min_excess_us = 0,
                    WindowsNotFlagged* not_flagged = nullptr, LateTurns* turns = nullptr);

// What most likely made a sample anomalous, from its layer and its top features. `lowered`
// names the features that were below normal (the most likely component's mean): a resource
// explains a window only in the direction that hurts (more run-queue wait, more retransmits,
// more reclaim, a lower SM clock); less of it is a symptom of waiting elsewhere. `values`, where
// given, holds each feature's value and usual value (the component's mean); `training_range`,
// where known (detect: the job's own training windows), each feature's 1st and 99th percentile
// there: a wait for the CPUs within it, or a CPU above its low end, names no neighbour.
using ValueAndUsual = std::map<std::string, std::pair<double, double>>;
std::string probable_cause(const std::string& layer, const std::string& name,
                           const std::vector<std::pair<std::string, double>>& top,
                           const std::set<std::string>& lowered = {},
                           const ValueAndUsual& values = {},
                           const ValueAndUsual& training_range = {});

}  // namespace eacgm::detect
