// `eacgm detect`: learn what normal looks like (the start of a recording, another recording,
// or a saved model), flag the calls and time windows that fall outside it, and write them to
// the recording's anomalies table with a probable cause.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include <fmt/ranges.h>
#include <unistd.h>

#include "cli/commands.h"
#include "detect/call_context.h"
#include "detect/detector.h"
#include "detect/materiality.h"
#include "detect/young_stragglers.h"
#include "report/collectives.h"
#include "store/anomalies.h"
#include "store/merge.h"
#include "store/reader.h"
#include "store/rows.h"
#include "util/error.h"
#include "util/output_file.h"

namespace eacgm::cli {
namespace {

using nlohmann::json;

struct DetectArgs {
  std::string recording, train, model, save_model, layers = "cuda,comm,torch,python,gpu,window", components = "auto";
  std::string features_out;
  std::vector<std::string> recordings, trains;  // as given; several: one job's, lined up
  bool any_job = false;
  // where the anomalies go: each recording examined, with what to subtract from the examined
  // recording's times to put them on its clock (0 unless several were lined up)
  std::vector<std::pair<std::string, int64_t>> write_to;
  double train_fraction = 0.5, window_s = 1.0, quantile = 0.005, min_slowdown = 3,
         min_excess_us = 1000, min_share = detect::kDefaultMinLossShare;
  double threshold = 0;
  bool has_threshold = false, json_out = false, window_given = false;
};

// --window's default: 1 s, shorter for a short recording so that the window model has at
// least 60 windows to learn from (a minute-long job's first half gives 30 of 1 s), down to
// 0.1 s (what the host layer's default sampling interval can fill).
double default_window_s(const RecordingReader& rec, double fraction) {
  int64_t start = 0, end = 0;
  try {
    start = rec.meta_ns("start_monotonic_ns");
    end = rec.meta_ns("end_monotonic_ns");
  } catch (const std::exception&) {
    return 1.0;
  }
  if (end <= start) return 1.0;
  double learn_s = double(end - start) / 1e9 * fraction;
  return std::clamp(std::floor(learn_s / 60 * 100) / 100, 0.1, 1.0);
}

std::vector<detect::FeatureTable> tables_of(const RecordingReader& rec, uint64_t window_ns,
                                            const std::string& layers,
                                            const Collectives& collectives) {
  std::vector<std::string> wanted;
  std::stringstream ss(layers);
  for (std::string l; std::getline(ss, l, ',');) {
    if (l != "cuda" && l != "comm" && l != "torch" && l != "python" && l != "gpu" && l != "window")
      throw UsageError(fmt::format(
          "--layers: unknown '{}' (choose from cuda, comm, torch, python, gpu, window)", l));
    wanted.push_back(l);
  }
  auto want = [&](const std::string& l) {
    return std::find(wanted.begin(), wanted.end(), l) != wanted.end();
  };
  std::vector<detect::FeatureTable> tables;
  for (auto& t : detect::call_features(rec, &collectives))
    if (want(t.layer)) tables.push_back(std::move(t));
  if (want("window")) tables.push_back(detect::window_features(rec, window_ns));
  return tables;
}

// One CSV per group (ts_ns, dur_ns, then the features), for other tools and baselines.
void write_feature_tables(const std::vector<detect::FeatureTable>& tables, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (const auto& t : tables) {
    std::string name = t.group;
    std::replace(name.begin(), name.end(), '/', '.');
    if (name.size() > 200)  // a templated kernel's name: longer than a file name may be
      name = fmt::format("{}-{:016x}", name.substr(0, 180), std::hash<std::string>{}(name));
    std::string path = dir + "/" + name + ".csv";
    std::ofstream out(path);
    out << "ts_ns,dur_ns";
    for (const auto& f : t.feature_names) out << "," << f;
    out << "\n";
    for (Eigen::Index r = 0; r < t.values.rows(); ++r) {
      out << t.ts_ns[size_t(r)] << "," << t.dur_ns[size_t(r)];
      for (Eigen::Index c = 0; c < t.values.cols(); ++c) out << "," << fmt::format("{}", t.values(r, c));
      out << "\n";
    }
    if (!out) fail("cannot write features to {}: {}", path, errno_text(errno));
  }
}

// `path` and what SQLite and merge put beside it, removed also when a stop signal ends detect.
void remove_on_stop_signal(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal", ".merging", ".merging-wal",
                             ".merging-shm", ".merging-journal"})
    eacgm::remove_on_stop_signal(path + suffix);
}

