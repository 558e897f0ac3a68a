// `eacgm gmm`: fit a Gaussian mixture to a numeric CSV, and score rows under a saved model.
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string_view>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli/commands.h"
#include "detect/csv_matrix.h"
#include "detect/gmm.h"
#include "util/error.h"

namespace eacgm::cli {
namespace {

using detect::GmmFit;
using detect::GmmOptions;
using nlohmann::json;

// Components to try for `-k auto`: enough for the few regimes a workload's events fall into.
constexpr int kAutoMaxComponents = 10;

struct FitArgs {
  std::string data, k, covariance = "full", output;
  GmmOptions options;
};

struct ScoreArgs {
  std::string model, data, output;
};

int parse_int(std::string_view s, const std::string& whole) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 1)
    throw UsageError(
        fmt::format("-k {}: expected a count like 4, a range like 2..8, or auto", whole));
  return v;
}

// "-k 4" is {4, 4}; "-k 2..8" is {2, 8}; "-k auto" is {1, kAutoMaxComponents}.
std::pair<int, int> parse_k(const std::string& k) {
  if (k == "auto") return {1, kAutoMaxComponents};
  size_t dots = k.find("..");
  if (dots == std::string::npos) {
    int v = parse_int(k, k);
    return {v, v};
  }
  int lo = parse_int(std::string_view(k).substr(0, dots), k);
  int hi = parse_int(std::string_view(k).substr(dots + 2), k);
  if (hi < lo) throw UsageError(fmt::format("-k {}: the range must go from low to high", k));
  return {lo, hi};
}

json fit_summary(const GmmFit& f) {
  return {{"k", f.model.n_components()},
          {"mean_log_likelihood", f.mean_log_likelihood},
          {"bic", f.bic},
          {"n_iter", f.n_iter},
          {"converged", f.converged},
          {"fit_seconds", f.fit_seconds}};
}

int run_fit(FitArgs& a) {
  a.options.covariance =
      a.covariance == "diag" ? detect::CovarianceType::diag : detect::CovarianceType::full;
  auto [k_min, k_max] = parse_k(a.k);
  detect::NumericTable table = detect::read_numeric_csv(a.data);
  const Eigen::MatrixXd& x = table.values;
  std::vector<GmmFit> fits = detect::fit_gmm_range(x, a.options, k_min, k_max);
  const GmmFit& best = fits[detect::choose_by_bic(fits)];
  json out = fit_summary(best);
  out["n"] = x.rows();
  out["d"] = x.cols();
  out["covariance"] = a.covariance;
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  out["threads"] = threads;
  if (fits.size() > 1) {
    out["candidates"] = json::array();
    double total = 0;
    for (const GmmFit& f : fits)
      out["candidates"].push_back(fit_summary(f)), total += f.fit_seconds;
    out["total_fit_seconds"] = total;
  }
  if (!a.output.empty()) {
    detect::GmmOptions used = a.options;
    used.n_components = best.model.n_components();
    detect::save_model(a.output, best, used, x.rows(), table.column_names);
    out["model"] = a.output;
  }
  if (!best.converged)
    fprintf(stderr,
            "eacgm: warning: EM did not converge in %d iterations (raise --max-iter or "
            "--tol)\n",
            best.n_iter);
  printf("%s\n", out.dump().c_str());
  return 0;
}

