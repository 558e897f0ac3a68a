// The GMM engine: parameter recovery on known mixtures, determinism, BIC, scoring, JSON.
#include <gtest/gtest.h>

#include <functional>
#include <omp.h>

#include <Eigen/Cholesky>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>

#include "detect/gmm.h"
#include "detect/kmeans.h"
#include "util/error.h"

using namespace eacgm::detect;
using Eigen::MatrixXd;
using Eigen::VectorXd;

namespace {

struct Truth {
  VectorXd weights;
  MatrixXd means;              // K x d
  std::vector<MatrixXd> covs;  // d x d
};

// Samples from a known mixture: components in proportion to the weights (exact counts, so the
// recovered weights can be checked tightly), Gaussian noise by Box-Muller from SeedStream.
MatrixXd sample(const Truth& t, Eigen::Index n, uint64_t seed) {
  SeedStream rng(seed);
  auto normal = [&rng] {
    double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  };
  Eigen::Index d = t.means.cols(), row = 0;
  MatrixXd x(n, d);
  for (Eigen::Index k = 0; k < t.weights.size(); ++k) {
    Eigen::Index count =
        k + 1 == t.weights.size() ? n - row : Eigen::Index(t.weights(k) * double(n));
    MatrixXd l = t.covs[size_t(k)].llt().matrixL();
    for (Eigen::Index i = 0; i < count; ++i, ++row) {
      VectorXd z(d);
      for (auto& v : z) v = normal();
      x.row(row) = (t.means.row(k).transpose() + l * z).transpose();
    }
  }
  return x;
}

MatrixXd cov2(double sx, double sy, double rho) {
  MatrixXd c(2, 2);
  c << sx * sx, rho * sx * sy, rho * sx * sy, sy * sy;
  return c;
}

Truth three_blobs() {
  Truth t;
  t.weights = VectorXd(3);
  t.weights << 0.2, 0.3, 0.5;
  t.means = MatrixXd(3, 2);
  t.means << 0, 0, 10, 0, 0, 10;
  t.covs = {cov2(1.0, 0.5, 0.6), cov2(0.7, 1.5, -0.4), cov2(1.2, 1.2, 0.0)};
  return t;
}

// Index of the fitted component whose mean is nearest each true mean.
std::vector<int> match(const GaussianMixture& m, const Truth& t) {
  std::vector<int> idx;
  for (Eigen::Index k = 0; k < t.means.rows(); ++k) {
    Eigen::Index best;
    (m.means().rowwise() - t.means.row(k)).rowwise().squaredNorm().minCoeff(&best);
    idx.push_back(int(best));
  }
  return idx;
}

GmmOptions options(int k, CovarianceType type = CovarianceType::full) {
  GmmOptions o;
  o.n_components = k;
  o.covariance = type;
  o.n_init = 2;
  o.seed = 7;
  return o;
}

void expect_recovers(const GmmFit& fit, const Truth& t, bool diag_only) {
  auto idx = match(fit.model, t);
  std::vector<int> sorted = idx;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end()) << "two truths, one component";
  for (size_t k = 0; k < idx.size(); ++k) {
    const MatrixXd& cov = fit.model.covariances()[size_t(idx[k])];
    EXPECT_NEAR(fit.model.weights()(idx[k]), t.weights(Eigen::Index(k)), 0.005);
    EXPECT_LT((fit.model.means().row(idx[k]) - t.means.row(Eigen::Index(k))).norm(), 0.05);
    MatrixXd want = t.covs[k];
    if (diag_only) want = MatrixXd(want.diagonal().asDiagonal());
    EXPECT_LT((cov - want).cwiseAbs().maxCoeff(), 0.06 * want.cwiseAbs().maxCoeff())
        << "component " << k << "\n"
        << cov << "\nwant\n"
        << want;
  }
}

// log p(x) computed the plain way, one sample at a time, as a reference for the kernels.
double reference_log_density(const GaussianMixture& m, const VectorXd& x) {
  double total = 0;
  for (int k = 0; k < m.n_components(); ++k) {
    Eigen::LLT<MatrixXd> llt(m.covariances()[size_t(k)]);
    VectorXd z = llt.matrixL().solve(x - m.means().row(k).transpose());
    double log_det = 2 * llt.matrixL().toDenseMatrix().diagonal().array().log().sum();
    total += m.weights()(k) * std::exp(-0.5 * (z.squaredNorm() + log_det +
                                               double(x.size()) * std::log(2 * std::numbers::pi)));
  }
  return std::log(total);
}

}  // namespace

TEST(Gmm, RecoversFullCovarianceMixture) {
  Truth t = three_blobs();
  GmmFit fit = fit_gmm(sample(t, 60000, 1), options(3));
  EXPECT_TRUE(fit.converged);
  expect_recovers(fit, t, false);
}

