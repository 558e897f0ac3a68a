// Training per group, threshold calibration, scoring and cause mapping.
#include "detect/detector.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <unordered_map>

#include <Eigen/Cholesky>
#include <nlohmann/json.hpp>

#include "store/anomalies.h"  // describe_feature, feature_title
#include "util/error.h"

namespace eacgm::detect {
namespace {

Eigen::MatrixXd select_rows(const Eigen::MatrixXd& x, const std::vector<Eigen::Index>& keep) {
  Eigen::MatrixXd out(Eigen::Index(keep.size()), x.cols());
  for (size_t r = 0; r < keep.size(); ++r) out.row(Eigen::Index(r)) = x.row(keep[r]);
  return out;
}

// A row that training leaves out (FeatureTable::left_out).
bool left_out(const FeatureTable& t, size_t i) { return i < t.left_out.size() && t.left_out[i]; }

// The rows before `cut` (training: but those left out) or from it on.
Eigen::MatrixXd rows_where(const FeatureTable& t, bool before, uint64_t cut) {
  std::vector<Eigen::Index> keep;
  for (size_t i = 0; i < t.ts_ns.size(); ++i)
    if ((t.ts_ns[i] < cut) == before && !(before && left_out(t, i))) keep.push_back(Eigen::Index(i));
  return select_rows(t.values, keep);
}

double quantile_of(Eigen::VectorXd v, double q) {
  std::sort(v.data(), v.data() + v.size());
  double pos = q * double(v.size() - 1);
  auto lo = Eigen::Index(std::floor(pos)), hi = Eigen::Index(std::ceil(pos));
  return v(lo) + (v(hi) - v(lo)) * (pos - double(lo));
}

// Leaves out the training windows in which the job was starved of CPU, judged against the
// training windows' medians (robust to the starved windows themselves while they are fewer than
// half). Enough of them (a tenth, as one noisy neighbour for a second or two of a short
// training gives) would form a mixture component of their own, and the same neighbour later
// would be "normal". Returns how many were left out.
size_t drop_starved_windows(const FeatureTable& t, Eigen::MatrixXd& x) {
  const auto& f = t.feature_names;
  auto cpu = std::find(f.begin(), f.end(), "cpu_cores"), wait = std::find(f.begin(), f.end(), "runq_wait_ms_per_s");
  if (cpu == f.end() || wait == f.end() || x.rows() == 0) return 0;
  Eigen::Index c = cpu - f.begin(), w = wait - f.begin();
  double usual_cores = quantile_of(x.col(c), 0.5), usual_wait = quantile_of(x.col(w), 0.5);
  std::vector<Eigen::Index> keep;
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    if (!starved_of_cpu(x(r, c), usual_cores, x(r, w), usual_wait)) keep.push_back(r);
  size_t dropped = size_t(x.rows()) - keep.size();
  if (dropped == 0) return 0;
  x = select_rows(x, keep);
  return dropped;
}

// Samples drawn from the model itself, to calibrate a threshold beyond what a small training
// set can show (30 windows say nothing about their own 0.5% tail).
Eigen::MatrixXd draw_from(const GaussianMixture& m, Eigen::Index n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, 1.0);
  std::discrete_distribution<int> pick(m.weights().data(), m.weights().data() + m.weights().size());
  Eigen::MatrixXd x(n, m.n_features());
  std::vector<Eigen::MatrixXd> chol;
  for (const auto& c : m.covariances()) chol.push_back(Eigen::LLT<Eigen::MatrixXd>(c).matrixL());
  Eigen::VectorXd v(m.n_features());
  for (Eigen::Index i = 0; i < n; ++i) {
    int k = pick(rng);
    for (Eigen::Index j = 0; j < v.size(); ++j) v(j) = z(rng);
    x.row(i) = (m.means().row(k).transpose() + chol[size_t(k)] * v).transpose();
  }
  return x;
}

// The quantile q of the training samples' scores. Fewer than 1/q samples (60 windows for the
// 0.5% quantile) cannot show their own tail: their lowest is as likely an outlier of training
// (the job's first window, still loading; a hiccup) as the tail, and one sample alone would set
// the threshold (a start-up window ten times as unusual as any other let a noisy neighbour's
// windows through). Then the second lowest stands for the tail.
double training_quantile(const Eigen::VectorXd& scores, double q) {
  if (scores.size() < 2 || double(scores.size()) * q >= 1) return quantile_of(scores, q);
  Eigen::VectorXd v = scores;
  std::nth_element(v.data(), v.data() + 1, v.data() + v.size());
  return v(1);
}

// A call flagged mostly for its duration must also be clearly slower than its component's
// usual duration: a call quicker than usual is no fault, and one 7% slower than a very tight
// mode is unusual to a density but not to anyone reading the report. Likewise a collective
// flagged mostly for its wait for a late rank must have waited clearly longer than usual.
// The column of the straggling wait among a group's features; -1: it has none.
Eigen::Index straggler_column(const std::vector<std::string>& features) {
  auto f = std::find(features.begin(), features.end(), "log_straggler_wait_10us");
  return f == features.end() ? -1 : Eigen::Index(f - features.begin());
}
// The straggling wait in us of row r, in that column.
double straggling_us(const Eigen::MatrixXd& x, Eigen::Index r, Eigen::Index column) {
  return std::expm1(x(r, column)) * kStragglerWaitUnitUs;
}

// GroupModel::wait_tail_us of training samples x: the straggling wait that one healthy call in
// kWaitTailOneIn would exceed, their tail extrapolated, and never less than their (1 - q)
// quantile. A job's healthy waits are heavy-tailed (a rank kept off a loaded machine's CPUs
// for a slice, a VM's stolen time): the quantile of 600 training calls is their 3rd-longest
// wait, and of 600 later calls one or two waited twice that (a 2-core CI machine: late joins of
// 1.2-3.3 ms where the 3rd-longest training wait was 0.7 ms and the longest 4 ms). Weissman's
// estimator on the Hill estimate of the top 5% of the waits extrapolates how far the tail goes;
// where it is light (an idle machine: waits of 0.3-0.5 ms), the quantile rules. Both are kept:
// find_anomalies names a wait beyond the quantile's rule a straggle where the rank was late
// again nearby.
struct WaitTails {
  double quantile_us = 0, tail_us = 0;
};
WaitTails wait_tails(const std::vector<std::string>& features, const Eigen::MatrixXd& x, double q) {
  Eigen::Index column = straggler_column(features);
  if (x.rows() == 0 || column < 0) return {};
  std::vector<double> us(size_t(x.rows()));
  for (Eigen::Index r = 0; r < x.rows(); ++r) us[size_t(r)] = straggling_us(x, r, column);
  std::sort(us.begin(), us.end());
  double n = double(us.size());
  double quantile = us[size_t(std::min(n - 1, std::floor((1 - q) * (n - 1))))];
  // the k longest waits above the (k+1)-th, all positive
  size_t k = std::max<size_t>(10, us.size() / 20);
  double p = 1.0 / kWaitTailOneIn;
  if (us.size() < 2 * k || p >= double(k) / n) return {quantile, quantile};
  double base = us[us.size() - k - 1];
  if (!(base > 0)) return {quantile, quantile};
  double gamma = 0;
  for (size_t i = us.size() - k; i < us.size(); ++i) gamma += std::log(us[i] / base);
  gamma /= double(k);
  double level = base * std::pow(double(k) / (n * p), gamma);
  // At most twice the longest training wait: the Hill estimate of 15 waits above a loaded
  // machine's base reads gamma 1-1.9 (a tail with no mean), and (k / np)^gamma then puts one
  // call in 1,000 at 20-400 times the base, up to 80 times the longest wait seen (a 2-core
  // machine under 6 CPU hogs: training waits up to 5 ms gave a tail of 447 ms, and a rank 30 ms
  // late in 7 steps went unnamed). One in 1,000 is barely past a few hundred training calls.
  if (std::isfinite(level)) level = std::min(level, 2 * us.back());
  return {quantile, std::isfinite(level) ? std::max(quantile, level) : quantile};
}

// Twice a tail of the training calls' straggling waits, and min_excess_us more.
bool beyond(double tail_us, double waited_us, double min_excess_us) {
  return waited_us > std::max(2 * tail_us, tail_us + min_excess_us);
}

bool not_slow_enough(const GroupModel& g, const GmmScores& s, const Eigen::MatrixXd& x,
                     Eigen::Index r, double min_slowdown, double min_excess_us) {
  if (g.layer == "window") return false;
  Eigen::Index best = 0;
  s.contributions.row(r).maxCoeff(&best);
  const std::string& f = g.features[size_t(best)];
  // back to microseconds: log(us) for durations, log(1 + units of 10 us) for waits (may be 0)
  double offset = f == "log_duration_us" ? 0 : f == "log_straggler_wait_10us" ? 1 : -1;
  if (offset < 0) return false;
  double unit = offset == 1 ? kStragglerWaitUnitUs : 1;
  double us = (std::exp(x(r, best)) - offset) * unit;
  // a wait, where the training calls' tail is known, counts only as find_anomalies' `straggled`
  // (which it was not, to come here): a density finds a 2 ms late join of a job whose healthy
  // ranks join 4 ms late now and then unlikely under its narrow usual component
  if (offset == 1 && g.wait_tail_us > 0) return true;
  double usual_us = (std::exp(g.model.means()(s.component(r), best)) - offset) * unit;
  return us < min_slowdown * usual_us || us - usual_us < min_excess_us;
}

// Whether a pressure feature of a window rose by a quarter or more over its usual, and by more
// than a floor in its units (a run-queue wait of 0.3 ms/s where none is usual is one wakeup
// late, not a CPU taken): less is the noise of a job doing more or less of its own work.
bool pressure_rose(const ValueAndUsual& values, const std::string& f) {
  auto it = values.find(f);
  if (it == values.end()) return false;
  double floor = f == "runq_wait_ms_per_s"                             ? 10
                 : f == "reclaim_ms_per_s" || f == "pagein_mb_per_s" ? 1
                                                                      : 0;
  auto [value, usual] = it->second;
  return value > 1.25 * std::max(usual, 0.0) && value > std::max(usual, 0.0) + floor;
}

// The job's largest rise in calls per second over usual (value / usual), 0 without call rates.
double calls_rise(const ValueAndUsual& values) {
  double most = 0;
  for (const auto& [f, vu] : values)
    if (f.ends_with("_calls_per_s") && vu.second > 0) most = std::max(most, vu.first / vu.second);
  return most;
}

// Every call rate of the window at or above its usual (and at least one with a usual above 0):
// the job did no less. A layer that makes no calls (CUDA on a CPU node) says nothing of it.
bool calls_held(const ValueAndUsual& values) {
  bool any = false;
  for (const auto& [f, vu] : values) {
    if (!f.ends_with("_calls_per_s") || vu.second <= 0) continue;
    if (vu.first < vu.second) return false;
    any = true;
  }
  return any;
}

// The job's own socket traffic rose a quarter more than its calls per second did (more bytes
// per call: something else it sends). Traffic that rises with the calls is more work.
bool socket_beyond_calls(const ValueAndUsual& values) {
  auto v = values.find("socket_mb_per_s");
  double most = calls_rise(values);
  return v != values.end() && most > 0 && v->second.first > 1.25 * most * v->second.second;
}

// The NIC carried a quarter more than usual (and 1 MB/s more) beyond what the job's own
// sockets put on it: someone else's traffic.
bool nic_beyond_sockets(const ValueAndUsual& values) {
  auto nic = values.find("nic_mb_per_s"), socket = values.find("socket_mb_per_s");
  if (nic == values.end() || socket == values.end()) return false;
  double others = nic->second.first - socket->second.first;
  double usual_others = std::max(nic->second.second - socket->second.second, 0.0);
  return others > std::max(1.25 * usual_others, usual_others + 1.0);
}

// A window unusual only because the job did more per second than in training is a job
// running faster, no fault: counted, not flagged, where it is within the threshold once the
// features that are no fault are taken out (their share of its score). Those are work rates
// above usual (calls, CPU, the job's own socket traffic rising with its calls and the NIC
// traffic its sockets make), call durations below usual, and pressures below usual (run-queue
// wait, preemptions, retransmits, reclaim, faults, disk, the GPU idle). More run-queue waits and
// preemptions per second count as more work while the time spent waiting did not grow, or grew
// by less than a quarter (the bar for naming CPU interference: threads that already queue, more
// runnable than cores, queue a little longer when they have more to do). Page faults without
// reclaim or page-ins are the job touching memory it allocated, its own work: a job that ran
// 1.7x faster faulted 4x as often (examples/gpt_ddp.py, session 34: its torch allocator's first
// touches), which read as "memory pressure" with nothing reclaimed and nothing read back.
// Less CPU while every call rate held or rose is the same job wasting less: plain `record` of
// bench/train_steps.py's GPT (session 57) flagged two windows "CPU use lower than usual", 1.13
// cores against 1.95, where OpenBLAS's worker stopped spinning on sched_yield and the training
// thread ran 30% more operators a second, each 25% shorter. A job that is held up (a hog, a late
// peer, reclaim, a lock) does fewer calls with its lower CPU, and stays a fault.
// A window unusual only because the job's calls ran a little slower or fewer than usual, with
// no resource under more pressure, is no fault either: to a density of tight training windows
// 10% slower operators are far out (as after a fault, while caches refill), but not to anyone
// reading the report. Such a window's calls must be kMinWindowSlowdown times slower (mean log
// duration) or that many times fewer per second to be flagged.
enum class WindowKind { fault, faster, a_little_slower };
// How one feature of a window moved, by the rules above.
enum class Move { no_fault, a_little_slower, fault };
Move feature_move(const std::string& f, const ValueAndUsual& value_and_usual) {
  auto it = value_and_usual.find(f);
  if (it == value_and_usual.end()) return Move::fault;
  auto [value, usual] = it->second;
  bool up = value >= usual;
  auto rose_by_a_quarter = [&](const char* g) { return pressure_rose(value_and_usual, g); };
  static const std::set<std::string> pressures = {
      "runq_wait_ms_per_s", "runq_waits_per_s", "involuntary_switches_per_s",
      "tcp_retransmits_per_s",
      "page_faults_per_s",  "reclaim_ms_per_s",           "pagein_mb_per_s",
      "block_mb_per_s",     "gpu_idle_pct"};
  bool busier = up ? f.ends_with("_calls_per_s") ||
                         (f == "socket_mb_per_s" && !socket_beyond_calls(value_and_usual)) ||
                         f == "cpu_cores" ||
                         (f == "nic_mb_per_s" && value_and_usual.count("socket_mb_per_s") &&
                          !nic_beyond_sockets(value_and_usual)) ||
                         ((f == "runq_waits_per_s" || f == "involuntary_switches_per_s" ||
                           f == "runq_wait_ms_per_s") &&
                          !rose_by_a_quarter("runq_wait_ms_per_s")) ||
                         (f == "page_faults_per_s" && !rose_by_a_quarter("reclaim_ms_per_s") &&
                          !rose_by_a_quarter("pagein_mb_per_s"))
                   : f.ends_with("_call_log_duration_us") || pressures.count(f) ||
                         (f == "cpu_cores" && calls_held(value_and_usual));
  if (busier) return Move::no_fault;
  bool little = up ? f.ends_with("_call_log_duration_us") &&
                         value - usual < std::log(kMinWindowSlowdown)
                   : f.ends_with("_calls_per_s") && value * kMinWindowSlowdown > usual;
  return little ? Move::a_little_slower : Move::fault;
}

WindowKind window_kind(const std::vector<std::pair<std::string, double>>& all,
                       const ValueAndUsual& value_and_usual, double score, double threshold) {
  if (all.empty()) return WindowKind::fault;
  // The log-density the features that are no fault cost the window: for the window model's
  // diagonal covariance, half of each one's squared z-score (its contribution). What is left
  // must still be below the threshold for the window to be a fault: a job whose page faults
  // rose 4x with its work (its contribution in the thousands) and whose collectives came 3x
  // fewer (85) was "faster" while only the features within a tenth of the top one counted.
  // Fewer run-queue waits or preemptions while the time waiting rose as a fault are the same
  // contention, not a calmer job: a hog on the job's CPU makes fewer and longer waits, and a
  // thread that runs less is preempted less. They explain nothing away. (The e2e alert test's
  // 3 s hog, one whole-suite run in three of session 36: a window scored 14.5 against a threshold
  // of 17.9, run-queue wait 40x, the job's CPU 0.55x, preemptions 2-4/s against 3-15, and went
  // unreported: taken for a job doing better; the hog's windows were then learnt as normal. In
  // passing runs the preemptions' fall, 0-2/s against 7.75, was worth up to 2 of the margin.)
  bool waited_longer = value_and_usual.count("runq_wait_ms_per_s") &&
                       feature_move("runq_wait_ms_per_s", value_and_usual) == Move::fault;
  double explained = 0;
  bool any_slower = false;
  for (const auto& [f, c] : all) {
    Move m = feature_move(f, value_and_usual);
    if (m == Move::fault) continue;
    if (waited_longer && (f == "runq_waits_per_s" || f == "involuntary_switches_per_s")) continue;
    explained += 0.5 * c;
    if (m == Move::a_little_slower && c >= 0.1 * all.front().second) any_slower = true;
  }
  if (score + explained < threshold) return WindowKind::fault;
  return any_slower ? WindowKind::a_little_slower : WindowKind::faster;
}

// Components below this share of the training samples are not kept (see train_detector).
// Windows are few (tens): a component of two or three of them (the job's first windows, still
// loading) would be a wide one that welcomes every later outlier window.
constexpr double kMinWeight = 0.01, kMinWindowWeight = 0.1;

}  // namespace