// Several recordings of one job, lined up in a temporary merged copy (what `eacgm merge`
// writes), deleted when done, or when a stop signal ends detect.
struct LinedUp {
  std::string path;
  MergeResult result;
  LinedUp(const std::vector<std::string>& inputs, bool any_job, const char* what) {
    static int serial = 0;
    path = (std::filesystem::temp_directory_path() /
            fmt::format("eacgm-detect-{}-{}.eacgm.db", getpid(), serial++))
               .string();
    remove_on_stop_signal(path);
    MergeOptions options;
    options.any_job = any_job;
    result = merge_recordings(inputs, path, options);
    for (const auto& h : result.hosts) {
      std::string clock =
          &h == &result.hosts[0]
              ? std::string("the reference clock")
              : fmt::format("clock {:+.3f} ms{}",
                            double(h.wall_offset_ns + h.fix.offset_ns) / 1e6,
                            h.fix.bound_ns >= 0
                                ? fmt::format(" (within +-{:.3f} ms)", double(h.fix.bound_ns) / 1e6)
                                : std::string(h.fix.instances ? "" : " (wall clocks only)"));
      fprintf(stderr, "eacgm detect: %s recording %s (%s): %s\n", what, h.file.c_str(),
              h.host.c_str(), clock.c_str());
    }
    for (const auto& n : result.notes) fprintf(stderr, "eacgm detect: note: %s\n", n.c_str());
  }
  ~LinedUp() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  LinedUp(const LinedUp&) = delete;
  LinedUp& operator=(const LinedUp&) = delete;
};

