// Gaussian mixture models: EM fitting (full or diagonal covariance), BIC model choice,
// per-sample scoring with per-feature contributions, and JSON save/load.
#pragma once
#include <Eigen/Core>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace eacgm::detect {

enum class CovarianceType { full, diag };

// EM settings. The defaults and their meanings follow scikit-learn's GaussianMixture, so a fit
// can be compared with it setting for setting.
struct GmmOptions {
  int n_components = 1;
  CovarianceType covariance = CovarianceType::full;
  int max_iter = 100;       // EM iterations per initialisation
  double tol = 1e-3;        // converged when the mean log-likelihood changes by less than this
  int n_init = 1;           // initialisations; the one with the best log-likelihood is kept
  uint64_t seed = 0;        // k-means++ seeding; same seed, data and options: identical fit
  double reg_covar = 1e-6;  // added to every covariance diagonal, keeps them positive definite
};

// A fitted mixture. Covariances are d x d for both types (diagonal matrices for diag); the
// precomputed factors are derived from them, so a model loaded from JSON scores exactly as
// the one that was saved.
class GaussianMixture {
 public:
  GaussianMixture() = default;
  // Throws eacgm::Error when a covariance is not positive definite or the shapes disagree.
  GaussianMixture(CovarianceType type, Eigen::VectorXd weights, Eigen::MatrixXd means,
                  std::vector<Eigen::MatrixXd> covariances);

  CovarianceType covariance_type() const { return type_; }
  int n_components() const { return int(weights_.size()); }
  int n_features() const { return int(means_.cols()); }
  const Eigen::VectorXd& weights() const { return weights_; }
  const Eigen::MatrixXd& means() const { return means_; }  // K x d, one component per row
  const std::vector<Eigen::MatrixXd>& covariances() const { return covariances_; }
  // Free parameters, as BIC counts them.
  int n_parameters() const;

  // Inverse Cholesky factor W_k (lower triangular, row-major d x d, W Sigma W^T = I) for full
  // covariance; the d precisions 1/sigma_j^2 for diag. And -0.5 log det Sigma_k.
  const double* mean_data(int k) const {
    return mean_rows_.data() + size_t(k) * size_t(n_features());
  }
  const std::vector<double>& whitening(int k) const { return whitening_[size_t(k)]; }
  double half_log_det_precision(int k) const { return half_log_det_precision_[size_t(k)]; }

 private:
  CovarianceType type_ = CovarianceType::full;
  Eigen::VectorXd weights_;
  Eigen::MatrixXd means_;
  std::vector<Eigen::MatrixXd> covariances_;
  std::vector<double> mean_rows_;  // means_, row-major: what the kernels read
  std::vector<std::vector<double>> whitening_;
  std::vector<double> half_log_det_precision_;
};

struct GmmFit {
  GaussianMixture model;
  double mean_log_likelihood = 0;  // of the data under the returned model
  int n_iter = 0;                  // EM iterations of the kept initialisation
  bool converged = false;
  double bic = 0;
  double fit_seconds = 0;
};

// Fits by EM from k-means++ seeds. X is n x d, one sample per row. Uses every OpenMP thread;
// the result does not depend on the thread count (fixed slots of rows, summed in order).
// Throws eacgm::Error on too few rows for K or a covariance that is not positive definite.
GmmFit fit_gmm(const Eigen::MatrixXd& x, const GmmOptions& options);

// Fits every K in [k_min, k_max] (up to the number of rows) and returns them all, at least one;
// choose_by_bic picks the lowest BIC.
std::vector<GmmFit> fit_gmm_range(const Eigen::MatrixXd& x, GmmOptions options, int k_min,
                                  int k_max);
size_t choose_by_bic(const std::vector<GmmFit>& fits);

// Bayesian information criterion: -2 n mean_ll + n_parameters log n (lower is better).
double bic(const GaussianMixture& model, double mean_log_likelihood, Eigen::Index n);

// Per-sample scores. The component is the most likely one (largest weight x density); an
// event is anomalous when component_log_density, its log-density under that component
// alone, falls below a threshold calibrated on the training data.
//
// contributions(i, j) says how much feature j pulls sample i away from that component: the
// squared z-score of x_j against its distribution conditional on all the other features,
//   c_j = ((P (x - mu))_j)^2 / P_jj,   P = Sigma^-1 (the component's precision),
// because x_j - E[x_j | x_-j] = (P (x - mu))_j / P_jj and Var[x_j | x_-j] = 1 / P_jj.
// Unlike the whitened Cholesky residual (L^-1 (x - mu))_j^2 it does not depend on the order of
// the features, and a feature that is off on its own ranks above features correlated with it
// (|P_lj| / sqrt(P_ll) < sqrt(P_jj) for a positive definite P). For diagonal covariance it is
// the standardized residual (x_j - mu_j)^2 / sigma_j^2, and those sum to the Mahalanobis term.
// For full covariance they are a ranking, not an exact split of it.
struct GmmScores {
  Eigen::VectorXd log_density;            // log p(x) under the whole mixture
  Eigen::VectorXi component;              // most likely component
  Eigen::VectorXd component_log_density;  // log N(x | mu_k, Sigma_k) for that component
  Eigen::MatrixXd contributions;          // n x d, see above
};
GmmScores score_gmm(const GaussianMixture& model, const Eigen::MatrixXd& x);

// Mean log-likelihood of x under the model (the quantity EM maximises).
double mean_log_likelihood(const GaussianMixture& model, const Eigen::MatrixXd& x);

// JSON: {"format": "eacgm-gmm", "version": 1, "covariance_type", "n_components",
// "n_features", "feature_names", "weights", "means", "covariances", "fit": {...}}.
// Doubles are written so they read back bit for bit.
nlohmann::json model_to_json(const GaussianMixture& model,
                             const std::vector<std::string>& feature_names);
GaussianMixture model_from_json(const nlohmann::json& j, std::vector<std::string>* feature_names);
void save_model(const std::string& path, const GmmFit& fit, const GmmOptions& options,
                Eigen::Index n_samples, const std::vector<std::string>& feature_names);
GaussianMixture load_model(const std::string& path, std::vector<std::string>* feature_names);

const char* to_string(CovarianceType type);

}  // namespace eacgm::detect