namespace {
using SplitOf = std::function<uint64_t(const std::string& group)>;

// The model of one group fit on its training samples x (at least options.min_samples), with its
// threshold calibrated on them; `drawn` gets the model's own 0.5% tail (what the threshold
// would be were x a sample of the model).
GroupModel fit_and_calibrate(const FeatureTable& t, const Eigen::MatrixXd& x,
                             const DetectOptions& options, double* drawn_quantile) {
  GmmOptions gmm;
  gmm.seed = options.seed;
  gmm.n_init = 2;
  gmm.reg_covar = options.reg_covar;
  // Windows are few (one a second) and have many features: a full covariance would fit the
  // noise of the training windows and flag the next ones. Calls are many, with 1-2 features.
  bool few = t.layer == "window";  // (the agent's per job: "window/KEY")
  if (few) gmm.covariance = CovarianceType::diag;
  int max_k = few ? std::min(2, options.max_components) : options.max_components;
  GmmFit fit;
  if (options.components > 0) {
    gmm.n_components = std::min<int>(options.components, int(x.rows()));
    fit = fit_gmm(x, gmm);
  } else {
    auto fits = fit_gmm_range(x, gmm, 1, std::min<int>(max_k, int(x.rows())));
    fit = std::move(fits[choose_by_bic(fits)]);
    // A component for a handful of training outliers would later welcome every outlier as
    // "likely under its component": fewer components, so that outliers stay in the tails.
    double min_weight = few ? kMinWindowWeight : kMinWeight;
    while (fit.model.n_components() > 1 && fit.model.weights().minCoeff() < min_weight) {
      gmm.n_components = fit.model.n_components() - 1;
      fit = fit_gmm(x, gmm);
    }
  }
  GroupModel g{t.group, t.layer,         t.name, t.feature_names, std::move(fit.model),
               0,       size_t(x.rows())};
  WaitTails tails = wait_tails(t.feature_names, x, options.quantile);
  g.wait_quantile_us = tails.quantile_us;
  g.wait_tail_us = tails.tail_us;
  // The lower of the training samples' quantile (they may have heavier tails than the model)
  // and the model's own (they may be too few to show their tail).
  GmmScores s = score_gmm(g.model, x);
  GmmScores drawn = score_gmm(g.model, draw_from(g.model, 20000, options.seed + 1));
  *drawn_quantile = quantile_of(drawn.component_log_density, options.quantile);
  g.threshold =
      options.threshold
          ? *options.threshold
          : std::min(training_quantile(s.component_log_density, options.quantile), *drawn_quantile);
  return g;
}

// The job's start-up among its training windows x (in time order): the leading windows that
// even model g, fit on them all, finds beyond its own 0.5% tail (reading files, building the
// model, the first steps' allocations), at most a quarter of them. A job's start is a regime
// of its own, not the steady state later windows are judged against: two start-up windows in a
// minute's training would set the threshold where a noisy neighbour's windows passed.
Eigen::Index startup_windows(const GroupModel& g, const Eigen::MatrixXd& x, double drawn_quantile) {
  GmmScores s = score_gmm(g.model, x);
  Eigen::Index n = 0;
  while (n < x.rows() / 4 && s.component_log_density(n) < drawn_quantile) ++n;
  return n;
}

// GroupModel::runq_tail_us of a call table's rows before until_ns: the (1 - q) quantile of
// their threads' waits for a CPU, in us (-1 where no row's wait is known).
double runq_tail_us(const FeatureTable& t, uint64_t until_ns, double q) {
  std::vector<int64_t> waits;
  for (size_t i = 0; i < t.ts_ns.size() && i < t.runq_ns.size(); ++i)
    if (t.ts_ns[i] < until_ns && t.runq_ns[i] >= 0 && !left_out(t, i)) waits.push_back(t.runq_ns[i]);
  if (waits.empty()) return -1;
  auto at = waits.begin() + std::ptrdiff_t(std::min(double(waits.size() - 1),
                                                    std::floor((1 - q) * double(waits.size() - 1))));
  std::nth_element(waits.begin(), at, waits.end());
  return double(*at) / 1e3;
}

// The rows of training windows x that model g scores at or above its own 0.5% tail.
std::vector<Eigen::Index> windows_within_tail(const GroupModel& g, const Eigen::MatrixXd& x,
                                              double drawn_quantile) {
  GmmScores s = score_gmm(g.model, x);
  std::vector<Eigen::Index> keep;
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    if (s.component_log_density(r) >= drawn_quantile) keep.push_back(r);
  return keep;
}

DetectorModel train_split(const std::vector<FeatureTable>& tables, const SplitOf& until_of,
                          const DetectOptions& options, std::vector<std::string>* skipped) {
  DetectorModel out;
  for (const auto& t : tables) {
    bool window = t.layer == "window";
    if (window && !t.dur_ns.empty()) out.window_ns = t.dur_ns.front();
    Eigen::MatrixXd x = rows_where(t, true, until_of(t.group));
    const size_t observed = size_t(x.rows());
    if (window) out.starved_training_windows = drop_starved_windows(t, x);
    // Windows left out as starved of CPU count towards min_samples (the job was watched that
    // long) while three quarters remain: the agent's first window fit comes at exactly
    // min_samples, and one starved window among them made it fail and wait for a quarter more
    // (eval cpu_interference online, session 66: the job's window model came 80 s into the job,
    // after its fault had begun, instead of 66 s; the refit thread showed no CPU at 66 s, as a
    // fit that stops at this check would not, so most likely so).
    size_t needed = options.min_samples;
    if (window && observed >= options.min_samples)
      needed = std::max<size_t>(1, options.min_samples - options.min_samples / 4);
    if (t.values.cols() == 0 || size_t(x.rows()) < needed) {
      if (skipped)
        skipped->push_back(fmt::format("{}: {} training samples, {} features (needs {} samples)",
                                       t.group, x.rows(), t.values.cols(), needed));
      continue;
    }
    double drawn = 0;
    GroupModel g = fit_and_calibrate(t, x, options, &drawn);
    if (!window) g.runq_tail_us = runq_tail_us(t, until_of(t.group), options.quantile);
    if (window) {
      Eigen::Index n = startup_windows(g, x, drawn);
      if (n > 0 && size_t(x.rows() - n) >= options.min_samples) {
        out.startup_training_windows = size_t(n);
        x = x.bottomRows(x.rows() - n).eval();
        g = fit_and_calibrate(t, x, options, &drawn);
      }
      // Then any training window beyond the model's own tail, at most a tenth of them: one
      // disturbed window among a minute's (a neighbour's burst, the host's own start-up work)
      // set the threshold at its score (under 200 training windows, the second lowest score
      // stands for their 0.5% quantile), and a CPU hog's windows later scored above it (e2e alert test, session 34: threshold
      // 17.4 where the model's own tail was near 34, the hog's windows 18-23; unreported, they
      // were learnt at the next refit). Windows that are a regime of the job's own (a tenth or
      // more, as an evaluation pass every N steps) are kept: they are its normal.
      std::vector<Eigen::Index> keep = windows_within_tail(g, x, drawn);
      Eigen::Index dropped = x.rows() - Eigen::Index(keep.size());
      if (dropped > 0 && dropped <= x.rows() / 10 && keep.size() >= options.min_samples) {
        out.outlier_training_windows = size_t(dropped);
        x = x(keep, Eigen::all).eval();
        g = fit_and_calibrate(t, x, options, &drawn);
      }
    }
    out.groups.push_back(std::move(g));
  }
  return out;
}
}  // namespace

