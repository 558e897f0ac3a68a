// GMM models as JSON files, so a model fitted once can score later runs.
#include <cerrno>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "detect/gmm.h"
#include "util/error.h"

namespace eacgm::detect {

using nlohmann::json;

namespace {

constexpr const char* kFormat = "eacgm-gmm";
constexpr int kVersion = 1;

std::vector<double> row_of(const Eigen::MatrixXd& m, Eigen::Index r) {
  std::vector<double> v(size_t(m.cols()));
  for (Eigen::Index c = 0; c < m.cols(); ++c) v[size_t(c)] = m(r, c);
  return v;
}

// A K x d or d x d matrix from an array of equal-length arrays of numbers.
Eigen::MatrixXd matrix_from(const json& rows, Eigen::Index expect_rows, Eigen::Index expect_cols,
                            const char* what) {
  if (!rows.is_array() || Eigen::Index(rows.size()) != expect_rows)
    fail("'{}' must be an array of {} rows", what, expect_rows);
  Eigen::MatrixXd m(expect_rows, expect_cols);
  for (Eigen::Index r = 0; r < expect_rows; ++r) {
    const json& row = rows[size_t(r)];
    if (!row.is_array() || Eigen::Index(row.size()) != expect_cols)
      fail("'{}' row {} must hold {} numbers", what, r, expect_cols);
    for (Eigen::Index c = 0; c < expect_cols; ++c) m(r, c) = row[size_t(c)].get<double>();
  }
  return m;
}

}  // namespace

json model_to_json(const GaussianMixture& model, const std::vector<std::string>& feature_names) {
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["covariance_type"] = to_string(model.covariance_type());
  j["n_components"] = model.n_components();
  j["n_features"] = model.n_features();
  j["feature_names"] = feature_names;
  j["weights"] =
      std::vector<double>(model.weights().data(), model.weights().data() + model.weights().size());
  j["means"] = json::array();
  j["covariances"] = json::array();
  for (int k = 0; k < model.n_components(); ++k) {
    j["means"].push_back(row_of(model.means(), k));
    const Eigen::MatrixXd& cov = model.covariances()[size_t(k)];
    if (model.covariance_type() == CovarianceType::diag) {
      j["covariances"].push_back(std::vector<double>(cov.diagonal().begin(), cov.diagonal().end()));
    } else {
      json rows = json::array();
      for (Eigen::Index r = 0; r < cov.rows(); ++r) rows.push_back(row_of(cov, r));
      j["covariances"].push_back(std::move(rows));
    }
  }
  return j;
}

// A count in a model file: an integer in [lo, hi] (a float or a huge number converted to int
// is undefined behaviour: found by fuzz/fuzz_gmm_model).
int count_at(const json& j, const char* key, int lo, int hi) {
  const json& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    fail("'{}' must be a whole number from {} to {}", key, lo, hi);
  return int(v.get<int64_t>());
}

GaussianMixture model_from_json(const json& j, std::vector<std::string>* feature_names) {
  try {
    if (!j.is_object() || j.value("format", "") != kFormat)
      fail("not an eacgm GMM model (no \"format\": \"{}\")", kFormat);
    if (!j.at("version").is_number_integer() || j.at("version").get<int64_t>() != kVersion)
      fail("model version {} is not supported (this eacgm reads version {})",
           j.at("version").dump(), kVersion);
    std::string type = j.at("covariance_type").get<std::string>();
    if (type != "full" && type != "diag") fail("covariance_type '{}' is not full or diag", type);
    int k = count_at(j, "n_components", 1, 1000), d = count_at(j, "n_features", 1, 100000);
    auto w = j.at("weights").get<std::vector<double>>();
    if (int(w.size()) != k) fail("'weights' must hold {} numbers", k);
    // a weight of 0 made every density -inf - -inf = NaN (found by fuzz/fuzz_gmm_model)
    double sum = 0;
    for (double x : w) {
      if (!std::isfinite(x) || x <= 0 || x > 1 + 1e-9) fail("'weights' must be numbers in (0, 1]");
      sum += x;
    }
    if (std::fabs(sum - 1) > 1e-6) fail("'weights' must sum to 1 (they sum to {})", sum);
    Eigen::MatrixXd means = matrix_from(j.at("means"), k, d, "means");
    if (!means.allFinite()) fail("'means' must be finite numbers");
    const json& covs = j.at("covariances");
    if (!covs.is_array() || int(covs.size()) != k) fail("'covariances' must hold {} entries", k);
    std::vector<Eigen::MatrixXd> cov;
    for (int c = 0; c < k; ++c) {
      if (type == "full") {
        cov.push_back(matrix_from(covs[size_t(c)], d, d, "covariances"));
      } else {
        Eigen::MatrixXd diag = matrix_from(json::array({covs[size_t(c)]}), 1, d, "covariances");
        cov.push_back(diag.row(0).asDiagonal());
      }
    }
    for (const auto& c : cov)
      if (!c.allFinite()) fail("'covariances' must be finite numbers");
    if (feature_names) {
      *feature_names = j.value("feature_names", std::vector<std::string>{});
      if (!feature_names->empty() && int(feature_names->size()) != d)
        fail("'feature_names' must hold {} names or none", d);
    }
    return GaussianMixture(type == "full" ? CovarianceType::full : CovarianceType::diag,
                           Eigen::Map<Eigen::VectorXd>(w.data(), k), std::move(means),
                           std::move(cov));
  } catch (const json::exception& e) {
    fail("malformed model: {}", e.what());
  }
}

void save_model(const std::string& path, const GmmFit& fit, const GmmOptions& options,
                Eigen::Index n_samples, const std::vector<std::string>& feature_names) {
  json j = model_to_json(fit.model, feature_names);
  j["fit"] = {{"mean_log_likelihood", fit.mean_log_likelihood},
              {"n_iter", fit.n_iter},
              {"converged", fit.converged},
              {"bic", fit.bic},
              {"n_samples", n_samples},
              {"max_iter", options.max_iter},
              {"tol", options.tol},
              {"n_init", options.n_init},
              {"seed", options.seed},
              {"reg_covar", options.reg_covar}};
  std::ofstream out(path);
  if (!out)
    fail("cannot write model {}: {} (check the directory exists and is writable)", path,
         errno_text(errno));
  out << j.dump(1) << '\n';
  out.close();
  if (!out) fail("cannot write model {} (is the disk full?)", path);
}

GaussianMixture load_model(const std::string& path, std::vector<std::string>* feature_names) {
  std::ifstream in(path);
  if (!in) fail("cannot read model {}: {} (check the path)", path, errno_text(errno));
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded())
    fail("model {} is not valid JSON (regenerate it with eacgm gmm fit -o)", path);
  try {
    return model_from_json(j, feature_names);
  } catch (const Error& e) {
    fail("model {}: {} (regenerate it with eacgm gmm fit -o)", path, e.what());
  }
}

}  // namespace eacgm::detect
