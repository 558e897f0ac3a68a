// The online form of the detector, for a long-running agent: each group's model is refitted on
// a sliding window of its recent samples (default the past hour), and each sample is scored as
// it arrives against the model of the moment, before it joins the window. Samples flagged as
// anomalies stay out of later fits unless they become a large share of the window (a lasting
// change of regime, which then becomes the new normal).
//
// Judging calls one by one, a detector with a 0.5% threshold flags the slowest of a healthy
// job's calls at a steady rate: a few a minute of an operation called hundreds of times a second,
// which an always-on service must not report. With `burst_window_ns` set, a call group's
// anomalies are candidates, and reported only when (a) more of them came in the burst window
// than the group's background rate explains (the tail of a negative binomial count as spread
// as the history's counts per burst window were, a Poisson count's where they were no more
// spread, below `burst_alpha`; a history under 6 windows keeps the model's spread, a new
// group's being 1) and more than
// its history's largest burst of unreported ones (then the pending candidates of the window go
// out too; a burst counts the anomalies of one kind, by the feature that flagged them), or (b) one
// call took `extreme_slowdown` times the slowest call of the model's history and at least
// `extreme_min_ns`, or (c) a burst of slow calls of another operation in the same process took it
// along (`take_along_share`); (a) only where the burst's calls lost at least `min_burst_share` of
// the span they came in beyond their usual time. Windows are judged as before, and with
// `window_run` over 1 reported only in runs of that many consecutive anomalous windows (a
// one-second dip is a job's checkpoint or a hiccup of the machine; a fault lasts).
//
// Refits run inline (observe() fits when one is due) or, with `refit_inline` off, are handed
// out by take_due_refits() to be fitted elsewhere (the agent's worker thread: a fit takes tens
// of milliseconds, scoring must not wait for it) and installed when done.
#pragma once
#include <Eigen/Core>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "detect/detector.h"