DetectorModel train_detector(const std::vector<FeatureTable>& tables, uint64_t until_ns,
                             const DetectOptions& options, std::vector<std::string>* skipped) {
  return train_split(
      tables, [until_ns](const std::string&) { return until_ns; }, options, skipped);
}

DetectorModel train_detector(const std::vector<FeatureTable>& tables,
                             const std::map<std::string, uint64_t>& until_ns,
                             const DetectOptions& options, std::vector<std::string>* skipped) {
  return train_split(
      tables,
      [&](const std::string& g) {
        auto it = until_ns.find(g);
        return it == until_ns.end() ? UINT64_MAX : it->second;
      },
      options, skipped);
}

std::map<std::string, uint64_t> split_by_count(const std::vector<FeatureTable>& tables,
                                               double fraction) {
  std::map<std::string, uint64_t> out;
  for (const auto& t : tables) {
    std::vector<uint64_t> ts(t.ts_ns.begin(), t.ts_ns.end());
    size_t k = size_t(double(ts.size()) * fraction);
    if (k >= ts.size()) {
      out[t.group] = UINT64_MAX;
      continue;
    }
    std::nth_element(ts.begin(), ts.begin() + std::ptrdiff_t(k), ts.end());
    out[t.group] = ts[k];
  }
  return out;
}