TEST(Gmm, RecoversDiagonalCovarianceMixture) {
  Truth t = three_blobs();
  for (auto& c : t.covs) c = MatrixXd(c.diagonal().asDiagonal());
  GmmFit fit = fit_gmm(sample(t, 60000, 2), options(3, CovarianceType::diag));
  EXPECT_TRUE(fit.converged);
  expect_recovers(fit, t, true);
  for (const MatrixXd& c : fit.model.covariances()) EXPECT_EQ(c(0, 1), 0.0);
}

TEST(Gmm, FullBeatsDiagonalOnCorrelatedData) {
  Truth t = three_blobs();
  MatrixXd x = sample(t, 20000, 3);
  GmmFit full = fit_gmm(x, options(3));
  GmmFit diag = fit_gmm(x, options(3, CovarianceType::diag));
  // The diagonal fit still finds the blobs: its variances are the true ones.
  expect_recovers(diag, t, true);
  EXPECT_GT(full.mean_log_likelihood, diag.mean_log_likelihood + 0.05);
  EXPECT_EQ(diag.model.n_parameters(), 3 * 2 + 3 * 2 + 2);
  EXPECT_EQ(full.model.n_parameters(), 3 * 3 + 3 * 2 + 2);
}

TEST(Gmm, SameSeedIsBitIdenticalWhateverTheThreadCount) {
  Truth t = three_blobs();
  MatrixXd x = sample(t, 50000, 4);  // several row chunks
  GmmOptions o = options(3);
  o.tol = 1e-8;
  int threads = omp_get_max_threads();
  GmmFit a = fit_gmm(x, o);
  omp_set_num_threads(1);
  GmmFit b = fit_gmm(x, o);
  omp_set_num_threads(std::max(2, threads));
  GmmFit c = fit_gmm(x, o);
  omp_set_num_threads(threads);
  for (const GmmFit* other : {&b, &c}) {
    EXPECT_EQ(a.mean_log_likelihood, other->mean_log_likelihood);
    EXPECT_EQ(a.n_iter, other->n_iter);
    EXPECT_EQ(a.model.weights(), other->model.weights());
    EXPECT_EQ(a.model.means(), other->model.means());
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(a.model.covariances()[size_t(k)], other->model.covariances()[size_t(k)]);
  }
  o.seed = 8;  // and the seed matters: another seed draws other k-means++ centers
  EXPECT_NE(kmeans_plusplus(x, 3, *std::make_unique<SeedStream>(7)),
            kmeans_plusplus(x, 3, *std::make_unique<SeedStream>(8)));
}

TEST(Gmm, LogDensityMatchesThePlainFormula) {
  Truth t = three_blobs();
  MatrixXd x = sample(t, 3000, 5);
  for (auto type : {CovarianceType::full, CovarianceType::diag}) {
    GmmFit fit = fit_gmm(x, options(3, type));
    GmmScores s = score_gmm(fit.model, x);
    for (Eigen::Index i = 0; i < x.rows(); i += 7)
      ASSERT_NEAR(s.log_density(i), reference_log_density(fit.model, x.row(i).transpose()), 1e-10)
          << "row " << i;
    EXPECT_NEAR(s.log_density.mean(), fit.mean_log_likelihood, 1e-12);
    EXPECT_NEAR(mean_log_likelihood(fit.model, x), fit.mean_log_likelihood, 1e-12);
  }
}

TEST(Gmm, BicPicksTheTrueNumberOfComponents) {
  Truth t = three_blobs();
  MatrixXd x = sample(t, 6000, 6);
  std::vector<GmmFit> fits = fit_gmm_range(x, options(1), 1, 6);
  ASSERT_EQ(fits.size(), 6u);
  EXPECT_EQ(fits[choose_by_bic(fits)].model.n_components(), 3);
  EXPECT_DOUBLE_EQ(fits[2].bic, bic(fits[2].model, fits[2].mean_log_likelihood, x.rows()));
}

TEST(Gmm, OutlierScoresLowAndNamesThePerturbedFeature) {
  Truth t;
  t.weights = VectorXd::Constant(2, 0.5);
  t.means = MatrixXd(2, 3);
  t.means << 0, 0, 0, 8, 8, 8;
  MatrixXd c(3, 3);
  c << 1.0, 0.8, 0.5, 0.8, 1.0, 0.7, 0.5, 0.7, 1.0;  // strongly correlated features
  t.covs = {c, c};
  MatrixXd x = sample(t, 20000, 9);
  GmmFit fit = fit_gmm(x, options(2));
  for (int feature = 0; feature < 3; ++feature) {
    MatrixXd probe = x.topRows(500);
    probe(0, feature) += 6.0;  // 6 sigma along one feature, the others unchanged
    GmmScores s = score_gmm(fit.model, probe);
    double lowest_inlier = s.component_log_density.tail(499).minCoeff();
    EXPECT_LT(s.component_log_density(0), lowest_inlier - 5.0) << "feature " << feature;
    Eigen::Index top;
    s.contributions.row(0).maxCoeff(&top);
    EXPECT_EQ(top, feature);
  }
}