std::string human_duration(uint64_t ns) {
  if (ns >= 1'000'000'000) return fmt::format("{:.2f} s", double(ns) / 1e9);
  if (ns >= 1'000'000) return fmt::format("{:.1f} ms", double(ns) / 1e6);
  return fmt::format("{:.1f} us", double(ns) / 1e3);
}

detect::DetectOptions detect_options(const DetectArgs& a) {
  detect::DetectOptions opts;
  opts.quantile = a.quantile;
  if (a.has_threshold) opts.threshold = a.threshold;
  if (a.components != "auto") {
    try {
      opts.components = std::stoi(a.components);
    } catch (const std::exception&) {
      opts.components = 0;
    }
    if (opts.components < 1)
      throw UsageError(fmt::format("--components {}: give a count (e.g. 2) or auto", a.components));
  }
  return opts;
}

// What the recording is judged against, and from where on.
struct Trained {
  detect::DetectorModel model;
  std::string trained_on;
  std::vector<std::string> skipped;        // groups not modelled, and why
  size_t immaterial = 0;                   // slow calls not reported: immaterial (--min-share)
  std::map<std::string, uint64_t> split;   // per group: its first row scored (own training)
  uint64_t score_from = 0;                 // windows that start here or later are scored
  uint64_t window_ns = 0;
};

// --model (a saved model, whose window length wins) or --train (another recording).
void load_or_train_elsewhere(const DetectArgs& a, const detect::DetectOptions& opts, Trained& t) {
  if (!a.model.empty()) {
    std::ifstream in(a.model);
    if (!in) fail("cannot read model {}: {} (save one with eacgm detect --save-model)", a.model,
                  errno_text(errno));
    try {
      t.model = detect::detector_from_json(json::parse(in));
    } catch (const json::exception& e) {
      fail("model {} is not valid JSON: {}", a.model, e.what());
    } catch (const Error& e) {
      fail("model {}: {}", a.model, e.what());
    }
    t.window_ns = t.model.window_ns ? t.model.window_ns : t.window_ns;
    // --threshold is for every model, a saved one's too (--quantile was fixed when it was saved)
    if (opts.threshold)
      for (auto& g : t.model.groups) g.threshold = *opts.threshold;
    t.trained_on = "model " + a.model;
  } else if (!a.train.empty()) {
    RecordingReader train(a.train);
    Collectives train_collectives(train);
    auto tables = tables_of(train, t.window_ns, a.layers, train_collectives);
    // (a rank late throughout the training recording is no normal to learn: as on its own start)
    detect::YoungStragglers rule;
    detect::young_stragglers(tables, train_collectives, rule,
                             [](const detect::FeatureTable&, size_t) { return true; });
    t.model = detect::train_detector(tables, UINT64_MAX, opts, &t.skipped);
    t.model.window_ns = t.window_ns;
    t.trained_on = a.trains.size() > 1 ? fmt::format("recordings {}", fmt::join(a.trains, ", "))
                                        : "recording " + a.train;
  }
}

// Neither: each operation learns from its own first calls. A split of the time would move when
// a fault makes calls take longer (a straggler's 20 ms waits) or when the job spends its first
// seconds importing torch. Windows, which cover the job's working time (from its first traced
// call to its last), learn from their first part (eval/score.py scores the windows from
// scored_from_ns).
void train_on_own_start(const DetectArgs& a, int64_t start, int64_t end,
                        const std::vector<detect::FeatureTable>& tables,
                        const detect::DetectOptions& opts, Trained& t) {
  // (t.split: each operation's first train_fraction of calls, set by the caller)
  if (auto w = t.split.find("window"); w != t.split.end())
    t.score_from = w->second;
  else
    t.score_from = end > start
                       ? uint64_t(start + int64_t(double(end - start) * a.train_fraction))
                       : UINT64_MAX;
  t.model = detect::train_detector(tables, t.split, opts, &t.skipped);
  t.model.window_ns = t.window_ns;
  t.trained_on = fmt::format("the first {:.0f}% of each operation's calls and of the job's windows",
                             100 * a.train_fraction);
}

void print_json(const DetectArgs& a, const Trained& t, const Collectives& collectives,
                const detect::WindowsNotFlagged& not_flagged, const std::vector<AnomalyRow>& rows) {
  json j;
  if (a.write_to.size() == 1)
    j["recording"] = a.write_to[0].first;
  else
    for (const auto& [path, shift] : a.write_to) j["recordings"].push_back(path);
  j["trained_on"] = t.trained_on;
  j["scored_from_ns"] = t.score_from;  // calls and windows that start here or later
  j["groups"] = t.model.groups.size();
  j["skipped_groups"] = t.skipped;
  j["collectives_not_lined_up"] = collectives.notes();
  j["window_s"] = double(t.window_ns) / 1e9;
  // unusual only in running faster, or a little slower: not flagged
  j["windows_busier_than_training"] = not_flagged.faster;
  j["windows_a_little_slower_than_training"] = not_flagged.a_little_slower;
  j["training_windows_starved_of_cpu"] = t.model.starved_training_windows;  // left out of training
  j["training_windows_at_start"] = t.model.startup_training_windows;        // left out of training
  j["training_windows_beyond_tail"] = t.model.outlier_training_windows;     // left out of training
  j["slow_calls_immaterial"] = t.immaterial;  // not reported: under --min-share of their time
  j["anomalies"] = json::array();
  for (const auto& r : rows)
    j["anomalies"].push_back({{"ts_ns", r.ts_ns}, {"dur_ns", r.dur_ns}, {"layer", r.layer},
                              {"name", r.name}, {"score", r.score}, {"threshold", r.threshold},
                              {"cause", r.cause}, {"features", json::parse(r.features)}});
  fmt::print("{}\n", j.dump(2));
}

// What was left out of the models and of the verdicts, and why.
void print_notes(const Trained& t, const Collectives& collectives,
                 const detect::WindowsNotFlagged& not_flagged, double min_share) {
  // a few, then how many more: a Python trace has dozens of functions called once or twice
  for (size_t i = 0; i < t.skipped.size() && i < 5; ++i)
    fmt::print("  not modelled: {}\n", t.skipped[i]);
  if (t.skipped.size() > 5)
    fmt::print("  not modelled: {} more groups (all in --json's skipped_groups)\n",
               t.skipped.size() - 5);
  for (const auto& s : collectives.notes()) fmt::print("  collectives not lined up across ranks: {}\n", s);
  if (t.model.starved_training_windows)
    fmt::print("  {} left out: the job got under half its usual CPU in {} while waiting 3x longer "
               "for a CPU (CPU interference while learning)\n",
               t.model.starved_training_windows == 1
                   ? std::string("1 training window")
                   : fmt::format("{} training windows", t.model.starved_training_windows),
               t.model.starved_training_windows == 1 ? "it" : "them");
  if (t.model.startup_training_windows)
    fmt::print(
        "  {} left out as the job's start-up: its first windows, unusual even to a model "
        "learnt from them all (loading, warm-up)\n",
        t.model.startup_training_windows == 1
            ? std::string("1 training window")
            : fmt::format("{} training windows", t.model.startup_training_windows));
  if (t.model.outlier_training_windows)
    fmt::print("  {} left out: unusual even to a model learnt from them all, as a "
               "disturbance while learning\n",
               t.model.outlier_training_windows == 1
                   ? std::string("1 training window")
                   : fmt::format("{} training windows", t.model.outlier_training_windows));
  if (t.immaterial)
    fmt::print("  {} not reported: their operation's slow calls lost under {:g}% of the time they "
               "came in (--min-share 0 reports them)\n",
               t.immaterial == 1 ? std::string("1 slow call")
                                 : fmt::format("{} slow calls", t.immaterial),
               100 * min_share);
  if (not_flagged.faster)
    fmt::print("  {} windows not flagged: unusual only in that the job ran faster than in "
               "training (more calls or traffic per second, nothing slower)\n",
               not_flagged.faster);
  if (not_flagged.a_little_slower)
    fmt::print("  {} windows not flagged: unusual only in that the job's calls ran under {:g}x "
               "slower or fewer than in training, no resource under more pressure\n",
               not_flagged.a_little_slower, detect::kMinWindowSlowdown);
}

// The strongest anomalies first: how far below its threshold each one fell (those no model
// scored, late joins named against the job's own collectives, last).
void print_strongest(const DetectArgs& a, const std::vector<detect::Anomaly>& anomalies,
                     int64_t start) {
  std::vector<const detect::Anomaly*> strongest;
  for (const auto& an : anomalies) strongest.push_back(&an);
  std::sort(strongest.begin(), strongest.end(), [](const auto* x, const auto* y) {
    return detect::margin(*x) < detect::margin(*y);
  });
  if (!strongest.empty()) fmt::print("  strongest:\n");
  size_t shown = 0;
  for (const auto* p : strongest) {
    const auto& an = *p;
    if (++shown > 10) {
      fmt::print("  ... {} more: eacgm report {}, or SELECT * FROM anomalies\n",
                 anomalies.size() - 10, a.write_to[0].first);
      break;
    }
    // (a collective flagged for a wait past its group's tail may score above the threshold)
    std::string judged =
        an.late_share > 0
            ? fmt::format("{} late joins in {:.3g} s, peers waiting {:.0f}% of it", an.burst,
                          double(an.burst_window_ns) / 1e9, 100 * an.late_share)
        : an.score < an.threshold ? fmt::format("score {:.1f} < {:.1f}", an.score, an.threshold)
                                  : fmt::format("score {:.1f}, wait past its tail", an.score);
    fmt::print("  +{:.3f} s  {:<6} {:<24} {:>10}  {}  {} ({})\n",
               double(int64_t(an.ts_ns) - start) / 1e9, an.layer,
               anomaly_subject(an.layer, an.name), human_duration(an.dur_ns), judged, an.cause,
               detect::describe_measured(an));
  }
}

// The anomalies table of each recording examined, on its own clock. Returns their paths.
std::string write_rows(const DetectArgs& a, const Trained& t, const std::vector<AnomalyRow>& rows) {
  std::string written_to;
  for (const auto& [path, shift] : a.write_to) {
    std::vector<AnomalyRow> own = rows;
    for (auto& r : own) r.ts_ns = uint64_t(int64_t(r.ts_ns) - shift);
    write_anomalies(path, own,
                    {{"detect_trained_on", t.trained_on},
                     {"detect_groups", std::to_string(t.model.groups.size())},
                     {"detect_anomalies", std::to_string(rows.size())},
                     {"detect_slow_calls_immaterial", std::to_string(t.immaterial)}});
    written_to += (written_to.empty() ? "" : ", ") + path;
  }
  return written_to;
}

int run_detect(const DetectArgs& a) {
  RecordingReader rec(a.recording);
  int64_t start = rec.meta_ns("start_monotonic_ns"), end = rec.meta_ns("end_monotonic_ns");
  double window_s = a.window_s;
  if (!a.window_given && a.model.empty())
    window_s = a.train.empty() ? default_window_s(rec, a.train_fraction)
                               : default_window_s(RecordingReader(a.train), 1.0);
  detect::DetectOptions opts = detect_options(a);
  Trained t;
  t.window_ns = uint64_t(window_s * 1e9);
  load_or_train_elsewhere(a, opts, t);
  Collectives collectives(rec);
  auto tables = tables_of(rec, t.window_ns, a.layers, collectives);
  // Late joins judged against the job's own collectives, where no model judges them (as the
  // agent: detect/young_stragglers.h): first each operation's training calls, which training
  // then leaves out where a rank was late...
  detect::YoungStragglers young_rule;
  std::vector<detect::Anomaly> young;
  const bool own = a.model.empty() && a.train.empty();
  if (own) {
    t.split = detect::split_by_count(tables, a.train_fraction);
    young = detect::young_stragglers(
        tables, collectives, young_rule, [&](const detect::FeatureTable& tb, size_t i) {
          auto s = t.split.find(tb.group);
          return s == t.split.end() || tb.ts_ns[i] < s->second;
        });
    train_on_own_start(a, start, end, tables, opts, t);
  }
  // ... then the rest of the calls of the operations without a model
  {
    std::set<std::string> modelled;  // (a model whose features differ judges nothing)
    for (const auto& g : t.model.groups)
      for (const auto& table : tables)
        if (table.group == g.group && table.feature_names == g.features) modelled.insert(g.group);
    auto more = detect::young_stragglers(
        tables, collectives, young_rule, [&](const detect::FeatureTable& tb, size_t i) {
          if (modelled.count(tb.group)) return false;
          auto s = t.split.find(tb.group);
          return !own || s == t.split.end() || tb.ts_ns[i] >= s->second;
        });
    young.insert(young.end(), more.begin(), more.end());
  }
  if (!a.save_model.empty()) {
    std::ofstream out(a.save_model);
    out << detect::detector_to_json(t.model).dump(1) << "\n";
    if (!out) fail("cannot write model {}: {}", a.save_model, errno_text(errno));
  }
  if (!a.features_out.empty()) write_feature_tables(tables, a.features_out);
  for (const auto& table : tables)
    for (const auto& g : t.model.groups)
      if (g.group == table.group && g.features != table.feature_names)
        t.skipped.push_back(fmt::format("{}: its features ({}) differ from the model's "
                                        "({}); train on a recording of the same kind",
                                        table.group, fmt::join(table.feature_names, ", "),
                                        fmt::join(g.features, ", ")));
  detect::WindowsNotFlagged not_flagged;
  auto anomalies = detect::find_anomalies(t.model, tables, t.split, a.min_slowdown,
                                          a.min_excess_us, &not_flagged, t.score_from);
  // as the agent: an operation's slow calls that cost it next to nothing are not reported
  t.immaterial = detect::drop_immaterial(anomalies, a.min_share, detect::kMaterialSpanNs);
  // (the late joins are material by their own rule: their peers waited a share of the time)
  anomalies.insert(anomalies.end(), young.begin(), young.end());
  std::stable_sort(anomalies.begin(), anomalies.end(),
                   [](const auto& x, const auto& y) { return x.ts_ns < y.ts_ns; });
  detect::explain_waits(collectives, anomalies);
  detect::CallContext context(rec);
  context.explain(anomalies);
  detect::attribute_nested(anomalies);
  detect::attribute_windows(anomalies, anomalies);
  // (after the late rank: a window's stops add to its cause, which names its kind first)
  for (auto& an : anomalies)
    if (an.layer == "window") context.explain_window(an, {}, true);  // (one job: all processes)
  std::vector<AnomalyRow> rows;
  for (const auto& an : anomalies)
    rows.push_back({an.ts_ns, an.dur_ns, an.layer, an.name, an.score, an.threshold, an.cause,
                    detect::features_column(an)});
  std::string written_to = write_rows(a, t, rows);
  if (a.json_out) {
    print_json(a, t, collectives, not_flagged, rows);
    return 0;
  }
  fmt::print(
      "eacgm detect: {} models trained on {} (windows of {:g} s); {} anomalies written to {} "
      "(table anomalies)\n",
      t.model.groups.size(), t.trained_on, double(t.window_ns) / 1e9, rows.size(), written_to);
  print_notes(t, collectives, not_flagged, a.min_share);
  // one line per cause, its measurements as ranges: "joined 26.4-30.3 ms late"
  std::map<std::string, size_t> counts;
  for (const auto& r : rows) ++counts[r.cause];
  for (const auto& g : group_causes({counts.begin(), counts.end()}))
    fmt::print("  {:>6}  {}\n", g.count, g.cause);
  print_strongest(a, anomalies, start);
  return 0;
}

// How a sample is judged: components, threshold, how much slower a flagged call must be.
void add_judging_options(CLI::App* cmd, const std::shared_ptr<DetectArgs>& a) {
  cmd->add_option("--components", a->components, "mixture components per model, or auto (BIC)")
      ->capture_default_str();
  cmd->add_option("--quantile", a->quantile,
                  "threshold: this quantile of the training samples' scores")
      ->capture_default_str()
      ->check(number_in(0.0, 0.5, "a quantile"));
  cmd->add_option("--min-slowdown", a->min_slowdown,
                  "a call flagged for its duration must be at least this many times slower than "
                  "its usual duration")
      ->capture_default_str()
      ->check(number_in(1.0, 1000.0, "a factor"));
  cmd->add_option("--min-excess-us", a->min_excess_us,
                  "... and at least this many microseconds slower (0: no minimum); shorter "
                  "delays are what interrupts and preemption do to any call")
      ->capture_default_str()
      ->check(number_in(0.0, 1e9, "a number of microseconds"));
  cmd->add_option("--min-share", a->min_share,
                  "report an operation's slow calls only where, within 10 s, they lost at least "
                  "this share of the time they came in (0.01: 10 ms in a second, 100 ms in 10 s; "
                  "the agent's rule); 0 reports every one. Late joins and windows are not judged "
                  "by it")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0, "a share"));
  cmd->add_option("--threshold", a->threshold, "threshold: this log-density, for every model")
      ->check(finite_number())
      ->each([a](const std::string&) { a->has_threshold = true; });
}

}  // namespace