namespace {
// A feature's value back in its units: durations are logs of microseconds, sizes log2(1 + bytes),
// peer waits log(1 + units of 10 us), the agent's window rates log(1 + rate).
double in_units(const std::string& f, double x, bool log_rates) {
  if (f.ends_with("log_duration_us")) return std::exp(x);
  if (f == "log2_bytes") return std::exp2(x) - 1;
  if (f == "log_straggler_wait_10us") return std::expm1(x) * kStragglerWaitUnitUs;
  return log_rates ? std::expm1(x) : x;
}

}  // namespace

namespace {

// The 1st and 99th percentiles of each feature of a window table's rows before `from_ns` (the
// job's training part, as detect splits it), in the rates' units: what the job itself showed
// while learning. Empty where fewer than 20 such rows are in the table (the agent judges new
// windows alone).
ValueAndUsual window_training_range(const FeatureTable& t, uint64_t from_ns) {
  ValueAndUsual range;
  if (t.layer != "window") return range;
  std::vector<size_t> rows;
  for (size_t i = 0; i < t.ts_ns.size(); ++i)
    if (t.ts_ns[i] < from_ns) rows.push_back(i);
  if (rows.size() < 20) return range;
  for (Eigen::Index j = 0; j < t.values.cols(); ++j) {
    const std::string& f = t.feature_names[size_t(j)];
    std::vector<double> v;
    for (size_t i : rows) v.push_back(t.values(Eigen::Index(i), j));
    std::sort(v.begin(), v.end());
    auto at = [&](double q) {
      double x = v[size_t(q * double(v.size() - 1))];
      return t.log_rates && !f.starts_with("log") && !f.ends_with("log_duration_us")
                 ? std::expm1(x) : x;
    };
    range[f] = {at(0.01), at(0.99)};
  }
  return range;
}

}  // namespace