namespace eacgm::detect {

// How many of a history's highest values a model keeps (GroupModel::tails).
constexpr size_t kSlowTail = 32;
// The features with a tail (log_duration_us, log_straggler_wait_10us; online.cpp names them).
constexpr size_t kTailKinds = 2;
// The history beyond a group's max_samples is kept as this many spans of window_ns.
constexpr uint64_t kArchiveSpans = 12;

struct OnlineOptions {
  uint64_t window_ns = 3600ull * 1'000'000'000;  // fit on the samples of the past hour
  uint64_t refit_every_ns = 60ull * 1'000'000'000;
  size_t min_samples = 200;                            // no verdicts until a group has this many
  std::map<std::string, size_t> min_samples_by_layer;  // e.g. {"window", 60}: this layer's own
  // Anomalies are kept out of the next fit (a model that learns them stops seeing them) unless
  // they are more than this share of the window: then they are the new normal.
  double new_normal_share = 0.2;
  size_t max_samples = 100'000;      // per group: the oldest go first beyond this
  size_t max_fit_samples = 100'000;  // a fit takes every n-th of the window to stay below this
  DetectOptions detect;              // components, quantile, threshold
  double min_slowdown = 3;
  double min_excess_us = 0;  // as find_anomalies
  bool refit_inline = true;
  uint64_t min_span_ns = 0;  // a call group's first model needs samples spanning this long too
  // Call groups' anomalies only in bursts (see above); 0: every anomaly at once.
  uint64_t burst_window_ns = 0;
  double burst_alpha = 1e-6;
  // Anomalies closer than this to the last one counted are one event (a hiccup of the machine
  // slows both ranks' collective, or a few calls in a row): bursts count events.
  uint64_t burst_merge_ns = 50'000'000;
  // A burst of slow calls (not late joins) goes out only if its calls' time beyond their usual
  // sums to at least this share of the span they came in (at least a second): a healthy job's
  // 15 calls of a softmax 2 ms slower than usual in 10 s cost it 0.3%, and no one wants that
  // alert (session 50: 136 such anomalies in 11 s of a healthy training). 0: any burst.
  double min_burst_share = 0;
  double extreme_slowdown = 10;
  uint64_t extreme_min_ns = 100'000'000;
  // A burst of one operation's slow calls takes along the candidates of the same process's other
  // operations of its layer that came within the burst's span in that process (from the call that
  // set off its first report to its latest, and a second either side) and lost at least this share
  // of what the burst's least call did: one fault slows a process's calls into a library, whatever
  // they are (eval cuda_latency: 10 ms on 7 launches, a burst, and on 2 cudaMemcpy, too few for
  // their own history, one of them alone in its second). Not the whole burst window: a healthy
  // job's hiccup 5 s before a fault is no part of it (eval torch_latency). What is taken along
  // takes nothing along itself. 0: each operation on its own.
  double take_along_share = 0.5;
  // Window anomalies only in runs of this many consecutive windows (each window's row: its
  // start and length), then each of the run's; 1: every one at once.
  size_t window_run = 1;
  // A window for which this says yes goes out at once, however short its run (a neighbour that
  // took much of the job's CPU for a second: agent/detection.cpp); empty: none does.
  std::function<bool(const FeatureTable& rows, size_t row, const GroupModel& model)>
      window_stands_alone;
};

// P(X >= k) for X ~ Poisson(lambda): how unusual k events are where lambda were expected.
double poisson_tail(size_t k, double lambda);
// P(X >= k) for X negative binomial of mean `mean` and variance `dispersion` times it (a
// Poisson count whose rate itself varies); Poisson where dispersion is 1 or less.
double negbin_tail(size_t k, double mean, double dispersion);

// A fit to be done: the group's training samples and how to fit them.
struct RefitJob {
  FeatureTable training;
  DetectOptions options;
  uint64_t at_ns = 0;  // the time of the group's last sample when the job was taken
  // For the model's background rate (calls only): the filters find_anomalies applies, the
  // share of the history's samples that were anomalies when they came, and its slowest call.
  double min_slowdown = 3, min_excess_us = 0;
  double live_rate = 0;
  uint64_t slowest_ns = 0;
  size_t usual_burst = 0;
  double dispersion = 1;
  std::vector<double> usual_sizes;
  std::map<std::string, std::vector<GroupModel::TailEntry>> tails;  // see GroupModel
  size_t history_calls = 0;
};

// Fits one group's model from its training table (what a RefitJob asks); nullopt when the
// table is too small or empty.
std::optional<GroupModel> fit_group(const RefitJob& job);

class OnlineDetector {
 public:
  explicit OnlineDetector(OnlineOptions options = {}) : options_(std::move(options)) {}

  // Samples of one group (`rows.group`, its features in a fixed order), in time order and
  // later than the group's earlier ones: each is scored against the group's model of the moment
  // (none before the group has min_samples), then joins its window. Returns the anomalies among
  // them, in row order, with Anomaly::row naming the row; with take_along_share, each burst
  // among them followed by the other groups' candidates it took along (Anomaly::burst_of set;
  // their rows of their own tables).
  std::vector<Anomaly> observe(const FeatureTable& rows);
  // The same, judging only the rows whose `judged` is true (the others are learned from; e.g.
  // a process's first seconds, its warm-up). `judged` has one entry per row.
  std::vector<Anomaly> observe(const FeatureTable& rows, const std::vector<bool>& judged);
  // One sample, the same way.
  std::optional<Anomaly> observe(const std::string& layer, const std::string& name,
                                 const std::vector<std::string>& feature_names, uint64_t ts_ns,
                                 uint64_t dur_ns, const Eigen::VectorXd& x);

  // A call of the group that its caller reported by a rule of its own (the agent's late joins
  // in a job's first seconds): an anomaly reported, so kept out of the fits, the tails and the
  // bursts' history as the detector's own reported ones are. Its start and duration name it.
  void note_reported(const std::string& group, uint64_t ts_ns, uint64_t dur_ns);