std::function<int()> add_detect(CLI::App& app) {
  auto a = std::make_shared<DetectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "detect",
      "Find anomalies in a recording with Gaussian mixture models: one per operation (its "
      "calls' durations and sizes) and one for time windows across layers (host, GPU, call "
      "activity). Normal is learned from the first part of the recording, another recording "
      "(--train) or a saved model (--model); samples whose log-density under their most likely "
      "component falls below a threshold calibrated on the training samples are written to the "
      "recording's anomalies table with the features that pushed them out and a probable cause.");
  cmd->add_option("recordings", a->recordings,
                  "the recording to examine (default: run.eacgm.db here, what `eacgm record` "
                  "writes); several recordings of one job (one per host) are lined up as "
                  "`eacgm merge` does, examined as one, and each gets the job's anomalies on its "
                  "own clock");
  cmd->add_option("--train", a->trains,
                  "learn normal from this recording instead (repeat it for the recordings of "
                  "one job on several hosts)");
  cmd->add_flag("--any-job", a->any_job,
                "line up recordings whose ranks name different jobs (refused otherwise)");
  cmd->add_option("--model", a->model, "use a model saved by --save-model instead of training");
  cmd->add_option("--save-model", a->save_model, "save the trained models as JSON here");
  cmd->add_option("--train-fraction", a->train_fraction,
                  "without --train/--model: train each operation's model on this first "
                  "fraction of its calls, and the window model on this first fraction of the "
                  "job's windows (from its first traced call to its last)")
      ->capture_default_str()
      ->check(number_in(0.05, 0.95, "a fraction"));
  cmd->add_option("--window", a->window_s,
                  "seconds per cross-layer window (default: 1, or down to 0.1 for a recording "
                  "too short to learn from 60 windows of 1 s)")
      ->check(number_in(0.01, 3600.0, "a number of seconds"))
      ->each([a](const std::string&) { a->window_given = true; });
  cmd->add_option("--layers", a->layers,
                  "what to model: cuda, comm, torch, python (calls, one model per operation), "
                  "gpu (kernels' time on the GPU, one model per kernel: the gputime layer), "
                  "window (time windows across layers)")
      ->capture_default_str();
  add_judging_options(cmd, a);
  cmd->add_flag("--json", a->json_out, "print the result as JSON");
  cmd->add_option("--features-out", a->features_out,
                  "also write each group's features as CSV into this folder (for other tools)");
  return [a]() {
    if (a->recordings.empty()) a->recordings.push_back(default_recording());
    if (!a->trains.empty() && !a->model.empty())
      throw UsageError("--train and --model both say what normal is: give one of them");
    // several recordings of one job: one lined-up copy of them, removed at the end
    std::vector<std::unique_ptr<LinedUp>> copies;
    auto one = [&](const std::vector<std::string>& paths, const char* what) -> std::string {
      if (paths.size() == 1) return paths[0];
      copies.push_back(std::make_unique<LinedUp>(paths, a->any_job, what));
      return copies.back()->path;
    };
    a->recording = one(a->recordings, "examined");
    if (!a->trains.empty()) a->train = one(a->trains, "training");
    a->write_to.clear();
    if (a->recordings.size() == 1)
      a->write_to.emplace_back(a->recording, 0);
    else
      for (const auto& h : copies.front()->result.hosts)
        a->write_to.emplace_back(h.file, h.wall_offset_ns + h.fix.offset_ns);
    return run_detect(*a);
  };
}

}  // namespace eacgm::cli