void find_anomalies(const GroupModel& g, const FeatureTable& t, uint64_t from_ns,
                    double min_slowdown, std::vector<Anomaly>& out, double min_excess_us,
                    WindowsNotFlagged* not_flagged, LateTurns* turns) {
  if (g.features != t.feature_names) return;
  std::vector<size_t> idx;
  for (size_t i = 0; i < t.ts_ns.size(); ++i)
    if (t.ts_ns[i] >= from_ns) idx.push_back(i);
  if (idx.empty()) return;
  Eigen::MatrixXd x(Eigen::Index(idx.size()), t.values.cols());
  for (size_t r = 0; r < idx.size(); ++r) x.row(Eigen::Index(r)) = t.values.row(Eigen::Index(idx[r]));
  GmmScores s = score_gmm(g.model, x);
  Eigen::Index wait_column = g.wait_tail_us > 0 ? straggler_column(g.features) : -1;
  ValueAndUsual training_range = window_training_range(t, from_ns);
  // A wait is a straggle beyond the tail (GroupModel::wait_tail_us), or beyond the quantile's
  // where the same rank was late again among the waiting process's kNearbyCalls calls either
  // side (its own calls: of a job of N ranks, N rows an instance), in another
  // instance (not overlapping it), and was late far more often there than it waited for others
  // itself: a straggler is late again and again, where the healthy long waits a loaded machine
  // gives come alone (a 2-core CI machine: 1.7 and 3.3 ms late joins 200 steps apart; a 4-rank
  // job with healthy waits up to 16 ms and a rank 30 ms late in 60% of 36 steps) or in turns.
  // In turns: on a busy machine each rank of a healthy job joins late now and then (rank 0 by
  // 4 ms, rank 1 by 5 ms three steps later), and neither is the straggler. Judged by the waiting
  // process alone, a loaded stretch of a 2-rank job late in turns named both ranks: 28 false
  // stragglers of 1.5-6 ms beside 100 real ones in one CI run of three (GpuTimeAgent e2e).
  // Lateness counts rows (each late instance is a row per waiting rank), so a rank late in two
  // instances of a 4-rank job outweighs one wait of its own as it does in a 2-rank job of four.
  constexpr size_t kNearbyCalls = 20;
  std::vector<double> waits(idx.size(), -1);
  std::vector<char> beyond_quantile(idx.size(), 0);
  double quantile_us = g.wait_quantile_us > 0 ? g.wait_quantile_us : g.wait_tail_us;
  if (wait_column >= 0)
    for (size_t r = 0; r < idx.size(); ++r) {
      waits[r] = straggling_us(x, Eigen::Index(r), wait_column);
      beyond_quantile[r] = beyond(quantile_us, waits[r], min_excess_us);
    }
  bool by_pid = t.pid.size() == t.ts_ns.size();  // (a table without pids: all one process)
  bool by_late = by_pid && t.late_pid.size() == t.ts_ns.size();
  // who was late in row i: the rank that joined last where known, else (0) the waiting process
  // stands for it (two ranks: the same rank late), else all one
  auto late_in = [&](size_t i) -> uint32_t {
    if (by_late && t.late_pid[idx[i]]) return t.late_pid[idx[i]];
    return by_pid ? t.pid[idx[i]] : 0;
  };
  // each process's rows, in order, and each row's place among its process's
  std::unordered_map<uint32_t, std::vector<size_t>> rows_of;
  std::vector<size_t> place(idx.size(), 0);
  if (wait_column >= 0)
    for (size_t r = 0; r < idx.size(); ++r) {
      std::vector<size_t>& own = rows_of[by_pid ? t.pid[idx[r]] : 0];
      place[r] = own.size();
      own.push_back(r);
    }
  auto late_again_nearby = [&](size_t r) {
    uint64_t from = t.ts_ns[idx[r]], to = from + t.dur_ns[idx[r]];
    uint32_t late = late_in(r);
    bool again = false;
    size_t late_rows = 0, waited_rows = 0;
    const std::vector<size_t>& own = rows_of[by_pid ? t.pid[idx[r]] : 0];
    size_t first = place[r] >= kNearbyCalls ? own[place[r] - kNearbyCalls] : 0;
    size_t last = place[r] + kNearbyCalls < own.size() ? own[place[r] + kNearbyCalls] : idx.size() - 1;
    for (size_t j = first; j <= last; ++j) {
      if (!beyond_quantile[j]) continue;
      // the late rank itself waited for another (its pid known only from matched rows)
      if (by_late && t.late_pid[idx[r]] && t.pid[idx[j]] == late) ++waited_rows;
      if (late_in(j) != late) continue;
      ++late_rows;
      uint64_t a = t.ts_ns[idx[j]], b = a + t.dur_ns[idx[j]];
      again |= j != r && (b <= from || a >= to);
    }
    return again && late_rows > kLateOverWaited * waited_rows;
  };
  // LateTurns: row r's late rank late in turns with the others over the span before it (r
  // included); unknown (no matched late rank) is not in turns
  LateTurns own_turns;
  LateTurns& recent = turns ? *turns : own_turns;
  // every row keeps the span current; only a wait beyond the tail is judged against it
  auto note_late = [&](size_t r) {
    uint64_t now = t.ts_ns[idx[r]];
    while (!recent.seen.empty() && recent.seen.front().ts_ns + kLateTurnsSpanNs < now)
      recent.seen.pop_front();
    if (!beyond_quantile[r] || !by_late || !t.late_pid[idx[r]]) return;
    recent.seen.push_back({now, t.pid[idx[r]], t.late_pid[idx[r]], waits[r]});
    if (recent.seen.size() > kLateTurnsKept) recent.seen.pop_front();
  };
  auto in_turns = [&](size_t r) {
    if (!by_late || !t.late_pid[idx[r]]) return false;
    uint32_t late = t.late_pid[idx[r]];
    // only waits comparable to this one count, on both sides: a rank 30 ms late that waited
    // 1-3 ms for the other now and then (a loaded machine's) is not late in turns with it
    double comparable_us = waits[r] * kLateTurnsComparable;
    size_t late_rows = 0, waited_rows = 0;
    for (const LateTurns::Late& l : recent.seen) {
      if (l.waited_us < comparable_us) continue;
      late_rows += l.late == late;
      waited_rows += l.waiter == late;
    }
    return late_rows <= kLateOverWaited * waited_rows;
  };
  for (size_t r = 0; r < idx.size(); ++r) {
    double score = s.component_log_density(Eigen::Index(r));
    double waited_us = waits[r];
    if (wait_column >= 0) note_late(r);
    bool straggled = wait_column >= 0 &&
                     ((beyond(g.wait_tail_us, waited_us, min_excess_us) && !in_turns(r)) ||
                      (beyond_quantile[r] && late_again_nearby(r)));
    if (!straggled && score >= g.threshold) continue;
    if (!straggled && not_slow_enough(g, s, x, Eigen::Index(r), min_slowdown, min_excess_us))
      continue;
    Anomaly a;
    a.ts_ns = t.ts_ns[idx[r]];
    a.dur_ns = t.dur_ns[idx[r]];
    a.row = idx[r];
    if (idx[r] < t.pid.size()) a.pid = t.pid[idx[r]];
    if (idx[r] < t.tid.size()) a.tid = t.tid[idx[r]];
    if (idx[r] < t.runq_ns.size()) a.runq_ns = t.runq_ns[idx[r]];
    a.runq_tail_us = g.runq_tail_us;
    a.layer = t.layer;
    a.name = t.name;
    a.score = score;
    a.threshold = g.threshold;
    std::set<std::string> lowered;
    ValueAndUsual value_and_usual;
    for (Eigen::Index j = 0; j < x.cols(); ++j) {
      const std::string& f = t.feature_names[size_t(j)];
      a.top_features.emplace_back(f, s.contributions(Eigen::Index(r), j));
      double value = x(Eigen::Index(r), j), usual = g.model.means()(s.component(Eigen::Index(r)), j);
      // the rules below compare rates in their units (the agent models log1p of them) and
      // durations as logs
      if (t.log_rates && !f.starts_with("log") && !f.ends_with("log_duration_us"))
        value_and_usual[f] = {std::expm1(value), std::expm1(usual)};
      else
        value_and_usual[f] = {value, usual};
      if (value < usual) lowered.insert(f);
      if (f == "log_duration_us") a.usual_us = std::exp(usual);
    }
    std::sort(a.top_features.begin(), a.top_features.end(),
              [](const auto& p, const auto& q) { return p.second > q.second; });
    if (straggled)  // flagged for its wait, whatever else its density weighed most
      std::stable_partition(a.top_features.begin(), a.top_features.end(), [](const auto& p) {
        return p.first == "log_straggler_wait_10us";
      });
    // a window's cause is among the features that moved as a fault (the others, strongest
    // first, after them): a job's own page faults in the thousands must not hide its
    // collectives coming 3x fewer
    std::vector<std::pair<std::string, double>> explaining = a.top_features;  // all
    if (a.layer == "window") {
      WindowKind kind = window_kind(a.top_features, value_and_usual, score, g.threshold);
      if (kind != WindowKind::fault) {
        if (not_flagged) ++(kind == WindowKind::faster ? not_flagged->faster : not_flagged->a_little_slower);
        continue;
      }
      auto faults = std::stable_partition(
          a.top_features.begin(), a.top_features.end(),
          [&](const auto& p) { return feature_move(p.first, value_and_usual) == Move::fault; });
      if (faults != a.top_features.begin()) explaining.assign(a.top_features.begin(), faults);
    }
    for (size_t k = 0; k < a.top_features.size() && k < 3; ++k) {
      const std::string& f = a.top_features[k].first;
      auto [value, usual] = value_and_usual.at(f);  // (its rates already in their units)
      a.measured.push_back({f, in_units(f, value, false), in_units(f, usual, false)});
    }
    a.cause = probable_cause(a.layer, a.name, explaining, lowered, value_and_usual,
                             training_range);
    if (a.top_features.size() > 3) a.top_features.resize(3);
    out.push_back(std::move(a));
  }
}