TEST(Gmm, JsonRoundTripScoresIdentically) {
  Truth t = three_blobs();
  MatrixXd x = sample(t, 5000, 10);
  for (auto type : {CovarianceType::full, CovarianceType::diag}) {
    GmmFit fit = fit_gmm(x, options(3, type));
    auto path = std::filesystem::temp_directory_path() / "eacgm_test_gmm_model.json";
    save_model(path.string(), fit, options(3, type), x.rows(), {"a", "b"});
    std::vector<std::string> names;
    GaussianMixture loaded = load_model(path.string(), &names);
    std::filesystem::remove(path);
    EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(loaded.covariance_type(), type);
    GmmScores a = score_gmm(fit.model, x), b = score_gmm(loaded, x);
    EXPECT_EQ(a.log_density, b.log_density);
    EXPECT_EQ(a.component, b.component);
    EXPECT_EQ(a.component_log_density, b.component_log_density);
    EXPECT_EQ(a.contributions, b.contributions);
  }
}

TEST(Gmm, MalformedModelIsAClearError) {
  nlohmann::json j = model_to_json(fit_gmm(sample(three_blobs(), 300, 11), options(3)).model, {});
  j["means"].erase(0);
  try {
    model_from_json(j, nullptr);
    FAIL() << "no error";
  } catch (const eacgm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'means' must be an array of 3 rows"), std::string::npos)
        << e.what();
  }
}

// Values a fitted model never holds are refused when loaded: a weight of 0 once gave every
// sample a NaN density (found by fuzz/fuzz_gmm_model), and non-finite means or covariances
// would too.
TEST(Gmm, ModelWithImpossibleValuesIsRefused) {
  nlohmann::json good = model_to_json(fit_gmm(sample(three_blobs(), 300, 11), options(3)).model, {});
  EXPECT_NO_THROW(model_from_json(good, nullptr));
  auto refused = [&](const std::function<void(nlohmann::json&)>& spoil, const char* says) {
    nlohmann::json j = good;
    spoil(j);
    try {
      model_from_json(j, nullptr);
      ADD_FAILURE() << "no error for " << says;
    } catch (const eacgm::Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused([](nlohmann::json& j) { j["weights"][0] = 0.0; }, "'weights' must be numbers in (0, 1]");
  refused([](nlohmann::json& j) { j["weights"][0] = -0.5; }, "'weights' must be numbers in (0, 1]");
  refused([](nlohmann::json& j) { j["weights"][0] = 0.9; }, "'weights' must sum to 1");
  refused([](nlohmann::json& j) { j["means"][1][0] = std::numeric_limits<double>::infinity(); }, "'means' must be finite");
  refused([](nlohmann::json& j) { j["covariances"][2][0][0] = std::nan(""); },
          "'covariances' must be finite");
  // a count that is no int (converting 1.1e37 to int was undefined behaviour, also fuzz-found)
  refused([](nlohmann::json& j) { j["n_components"] = 1.1e37; },
          "'n_components' must be a whole number from 1 to 1000");
  refused([](nlohmann::json& j) { j["n_features"] = 2.5; }, "'n_features' must be a whole number");
  refused([](nlohmann::json& j) { j["version"] = 1e300; }, "model version 1e+300 is not supported");
}

TEST(Gmm, TooFewRowsForKIsAnError) {
  MatrixXd x = MatrixXd::Random(3, 2);
  try {
    fit_gmm(x, options(4));
    FAIL() << "no error";
  } catch (const eacgm::Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_NE(std::string(e.what()).find("3 rows are too few for 4 components"), std::string::npos);
  }
}

TEST(Gmm, RangeStopsAtTheRowCountAndFailsBelowIt) {
  MatrixXd x = sample(three_blobs(), 5, 13);
  EXPECT_EQ(fit_gmm_range(x, options(1), 4, 9).size(), 2u);  // K = 4 and 5
  EXPECT_THROW(fit_gmm_range(x, options(1), 6, 9), eacgm::Error);
}

TEST(Gmm, ConstantFeatureStaysPositiveDefiniteThroughRegularisation) {
  MatrixXd x = sample(three_blobs(), 3000, 12);
  MatrixXd with_constant(x.rows(), 3);
  with_constant << x, MatrixXd::Constant(x.rows(), 1, 5.0);
  GmmFit fit = fit_gmm(with_constant, options(3));
  EXPECT_TRUE(std::isfinite(fit.mean_log_likelihood));
  for (const MatrixXd& c : fit.model.covariances()) EXPECT_NEAR(c(2, 2), 1e-6, 1e-9);
  GmmOptions no_reg = options(3);
  no_reg.reg_covar = 0;
  EXPECT_THROW(fit_gmm(with_constant, no_reg), eacgm::Error);
}