  // With refit_inline off: the refits that are due, each taken once until installed (or
  // dropped, if the fit failed: install(group, nullopt)).
  std::vector<RefitJob> take_due_refits();
  void install(const std::string& group, std::optional<GroupModel> model, uint64_t fitted_at);
  // Drops a group: its model, history and pending anomalies (a job's windows, once the job
  // ended). A refit out for it is ignored when it comes back.
  void forget(const std::string& group) { groups_.erase(group); }
  // Models saved earlier (a restart resumes scoring at once; refits follow as samples come).
  void load(const DetectorModel& saved);
  // Every current model, for saving.
  DetectorModel models() const;

  // The starts of a window group's anomalous windows held for the next (window_run), not
  // reported yet.
  std::vector<uint64_t> held_windows(const std::string& group) const;
  size_t refits() const { return refits_; }
  // Call candidates never reported: no burst of their kind carried them (counted when they
  // leave the burst window, or a refit drops them), or a size the history had again and again.
  size_t unreported() const { return unreported_; }
  // Anomalous windows never reported: runs shorter than window_run.
  size_t unreported_windows() const { return unreported_windows_; }
  // The current model of a group, if it has one (for saving, or to show what is normal).
  const GroupModel* model(const std::string& layer, const std::string& name) const;
  size_t groups() const { return groups_.size(); }
  size_t fitted() const;  // groups with a model