std::vector<Anomaly> find_anomalies(const DetectorModel& model,
                                    const std::vector<FeatureTable>& tables, uint64_t from_ns,
                                    double min_slowdown, double min_excess_us,
                                    WindowsNotFlagged* not_flagged) {
  return find_anomalies(model, tables, std::map<std::string, uint64_t>{}, min_slowdown,
                        min_excess_us, not_flagged, from_ns);
}

std::vector<Anomaly> find_anomalies(const DetectorModel& model,
                                    const std::vector<FeatureTable>& tables,
                                    const std::map<std::string, uint64_t>& from_ns,
                                    double min_slowdown, double min_excess_us,
                                    WindowsNotFlagged* not_flagged, uint64_t otherwise_from_ns) {
  std::vector<Anomaly> out;
  for (const auto& t : tables) {
    auto g = std::find_if(model.groups.begin(), model.groups.end(),
                          [&](const GroupModel& m) { return m.group == t.group; });
    auto from = from_ns.find(t.group);
    if (g != model.groups.end())
      find_anomalies(*g, t, from == from_ns.end() ? otherwise_from_ns : from->second, min_slowdown,
                     out, min_excess_us, not_flagged);
  }
  std::sort(out.begin(), out.end(), [](const Anomaly& a, const Anomaly& b) { return a.ts_ns < b.ts_ns; });
  return out;
}

bool starved_of_cpu(double cores, double usual_cores, double runq_ms_per_s,
                    double usual_runq_ms_per_s) {
  return usual_cores > 0 && usual_runq_ms_per_s > 0 && cores < 0.5 * usual_cores &&
         runq_ms_per_s * usual_cores >= 3 * usual_runq_ms_per_s * std::max(cores, 1e-3);
}

namespace {

// A resource that explains a window (the host or the GPU doing something to the job) by one of
// its features: its name, or "" where the feature names none, moved the harmless way, or stayed
// within what the job's training windows showed.
std::string resource_named_by(const std::string& feature, const std::set<std::string>& lowered,
                              const ValueAndUsual& values, const ValueAndUsual& training_range) {
  auto has = [&](const char* s) { return feature.find(s) != std::string::npos; };
  // the direction that hurts: a lower clock, more of anything else (the job's own CPU is no
  // resource: more is a job busier, less a symptom, CPU interference only as below)
  if (lowered.count(feature) != has("clock")) return "";
  // A wait for the CPUs names a neighbour when it grew by a quarter or more (as the job's CPU
  // must fall by a fifth, below): threads that already queue (more runnable than cores) wait
  // a sixth longer in windows whose work is slower for another reason (the demo's windows
  // beside a busy loop, session 31: 2.5 s/s against 2.17 usual, within training's 95th
  // percentile, were named CPU interference).
  auto v = values.find(feature);
  if ((has("runq") || has("involuntary")) && v != values.end() &&
      v->second.first < 1.25 * v->second.second)
    return "";
  // nor where the job's own training windows waited as long (their 99th percentile): a
  // component's mean is narrower than the job's normal (the demo, session 31: windows at
  // training's 95th percentile of the ranks' own wait, 1.3x the mean of their component)
  auto seen = training_range.find(feature);
  if ((has("runq") || has("involuntary")) && v != values.end() &&
      seen != training_range.end() && v->second.first <= seen->second.second)
    return "";
  // More preemptions or run-queue waits with less time waiting in all are shorter slices,
  // not CPUs taken (the demo's windows, session 31: preemptions 1.8x usual, the wait 0.67x,
  // the ranks' own threads waiting no more than in training).
  if ((feature == "runq_waits_per_s" || feature == "involuntary_switches_per_s") &&
      lowered.count("runq_wait_ms_per_s"))
    return "";
  // and more of them while the time waiting stayed within the job's training windows is a
  // job busier, or cut finer (the demo after its neighbour, session 31: 2.7x the preemptions,
  // the wait under training's 99th percentile, the job's CPU 1.5x usual)
  auto wait = values.find("runq_wait_ms_per_s");
  auto wait_seen = training_range.find("runq_wait_ms_per_s");
  if ((feature == "runq_waits_per_s" || feature == "involuntary_switches_per_s") &&
      wait != values.end() && wait_seen != training_range.end() &&
      wait->second.first <= wait_seen->second.second)
    return "";
  if (has("runq") || has("involuntary")) return "CPU interference";
  if (has("tcp_retransmits")) return "network packet loss";
  // Page faults alone are the job's own first touches of what it allocated (see window_kind):
  // memory is short where reclaim or page-ins came with them.
  if (feature == "page_faults_per_s" && !pressure_rose(values, "reclaim_ms_per_s") &&
      !pressure_rose(values, "pagein_mb_per_s"))
    return "";
  if (has("reclaim") || has("page_faults") || has("pagein")) return "memory pressure";
  // The job's own traffic rising with its calls is more work, not contention (gpt_ddp, session
  // 34: "network contention" for windows with 1.7x the socket traffic at 1.7x the calls per
  // second): its sockets must carry a quarter more per call than usual, or the NIC a quarter
  // more than the job's sockets put on it (a neighbour's traffic).
  if (feature == "socket_mb_per_s" && calls_rise(values) > 0 && !socket_beyond_calls(values))
    return "";
  if (feature == "nic_mb_per_s" && values.count("socket_mb_per_s") && !nic_beyond_sockets(values))
    return "";
  if (has("nic") || has("socket")) return "network contention";
  if (has("gpu_temp") || has("gpu_throttled") || has("gpu_power") || has("gpu_sm_clock"))
    return "GPU thermal or power throttling";
  if (has("gpu_mem")) return "GPU memory pressure";
  if (has("pcie")) return "PCIe pressure";
  if (has("block")) return "storage I/O";
  return "";
}

// No resource: the symptom of a layer among the top features (the job's own CPU falling
// while it waits on a slow link is no cause; the collectives it waits in are), in the
// direction that hurts: a layer's calls slower or fewer per second than usual. Faster or
// more calls are no slowness to name (session 31: "slow operators" for operators that ran
// faster than usual beside a rise elsewhere). "" where no layer's feature says one.
std::string layer_symptom(const std::vector<std::pair<std::string, double>>& top,
                          const std::set<std::string>& lowered) {
  for (const auto& [top_feature, weight] : top) {
    if (weight < 0.1 * top.front().second) break;
    const std::string& feature = top_feature;  // clang 14: no structured binding in a lambda
    bool down = lowered.count(feature) > 0;
    if ((feature.ends_with("_calls_per_s") && !down) ||
        (feature.ends_with("_call_log_duration_us") && down) || (feature == "gpu_idle_pct" && down))
      continue;
    auto has = [&](const char* s) { return feature.find(s) != std::string::npos; };
    if (has("comm_")) return "slow collectives";
    if (has("cuda_")) return "slow CUDA calls";
    if (has("torch_")) return "slow operators";
    if (has("python_")) return "slow Python code";
    if (has("gpu_util")) return "GPU utilization change";
    // The GPU waited for work (its job waiting on data, the host, a peer): a symptom, after any
    // resource that explains it (a CPU hog starves the GPU too)
    if (feature == "gpu_idle_pct") return "GPU idle";
  }
  return "";
}

// What moved most in a window that no rule names a cause for, in words (the job's own
// activity changing: its CPU use, or its own traffic falling while a straggler holds it): "NIC
// traffic lower than usual", "fewer torch calls per second than usual". The measured values
// and the usual ones follow in the anomaly's features.
std::string unusual_change(const std::string& f, bool down) {
  std::string what = f == "cpu_cores" ? "CPU use" : feature_title(f);
  if (f.ends_with("_calls_per_s"))
    return fmt::format("{} {} per second than usual", down ? "fewer" : "more", what);
  if (f.ends_with("_call_log_duration_us"))
    return fmt::format("{} {} than usual", what, down ? "faster" : "slower");
  return fmt::format("{} {} than usual", what, down ? "lower" : "higher");
}

// The probable cause of a window from its features (weights in `top`, strongest first): a
// resource among them, else the symptom of a layer.
std::string window_cause(const std::vector<std::pair<std::string, double>>& top,
                         const std::set<std::string>& lowered, const ValueAndUsual& values,
                         const ValueAndUsual& training_range) {
  std::string f = top.empty() ? "" : top.front().first;
  // The job's CPU fell while its run-queue wait rose: something else took the CPUs (a noisy
  // neighbour), whatever else moved more. (CPU falling with the wait falling too is a job
  // waiting elsewhere, on a slow link.)
  auto weight_of = [&](const char* wanted) {
    for (const auto& [feature, weight] : top)
      if (feature == wanted) return weight;
    return 0.0;
  };
  // The fall must be one a neighbour makes, a fifth of the job's usual CPU or more: a job a
  // few percent under its usual CPU with its threads queueing a little longer is within its
  // own noise, whatever else made the window stand out (demo windows, session 31: 1.11 cores
  // against 1.16 named CPU interference for operators that were slower on their own).
  auto fell_by_a_fifth = [&](const char* feature) {
    auto v = values.find(feature);
    auto seen = training_range.find(feature);  // and below the job's own training windows
    return v == values.end() ||
           (v->second.first <= 0.8 * v->second.second &&
            (seen == training_range.end() || v->second.first < seen->second.first));
  };
  if (!top.empty() && lowered.count("cpu_cores") &&
      weight_of("cpu_cores") >= 0.1 * top.front().second && fell_by_a_fifth("cpu_cores") &&
      weight_of("runq_wait_ms_per_s") >= 2.0 && !lowered.count("runq_wait_ms_per_s"))
    return "CPU interference";
  // Likewise where its threads already waited for the CPUs in training (more runnable threads
  // than cores) and the wait cannot rise much: the job was starved of CPU (starved_of_cpu),
  // beyond its CPU's noise, however much slower its calls became meanwhile.
  auto cpu = values.find("cpu_cores"), wait = values.find("runq_wait_ms_per_s");
  if (cpu != values.end() && wait != values.end() && weight_of("cpu_cores") >= 4.0 &&
      starved_of_cpu(cpu->second.first, cpu->second.second, wait->second.first,
                     wait->second.second))
    return "CPU interference";
  // Reclaim explains the page-cache refills and disk reads that come with it: among the top
  // features, or at all where page-ins are (the job re-reading what reclaim evicted: its disk
  // reads, at hundreds of MB/s against none usual, weigh far more than the reclaim time).
  bool paging_in = weight_of("pagein_mb_per_s") >= 0.1 * (top.empty() ? 0 : top.front().second) &&
                   !lowered.count("pagein_mb_per_s");
  for (const auto& [feature, weight] : top)
    if ((weight >= 0.1 * top.front().second || (paging_in && weight > 0)) &&
        feature.find("reclaim") != std::string::npos && !lowered.count(feature))
      return "memory pressure";
  // A resource that explains the window (the host or the GPU doing something to the job)
  // outranks the symptoms (fewer or slower calls), when it is among the top features with a
  // tenth of the top one's weight or more.
  for (const auto& [feature, weight] : top) {
    if (weight < 0.1 * top.front().second) break;
    if (std::string cause = resource_named_by(feature, lowered, values, training_range);
        !cause.empty())
      return cause;
  }
  // A resource far beyond anything the job's training windows showed (twice their 99th
  // percentile) explains the window however its weight compares: one feature of a degenerate
  // component can outweigh the rest a billion-fold (the CUDA demo, session 31: calls per second
  // of a tight loop; the run-queue wait 30x its training's 99th percentile went unnamed).
  for (const auto& [feature, weight] : top) {
    auto v = values.find(feature);
    auto seen = training_range.find(feature);
    if (weight < 2.0 || v == values.end() || seen == training_range.end() ||
        v->second.first <= 2 * std::max(seen->second.second, 0.0) || lowered.count(feature))
      continue;
    if (std::string cause = resource_named_by(feature, lowered, values, training_range);
        !cause.empty())
      return cause;
  }
  if (std::string symptom = layer_symptom(top, lowered); !symptom.empty()) return symptom;
  if (f.empty()) return "unusual window";
  return "unusual window: " + unusual_change(f, lowered.count(f) > 0);
}

}  // namespace