int run_score(const ScoreArgs& a) {
  std::vector<std::string> names;
  detect::GaussianMixture model = detect::load_model(a.model, &names);
  detect::NumericTable table = detect::read_numeric_csv(a.data);
  if (table.values.cols() != model.n_features())
    fail(
        "{} has {} columns but model {} was fitted on {} (score data with the training "
        "data's columns)",
        a.data, table.values.cols(), a.model, model.n_features());
  if (!table.column_names.empty()) names = table.column_names;
  detect::GmmScores s = detect::score_gmm(model, table.values);

  FILE* out = stdout;
  if (!a.output.empty() && !(out = fopen(a.output.c_str(), "w")))
    fail("cannot write {}: {} (check the directory exists and is writable)", a.output,
         errno_text(errno));
  std::string buf =
      "row,log_density,component,component_log_density,top_feature,"
      "top_contribution\n";
  for (Eigen::Index i = 0; i < table.values.rows(); ++i) {
    Eigen::Index top;
    double c = s.contributions.row(i).maxCoeff(&top);
    std::string feature = names.empty() ? fmt::format("column{}", top + 1) : names[size_t(top)];
    fmt::format_to(std::back_inserter(buf), "{},{},{},{},{},{}\n", i, s.log_density(i),
                   s.component(i), s.component_log_density(i), feature, c);
    if (buf.size() > (1 << 20)) fwrite(buf.data(), 1, buf.size(), out), buf.clear();
  }
  fwrite(buf.data(), 1, buf.size(), out);
  bool failed = ferror(out) != 0;
  if (out != stdout) failed |= fclose(out) != 0;
  if (failed)
    fail("cannot write {}: {} (is the disk full?)", a.output.empty() ? "scores" : a.output,
         errno_text(errno));
  return 0;
}

}  // namespace

std::function<int()> add_gmm(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "gmm",
      "Gaussian mixture models on numeric CSV files (one row per sample, optional header "
      "row): fit one by EM, or score rows under a saved model.");
  cmd->require_subcommand(1);

  auto fit = std::make_shared<FitArgs>();
  CLI::App* f = cmd->add_subcommand(
      "fit",
      "Fit a mixture by EM from k-means++ seeds and print one JSON line: k, n, d, "
      "mean_log_likelihood, bic, n_iter, converged, fit_seconds (and, for a range of K, "
      "each candidate; the lowest BIC wins). Uses all cores (OMP_NUM_THREADS to limit); "
      "the same seed gives the same model.");
  f->add_option("data", fit->data, "CSV of numbers, one sample per row")->required();
  f->add_option("-k,--components", fit->k,
                "components: a count (4), a range chosen by BIC (2..8), or auto (1..10)")
      ->required();
  f->add_option("--covariance", fit->covariance, "covariance per component")
      ->check(CLI::IsMember({"full", "diag"}))
      ->capture_default_str();
  f->add_option("--max-iter", fit->options.max_iter, "EM iterations per initialisation")
      ->capture_default_str();
  f->add_option("--tol", fit->options.tol,
                "converged when the mean log-likelihood changes by less than this")
      ->capture_default_str();
  f->add_option("--n-init", fit->options.n_init, "initialisations; the best is kept")
      ->capture_default_str();
  f->add_option("--seed", fit->options.seed, "seed of the k-means++ initialisation")
      ->capture_default_str();
  f->add_option("--reg-covar", fit->options.reg_covar,
                "added to each covariance diagonal to keep it positive definite")
      ->capture_default_str();
  f->add_option("-o,--output", fit->output, "save the model as JSON here (for gmm score)");

  auto score = std::make_shared<ScoreArgs>();
  CLI::App* s = cmd->add_subcommand(
      "score",
      "Score each row under a saved model and write CSV: row (0-based), log_density "
      "(under the whole mixture), component (most likely), component_log_density "
      "(under that component alone: low means anomalous), top_feature and "
      "top_contribution (the feature most at odds with that component, as its squared "
      "z-score given the other features).");
  s->add_option("model", score->model, "model JSON written by gmm fit -o")->required();
  s->add_option("data", score->data, "CSV with the model's columns")->required();
  s->add_option("-o,--output", score->output, "write the CSV here instead of stdout");

  return [f, s, fit, score]() {
    if (f->parsed()) return run_fit(*fit);
    if (s->parsed()) return run_score(*score);
    throw UsageError("gmm needs fit or score (see eacgm gmm --help)");
  };
}

}  // namespace eacgm::cli