 private:
  struct Sample {
    uint64_t ts_ns, dur_ns;
    Eigen::VectorXd x;
    bool flagged;           // was an anomaly when it came
    bool reported = false;  // and was reported (a burst, or far slower than usual)
    int64_t runq_ns = -1;   // (calls) the thread's wait for a CPU during it; -1: unknown
  };
  struct Group {
    std::string key, layer, name;  // key: FeatureTable::group
    std::vector<std::string> features;
    std::deque<Sample> window;
    std::optional<GroupModel> model;
    LateTurns turns;  // collectives: who was late to whom in the last seconds' batches
    // A burst is of one kind of anomaly (the feature that flagged it most: the duration, the
    // size, the wait for a late rank): a run of late-rank waits says nothing of the group's
    // few usually slow calls in the same seconds, which are no more frequent than usual.
    struct Burst {
      std::deque<Anomaly> pending;  // candidates of the burst window not reported (yet)
      // every candidate of the burst window, reported or not: its time, its value of the kind's
      // feature (NaN: none kept), and the level at which it went out for its severity
      // (report_severe; NaN: it did not)
      struct Seen {
        uint64_t ts_ns;
        double value;
        double level;
      };
      std::deque<Seen> seen;
      // The last candidate of the kind that went out as a burst (0: none yet) and that burst's
      // pace (its span over its events): a candidate well past the burst's pace starts a burst
      // of its own (report_burst).
      uint64_t out_ns = 0;
      double out_pace_ns = 0;
      // A candidate at `ts_ns` went out in a burst of `events` from `first_ns`.
      void went_out(uint64_t ts_ns, uint64_t first_ns, size_t events) {
        if (ts_ns < out_ns) return;
        out_ns = ts_ns;
        out_pace_ns =
            double(ts_ns - std::min(first_ns, ts_ns)) / double(std::max<size_t>(events, 2) - 1);
      }
    };
    std::map<std::string, Burst> bursts;  // by kind
    // The history's calls that left the window for max_samples (not for their age), by span
    // of window_ns / kArchiveSpans: their count, the slowest, and per tail kind the highest
    // values (a min-heap of at most kSlowTail, with their times; reported and undecided
    // anomalies left out). So the tails and history_calls are of the whole history (an hour),
    // not of the last max_samples calls (the agent's 20,000 are 13 s of 1,500 launches a
    // second, and 9 calls 10 ms slow in 2 s are no burst against 13 s without such calls).
    struct Archived {
      uint64_t from_ns = 0;
      size_t calls = 0;
      uint64_t slowest_ns = 0;
      std::vector<std::pair<double, uint64_t>> high[kTailKinds];  // (value in us, time)
    };
    std::deque<Archived> archive;
    // The same history's decided calls by burst window (from_ns a multiple of it): how many,
    // and how many of them were anomalies, reported or not (events, as a burst counts them).
    // Their spread from window to window is the group's dispersion (reported ones too: a
    // cluster reported while the spread was unknown must not make the next one look rarer).
    struct Bin {
      uint64_t from_ns = 0;
      size_t calls = 0, events = 0;
    };
    std::deque<Bin> bins;
    uint64_t last_event_ns = 0;  // the archive's last event counted (bins' merging)
    // (windows) the current run of consecutive anomalous windows: where it ends, how long it
    // is, and its anomalies not reported yet (under window_run of them)
    uint64_t run_end_ns = 0;
    size_t run_length = 0;
    std::vector<Anomaly> run_held;
    // calls that left the window while anomalies undecided (their burst window not over):
    // archived when it is, reported or not
    std::deque<Sample> limbo;
    uint64_t fitted_at = 0;
    uint64_t first_ts = UINT64_MAX, last_ts = 0;
    bool refitting = false;  // a refit job is out
    size_t fitted_size = 0;  // the window's size when the last refit job was taken
  };
  bool due(const Group& g) const;
  size_t min_samples(const Group& g) const;
  RefitJob job_for(const Group& g) const;
  void add_training_rows(const Group& g, size_t left_out, bool skip_flagged,
                         FeatureTable& t) const;
  void add_tails(const Group& g, uint64_t decided_before, RefitJob& job) const;
  void add_usual_sizes(const Group& g, RefitJob& job) const;
  size_t largest_burst(const Group& g, uint64_t decided_before) const;
  double dispersion(const Group& g, uint64_t decided_before) const;
  void report_bursts(Group& g, std::vector<Anomaly>& candidates, std::vector<Anomaly>& out);
  void report_burst(Group& g, const std::string& kind, Group::Burst& b, Anomaly& a,
                    std::vector<Anomaly>& out);
  bool material(const std::string& kind, const std::deque<Anomaly>& pending, const Anomaly& a,
                double level, uint64_t since = 0) const;
  // (only the candidates after `since` count: see report_burst)
  bool report_severe(Group& g, const std::string& kind, Group::Burst& b, Anomaly& a, size_t calls,
                     uint64_t since, std::vector<Anomaly>& out);
  void report_window_runs(Group& g, const FeatureTable& rows, std::vector<Anomaly>& found);
  // (take_along_share) the last slow-call burst of a process's layer: recorded from the calls
  // `out` gained from `first`, then the other operations' pending candidates it takes along
  void note_burst(const Group& g, std::vector<Anomaly>& out, size_t first);
  // whether a candidate of `g` is taken along by such a burst of another operation (then it
  // carries that burst's figures)
  bool taken_along(const Group& g, Anomaly& a) const;
  RefitJob take_job(Group& g);
  void archive(Group& g, const Sample& s) const;

  OnlineOptions options_;
  std::map<std::string, Group> groups_;
  // A process's calls of one operation that went out in a burst, in one run (a second of quiet
  // ends it): from the call that set off its first report to the latest; what the least of them
  // lost (the bar is the burst's own weakest call: a call as slow as one it reported is as much
  // a part of the fault); the burst's figures as its latest report gave them. One call of a
  // process swept into another process's burst takes nothing along (calls under 2).
  struct RecentBurst {
    std::string group, name;  // the operation whose burst it was
    uint64_t first_ns = 0, last_ns = 0;
    double least_lost_us = 0;
    size_t calls = 0;
    size_t burst = 0;
    double expected = 0;
    uint64_t window_ns = 0;
  };
  std::map<std::pair<uint32_t, std::string>, RecentBurst> recent_bursts_;  // (pid, layer)
  size_t refits_ = 0;
  size_t unreported_ = 0, unreported_windows_ = 0;
};

}  // namespace eacgm::detect