std::string probable_cause(const std::string& layer, const std::string& name,
                           const std::vector<std::pair<std::string, double>>& top,
                           const std::set<std::string>& lowered, const ValueAndUsual& values,
                           const ValueAndUsual& training_range) {
  std::string f = top.empty() ? "" : top.front().first;
  if (layer != "window") {
    if (f == "log2_bytes") return fmt::format("unusual size of {}", name);
    if (f == "log_straggler_wait_10us") return fmt::format("straggling rank: {} waited for a peer", name);
    if (layer == "comm") return fmt::format("slow collective: {}", name);
    if (layer == "torch") return fmt::format("slow operator: {}", name);
    if (layer == "python") return fmt::format("slow Python function: {}", name);
    if (layer == "gpu") return fmt::format("slow kernel: {}", name);
    return fmt::format("slow {} call: {}", layer, name);
  }
  return window_cause(top, lowered, values, training_range);
}

std::string describe_measured(const Anomaly& a) {
  std::vector<FeatureValue> measured;
  for (const auto& m : a.measured) measured.push_back({m.feature, m.value, m.usual});
  std::string out = describe_features(measured);
  if (out.empty())
    for (const auto& [f, c] : a.top_features) out += fmt::format("{}{}={:.1f}", out.empty() ? "" : " ", f, c);
  return out;
}

std::string features_column(const Anomaly& a) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& top : a.top_features) {  // (clang 14: no structured binding in a lambda)
    const std::string& f = top.first;
    double c = top.second;
    auto m = std::find_if(a.measured.begin(), a.measured.end(),
                          [&](const Measured& x) { return x.feature == f; });
    if (m != a.measured.end() && std::isfinite(m->value) && std::isfinite(m->usual))
      out.push_back({f, c, m->value, m->usual});
    else
      out.push_back({f, c});
  }
  return out.dump();
}

std::string cause_kind(std::string_view cause) {
  if (cause.starts_with("unusual size of ")) return "unusual size";
  // "slow operator: aten::mm; ...", "slow operators; its CPUs stopped ...", "CPU interference"
  return std::string(cause.substr(0, cause.find_first_of(":;")));
}

const std::vector<std::pair<std::string, std::string>>& cause_kinds() {
  static const std::vector<std::pair<std::string, std::string>> kinds = [] {
    std::vector<std::pair<std::string, std::string>> k = {
        {"cuda", "slow cuda call"},        {"cuda", "unusual size"},
        {"comm", "slow collective"},       {"comm", "straggling rank"},
        {"comm", "unusual size"},          {"torch", "slow operator"},
        {"python", "slow Python function"}, {"gpu", "slow kernel"}};
    for (const char* w :
         {"CPU interference", "network packet loss", "memory pressure", "network contention",
          "GPU thermal or power throttling", "GPU memory pressure", "PCIe pressure", "storage I/O",
          "slow collectives", "slow CUDA calls", "slow operators", "slow Python code",
          "GPU utilization change", "GPU idle", "unusual window", "CPU stall"})
      k.emplace_back("window", w);
    return k;
  }();
  return kinds;
}

