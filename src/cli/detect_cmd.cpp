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
#include <nlohmann/json.hpp>
#include <sstream>

#include <fmt/ranges.h>
#include <unistd.h>

#include "cli/commands.h"
#include "detect/call_context.h"
#include "detect/detector.h"
#include "report/collectives.h"
#include "store/anomalies.h"
#include "store/merge.h"
#include "store/reader.h"
#include "store/rows.h"
#include "store/sqlite_util.h"
#include "util/error.h"
#include "util/output_file.h"

namespace eacgm::cli {
namespace {

using nlohmann::json;

struct DetectArgs {
  std::string recording, train, model, save_model, layers = "cuda,comm,torch,python,window", components = "auto";
  std::string features_out;
  std::vector<std::string> recordings, trains;  // as given; several: one job's, lined up
  bool any_job = false;
  // where the anomalies go: each recording examined, with what to subtract from the examined
  // recording's times to put them on its clock (0 unless several were lined up)
  std::vector<std::pair<std::string, int64_t>> write_to;
  double train_fraction = 0.5, window_s = 1.0, quantile = 0.005, min_slowdown = 3,
         min_excess_us = 1000;
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
    if (l != "cuda" && l != "comm" && l != "torch" && l != "python" && l != "window")
      throw UsageError(fmt::format(
          "--layers: unknown '{}' (choose from cuda, comm, torch, python, window)", l));
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

int run_detect(const DetectArgs& a) {
  RecordingReader rec(a.recording);
  double window_s = a.window_s;
  if (!a.window_given && a.model.empty())
    window_s = a.train.empty() ? default_window_s(rec, a.train_fraction)
                               : default_window_s(RecordingReader(a.train), 1.0);
  uint64_t window_ns = uint64_t(window_s * 1e9);
  int64_t start = rec.meta_ns("start_monotonic_ns");
  int64_t end = rec.meta_ns("end_monotonic_ns");
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

  detect::DetectorModel model;
  std::vector<std::string> skipped;
  uint64_t score_from = 0;
  std::string trained_on;
  if (!a.model.empty()) {
    std::ifstream in(a.model);
    if (!in) fail("cannot read model {}: {} (save one with eacgm detect --save-model)", a.model,
                  errno_text(errno));
    try {
      model = detect::detector_from_json(json::parse(in));
    } catch (const json::exception& e) {
      fail("model {} is not valid JSON: {}", a.model, e.what());
    } catch (const Error& e) {
      fail("model {}: {}", a.model, e.what());
    }
    window_ns = model.window_ns ? model.window_ns : window_ns;
    // --threshold is for every model, a saved one's too (--quantile was fixed when it was saved)
    if (opts.threshold)
      for (auto& g : model.groups) g.threshold = *opts.threshold;
    trained_on = "model " + a.model;
  } else if (!a.train.empty()) {
    RecordingReader train(a.train);
    Collectives train_collectives(train);
    model = detect::train_detector(tables_of(train, window_ns, a.layers, train_collectives),
                                   UINT64_MAX, opts, &skipped);
    model.window_ns = window_ns;
    trained_on = a.trains.size() > 1 ? fmt::format("recordings {}", fmt::join(a.trains, ", "))
                                      : "recording " + a.train;
  }
  Collectives collectives(rec);
  auto tables = tables_of(rec, window_ns, a.layers, collectives);
  std::map<std::string, uint64_t> split;  // per group: its first row scored
  if (a.model.empty() && a.train.empty()) {
    // each operation learns from its own first calls: a split of the time would move when a
    // fault makes calls take longer (a straggler's 20 ms waits) or when the job spends its
    // first seconds importing torch. Windows, which cover the job's working time (from its
    // first traced call to its last), learn from their first part (eval/score.py scores the
    // windows from scored_from_ns).
    split = detect::split_by_count(tables, a.train_fraction);
    if (auto w = split.find("window"); w != split.end())
      score_from = w->second;
    else
      score_from = end > start ? uint64_t(start + int64_t(double(end - start) * a.train_fraction))
                               : UINT64_MAX;
    model = detect::train_detector(tables, split, opts, &skipped);
    model.window_ns = window_ns;
    trained_on = fmt::format("the first {:.0f}% of each operation's calls and of the job's windows",
                             100 * a.train_fraction);
  }
  if (!a.save_model.empty()) {
    std::ofstream out(a.save_model);
    out << detect::detector_to_json(model).dump(1) << "\n";
    if (!out) fail("cannot write model {}: {}", a.save_model, errno_text(errno));
  }
  if (!a.features_out.empty()) write_feature_tables(tables, a.features_out);
  for (const auto& t : tables)
    for (const auto& g : model.groups)
      if (g.group == t.group && g.features != t.feature_names)
        skipped.push_back(fmt::format("{}: its features ({}) differ from the model's "
                                      "({}); train on a recording of the same kind",
                                      t.group, fmt::join(t.feature_names, ", "),
                                      fmt::join(g.features, ", ")));
  detect::WindowsNotFlagged not_flagged;
  auto anomalies = detect::find_anomalies(model, tables, split, a.min_slowdown,
                                          a.min_excess_us, &not_flagged, score_from);
  detect::explain_waits(collectives, anomalies);
  detect::CallContext(rec).explain(anomalies);
  detect::attribute_nested(anomalies);

  std::vector<AnomalyRow> rows;
  for (const auto& an : anomalies) {
    rows.push_back({an.ts_ns, an.dur_ns, an.layer, an.name, an.score, an.threshold, an.cause,
                    detect::features_column(an)});
  }
  std::string written_to;
  for (const auto& [path, shift] : a.write_to) {
    std::vector<AnomalyRow> own = rows;
    for (auto& r : own) r.ts_ns = uint64_t(int64_t(r.ts_ns) - shift);
    write_anomalies(path, own,
                    {{"detect_trained_on", trained_on},
                     {"detect_groups", std::to_string(model.groups.size())},
                     {"detect_anomalies", std::to_string(rows.size())}});
    written_to += (written_to.empty() ? "" : ", ") + path;
  }

  if (a.json_out) {
    json j;
    if (a.write_to.size() == 1)
      j["recording"] = a.write_to[0].first;
    else
      for (const auto& [path, shift] : a.write_to) j["recordings"].push_back(path);
    j["trained_on"] = trained_on;
    j["scored_from_ns"] = score_from;  // calls and windows that start here or later
    j["groups"] = model.groups.size();
    j["skipped_groups"] = skipped;
    j["collectives_not_lined_up"] = collectives.notes();
    j["window_s"] = double(window_ns) / 1e9;
    // unusual only in running faster, or a little slower: not flagged
    j["windows_busier_than_training"] = not_flagged.faster;
    j["windows_a_little_slower_than_training"] = not_flagged.a_little_slower;
    j["training_windows_starved_of_cpu"] = model.starved_training_windows;  // left out of training
    j["training_windows_at_start"] = model.startup_training_windows;        // left out of training
    j["anomalies"] = json::array();
    for (const auto& r : rows)
      j["anomalies"].push_back({{"ts_ns", r.ts_ns}, {"dur_ns", r.dur_ns}, {"layer", r.layer},
                                {"name", r.name}, {"score", r.score}, {"threshold", r.threshold},
                                {"cause", r.cause}, {"features", json::parse(r.features)}});
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print(
      "eacgm detect: {} models trained on {} (windows of {:g} s); {} anomalies written to {} "
      "(table anomalies)\n",
      model.groups.size(), trained_on, double(window_ns) / 1e9, rows.size(), written_to);
  // a few, then how many more: a Python trace has dozens of functions called once or twice
  for (size_t i = 0; i < skipped.size() && i < 5; ++i)
    fmt::print("  not modelled: {}\n", skipped[i]);
  if (skipped.size() > 5)
    fmt::print("  not modelled: {} more groups (all in --json's skipped_groups)\n",
               skipped.size() - 5);
  for (const auto& s : collectives.notes()) fmt::print("  collectives not lined up across ranks: {}\n", s);
  if (model.starved_training_windows)
    fmt::print("  {} training windows left out: the job got under half its usual CPU in them while "
               "waiting 3x longer for a CPU (CPU interference while learning)\n",
               model.starved_training_windows);
  if (model.startup_training_windows)
    fmt::print(
        "  {} left out as the job's start-up: its first windows, unusual even to a model "
        "learnt from them all (loading, warm-up)\n",
        model.startup_training_windows == 1
            ? std::string("1 training window")
            : fmt::format("{} training windows", model.startup_training_windows));
  if (not_flagged.faster)
    fmt::print("  {} windows not flagged: unusual only in that the job ran faster than in "
               "training (more calls or traffic per second, nothing slower)\n",
               not_flagged.faster);
  if (not_flagged.a_little_slower)
    fmt::print("  {} windows not flagged: unusual only in that the job's calls ran under {:g}x "
               "slower or fewer than in training, no resource under more pressure\n",
               not_flagged.a_little_slower, detect::kMinWindowSlowdown);
  // one line per cause, its measurements as ranges: "joined 26.4-30.3 ms late"
  std::map<std::string, size_t> counts;
  for (const auto& r : rows) ++counts[r.cause];
  for (const auto& g : group_causes({counts.begin(), counts.end()}))
    fmt::print("  {:>6}  {}\n", g.count, g.cause);
  // the strongest first: how far below its threshold each one fell
  std::vector<const detect::Anomaly*> strongest;
  for (const auto& an : anomalies) strongest.push_back(&an);
  std::sort(strongest.begin(), strongest.end(), [](const auto* x, const auto* y) {
    return x->score - x->threshold < y->score - y->threshold;
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
    std::string judged = an.score < an.threshold
                             ? fmt::format("score {:.1f} < {:.1f}", an.score, an.threshold)
                             : fmt::format("score {:.1f}, wait past its tail", an.score);
    fmt::print("  +{:.3f} s  {:<6} {:<24} {:>10}  {}  {} ({})\n",
               double(int64_t(an.ts_ns) - start) / 1e9, an.layer,
               anomaly_subject(an.layer, an.name), human_duration(an.dur_ns), judged, an.cause,
               detect::describe_measured(an));
  }
  return 0;
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
                  "window (time windows across layers)")
      ->capture_default_str();
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
  cmd->add_option("--threshold", a->threshold, "threshold: this log-density, for every model")
      ->check(finite_number())
      ->each([a](const std::string&) { a->has_threshold = true; });
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