nlohmann::json detector_to_json(const DetectorModel& model) {
  nlohmann::json j;
  j["format"] = "eacgm-detector";
  j["version"] = 1;
  j["window_ns"] = model.window_ns;
  j["groups"] = nlohmann::json::array();
  for (const auto& g : model.groups) {
    nlohmann::json o = {{"group", g.group},         {"layer", g.layer},
                        {"name", g.name},           {"threshold", g.threshold},
                        {"train_samples", g.train_samples},
                        {"model", model_to_json(g.model, g.features)}};
    if (g.background_rate > 0) o["background_rate"] = g.background_rate;
    if (g.slowest_ns > 0) o["slowest_ns"] = g.slowest_ns;
    if (g.usual_burst > 0) o["usual_burst"] = g.usual_burst;
    if (g.dispersion > 1) o["dispersion"] = g.dispersion;
    if (g.wait_tail_us > 0) o["wait_tail_us"] = g.wait_tail_us;
    if (g.wait_quantile_us > 0) o["wait_quantile_us"] = g.wait_quantile_us;
    if (g.runq_tail_us >= 0) o["runq_tail_us"] = g.runq_tail_us;
    if (!g.usual_sizes.empty()) o["usual_sizes"] = g.usual_sizes;
    if (!g.tails.empty()) {
      o["history_calls"] = g.history_calls;
      o["tails"] = nlohmann::json::object();
      for (const auto& [kind, tail] : g.tails) {
        auto& t = o["tails"][kind] = nlohmann::json::array();
        for (const auto& e : tail) t.push_back({e.value, e.burst});
      }
    }
    j["groups"].push_back(std::move(o));
  }
  return j;
}

namespace {

// The agent's figures beside a model (optional: since session 23).
void usual_from_json(const nlohmann::json& g, GroupModel& gm) {
  // optional (the agent's models since session 23)
  if (auto r = g.find("background_rate"); r != g.end()) {
    if (!r->is_number() || !(r->get<double>() >= 0 && r->get<double>() <= 1))
      fail("group {}: 'background_rate' must be a share between 0 and 1", gm.group);
    gm.background_rate = r->get<double>();
  }
  if (auto r = g.find("slowest_ns"); r != g.end()) {
    if (!r->is_number_unsigned()) fail("group {}: 'slowest_ns' must be a whole number", gm.group);
    gm.slowest_ns = r->get<uint64_t>();
  }
  if (auto r = g.find("wait_tail_us"); r != g.end()) {
    if (!r->is_number() || !std::isfinite(r->get<double>()) || r->get<double>() < 0)
      fail("group {}: 'wait_tail_us' must be a finite number of microseconds, 0 or more",
           gm.group);
    gm.wait_tail_us = r->get<double>();
  }
  // optional (since session 35; before, the tail was this quantile)
  gm.wait_quantile_us = gm.wait_tail_us;
  if (auto r = g.find("wait_quantile_us"); r != g.end()) {
    if (!r->is_number() || !std::isfinite(r->get<double>()) || r->get<double>() < 0)
      fail("group {}: 'wait_quantile_us' must be a finite number of microseconds, 0 or more",
           gm.group);
    gm.wait_quantile_us = r->get<double>();
  }
  if (auto r = g.find("runq_tail_us"); r != g.end()) {
    if (!r->is_number() || !std::isfinite(r->get<double>()) || r->get<double>() < 0)
      fail("group {}: 'runq_tail_us' must be a finite number of microseconds, 0 or more",
           gm.group);
    gm.runq_tail_us = r->get<double>();
  }
  if (auto r = g.find("usual_sizes"); r != g.end()) {
    if (!r->is_array() || r->size() > 1000)
      fail("group {}: 'usual_sizes' must be a list of at most 1000 numbers", gm.group);
    for (const auto& v : *r) {
      if (!v.is_number() || !std::isfinite(v.get<double>()))
        fail("group {}: 'usual_sizes' must hold finite numbers", gm.group);
      gm.usual_sizes.push_back(v.get<double>());
    }
  }
  if (auto r = g.find("usual_burst"); r != g.end()) {
    if (!r->is_number_unsigned()) fail("group {}: 'usual_burst' must be a whole number", gm.group);
    gm.usual_burst = r->get<size_t>();
  }
  // optional (since session 38)
  if (auto r = g.find("dispersion"); r != g.end()) {
    if (!r->is_number() || !std::isfinite(r->get<double>()) || r->get<double>() < 1)
      fail("group {}: 'dispersion' must be a finite number, 1 or more", gm.group);
    gm.dispersion = r->get<double>();
  }
}

// The agent's tails: per feature, its highest values with their bursts.
void tails_from_json(const nlohmann::json& g, GroupModel& gm) {
  auto r = g.find("tails");
  if (r == g.end()) return;
  if (!r->is_object())
    fail("group {}: 'tails' must map features to lists of [value, burst] pairs", gm.group);
  for (const auto& [kind, tail] : r->items()) {
    if (!tail.is_array() || tail.size() > 1000)
      fail("group {}: tail '{}' must be a list of at most 1000 [value, burst] pairs",
           gm.group, kind);
    for (const auto& v : tail) {
      if (!v.is_array() || v.size() != 2 || !v[0].is_number() ||
          !std::isfinite(v[0].get<double>()) || v[0].get<double>() < 0 ||
          !v[1].is_number_unsigned())
        fail("group {}: tail '{}' must hold [value, burst] pairs: a finite value of 0 or "
             "more, a whole number",
             gm.group, kind);
      gm.tails[kind].push_back({v[0].get<double>(), v[1].get<size_t>()});
    }
  }
  auto h = g.find("history_calls");
  if (h == g.end() || !h->is_number_unsigned())
    fail("group {}: 'tails' needs 'history_calls', a whole number", gm.group);
  gm.history_calls = h->get<size_t>();
}

}  // namespace

DetectorModel detector_from_json(const nlohmann::json& j) {
  auto format = j.is_object() ? j.find("format") : j.end();
  if (format == j.end() || !format->is_string() || *format != "eacgm-detector")
    fail("not an eacgm detector model (no \"format\": \"eacgm-detector\"; save one with "
         "eacgm detect --save-model)");
  try {
    DetectorModel m;
    const auto& window = j.at("window_ns");
    if (!window.is_number_unsigned() || window.get<uint64_t>() > 3'600'000'000'000ull)
      fail("'window_ns' must be a whole number of nanoseconds up to an hour");
    m.window_ns = window.get<uint64_t>();
    for (const auto& g : j.at("groups")) {
      GroupModel gm;
      gm.group = g.at("group").get<std::string>();
      gm.layer = g.at("layer").get<std::string>();
      gm.name = g.at("name").get<std::string>();
      if (!g.at("threshold").is_number() || !std::isfinite(g.at("threshold").get<double>()))
        fail("group {}: 'threshold' must be a finite number", gm.group);
      gm.threshold = g.at("threshold").get<double>();
      if (!g.at("train_samples").is_number_unsigned())
        fail("group {}: 'train_samples' must be a whole number", gm.group);
      gm.train_samples = g.at("train_samples").get<size_t>();
      usual_from_json(g, gm);
      tails_from_json(g, gm);
      gm.model = model_from_json(g.at("model"), &gm.features);
      m.groups.push_back(std::move(gm));
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    fail("malformed detector model: {}", e.what());
  }
}

}  // namespace eacgm::detect
