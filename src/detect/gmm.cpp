// EM for Gaussian mixtures: one fused pass per iteration computes the E-step and the M-step's
// sufficient statistics block by block, so the data is read once per iteration, from cache.
#include "detect/gmm.h"

#include <Eigen/Cholesky>
#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>

#include "detect/gmm_estep.h"
#include "detect/gmm_kernels.h"
#include "detect/kmeans.h"
#include "util/error.h"

namespace eacgm::detect {

using Eigen::Index;
using kernels::kBlock;

const char* to_string(CovarianceType type) {
  return type == CovarianceType::full ? "full" : "diag";
}

GaussianMixture::GaussianMixture(CovarianceType type, Eigen::VectorXd weights,
                                 Eigen::MatrixXd means, std::vector<Eigen::MatrixXd> covariances)
    : type_(type),
      weights_(std::move(weights)),
      means_(std::move(means)),
      covariances_(std::move(covariances)) {
  Index k = weights_.size(), d = means_.cols();
  if (k == 0 || means_.rows() != k || Index(covariances_.size()) != k)
    fail(
        "a mixture needs as many means and covariances as weights (got {} weights, {} means, "
        "{} covariances)",
        k, means_.rows(), covariances_.size());
  for (Index c = 0; c < k; ++c) {
    const Eigen::MatrixXd& cov = covariances_[size_t(c)];
    if (cov.rows() != d || cov.cols() != d)
      fail("component {}'s covariance is {}x{}, expected {}x{}", c, cov.rows(), cov.cols(), d, d);
    std::vector<double> w(size_t(type == CovarianceType::full ? d * d : d), 0.0);
    double half_log_det = 0.0;
    const char* hint =
        "the data may have a constant feature or too few distinct rows for this "
        "many components; raise --reg-covar (e.g. to 1e-4) or lower -k";
    if (type == CovarianceType::full) {
      Eigen::LLT<Eigen::MatrixXd> llt(cov);
      if (llt.info() != Eigen::Success ||
          !(llt.matrixL().toDenseMatrix().diagonal().minCoeff() > 0))
        fail("component {}'s covariance is not positive definite ({})", c, hint);
      // W = L^-1, so |W (x - mu)|^2 is the Mahalanobis distance and -log det L is half the
      // log-determinant of the precision.
      Eigen::MatrixXd inv = llt.matrixL().solve(Eigen::MatrixXd::Identity(d, d));
      for (Index j = 0; j < d; ++j) {
        half_log_det -= std::log(llt.matrixLLT()(j, j));
        for (Index l = 0; l <= j; ++l) w[size_t(j * d + l)] = inv(j, l);
      }
    } else {
      for (Index j = 0; j < d; ++j) {
        if (!(cov(j, j) > 0))
          fail("component {}'s variance of feature {} is not positive ({})", c, j, hint);
        w[size_t(j)] = 1.0 / cov(j, j);
        half_log_det -= 0.5 * std::log(cov(j, j));
      }
    }
    for (Index j = 0; j < d; ++j) mean_rows_.push_back(means_(c, j));
    whitening_.push_back(std::move(w));
    half_log_det_precision_.push_back(half_log_det);
  }
}

int GaussianMixture::n_parameters() const {
  int k = n_components(), d = n_features();
  int cov = type_ == CovarianceType::full ? k * d * (d + 1) / 2 : k * d;
  return cov + k * d + k - 1;
}

BlockScratch::BlockScratch(int n_components, int n_features)
    : dx(size_t(n_components * n_features * kBlock)),
      u(size_t(n_features * kBlock)),
      maha(size_t(kBlock)),
      logp(size_t(n_components * kBlock)),
      lse(size_t(kBlock)) {}

void weighted_log_probs(const GaussianMixture& model, const double* x_block, std::ptrdiff_t ld,
                        int rows, BlockScratch& s) {
  int d = model.n_features(), padded = kernels::padded_rows(rows);
  double log_2pi = std::log(2.0 * std::numbers::pi);
  for (int k = 0; k < model.n_components(); ++k) {
    double* dx = s.dx_of(k, d);
    kernels::center_block(x_block, ld, rows, d, model.mean_data(k), dx);
    if (model.covariance_type() == CovarianceType::full)
      kernels::full_mahalanobis(dx, rows, d, model.whitening(k).data(), s.maha.data());
    else
      kernels::diag_mahalanobis(dx, rows, d, model.whitening(k).data(), s.maha.data());
    double constant =
        std::log(model.weights()(k)) + model.half_log_det_precision(k) - 0.5 * d * log_2pi;
    double* out = s.logp.data() + size_t(k) * kBlock;
    for (int i = 0; i < padded; ++i) out[i] = constant - 0.5 * s.maha[size_t(i)];
  }
}

namespace {

// Sums over all samples, laid out flat: [log-likelihood, n_k (K), s1 (K x d), s2 (K x m)]
// where s1 and s2 are first and second moments of x - shift_k weighted by responsibility,
// and m is d*d (lower triangle used) for full covariance or d for diag.
struct Moments {
  Moments(int components, int features, CovarianceType type)
      : k(components),
        d(features),
        m(type == CovarianceType::full ? features * features : features),
        flat(size(), 0.0) {}
  size_t size() const { return size_t(1 + k + k * d + k * m); }
  double* nk() { return flat.data() + 1; }
  double* s1(int c) { return flat.data() + 1 + k + c * d; }
  double* s2(int c) { return flat.data() + 1 + k + k * d + c * m; }
  int k, d, m;
  std::vector<double> flat;
};

// Work is split into a fixed number of slots of consecutive blocks, whatever the thread count;
// each slot sums its blocks in order and the slots are added in order, so a fit is the same
// bit for bit on 1 or 16 threads. 16 slots balance well on up to ~8 threads and keep the
// per-slot moments (K x d x d each) small.
constexpr Index kSlots = 16;

// One pass over x. Responsibilities come from `model` (E-step) or, when `labels` is given, are
// the one-hot hard assignments of the k-means++ seeding. With `accumulate`, moments are summed
// too, around the model's means (E-step) or the seeds `centers` (labels).
Moments em_pass(const Eigen::MatrixXd& x, const GaussianMixture* model,
                const std::vector<int>* labels, const Eigen::MatrixXd& centers, CovarianceType type,
                bool accumulate) {
  int k = int(centers.rows()), d = int(x.cols());
  Index n = x.rows(), blocks = (n + kBlock - 1) / kBlock;
  Moments total(k, d, type);
  size_t stride = accumulate ? total.size() : 1;
  std::vector<double> per_slot(size_t(kSlots) * stride, 0.0);
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> center_rows = centers;
#pragma omp parallel if (blocks > 1)  // one block: one thread's work
  {
    BlockScratch s(k, d);
    Moments part(k, d, type);
#pragma omp for schedule(dynamic, 1)
    for (Index slot = 0; slot < kSlots; ++slot) {
      std::fill(part.flat.begin(), part.flat.end(), 0.0);
      for (Index b = slot * blocks / kSlots; b < (slot + 1) * blocks / kSlots; ++b) {
        Index a = b * kBlock;
        int rows = int(std::min<Index>(kBlock, n - a));
        const double* xb = x.data() + a;
        if (labels) {
          for (int c = 0; c < k; ++c) {
            for (int i = 0; i < kBlock; ++i)
              s.logp[size_t(c * kBlock + i)] = i < rows && (*labels)[size_t(a + i)] == c;
            kernels::center_block(xb, n, rows, d, center_rows.row(c).data(), s.dx_of(c, d));
          }
        } else {
          weighted_log_probs(*model, xb, n, rows, s);
          kernels::normalize_log_probs(s.logp.data(), k, rows, s.lse.data());
          for (int i = 0; i < rows; ++i) part.flat[0] += s.lse[size_t(i)];
        }
        if (!accumulate) continue;
        for (int c = 0; c < k; ++c) {
          const double* r = s.logp.data() + size_t(c) * kBlock;
          for (int i = 0; i < rows; ++i) part.nk()[c] += r[i];
          // dx_of(c) holds x minus the mean (or seed) of c already, from the step above.
          if (type == CovarianceType::full)
            kernels::full_moments(s.dx_of(c, d), r, rows, d, s.u.data(), part.s1(c), part.s2(c));
          else
            kernels::diag_moments(s.dx_of(c, d), r, rows, d, part.s1(c), part.s2(c));
        }
      }
      std::copy_n(part.flat.begin(), stride, per_slot.begin() + Index(size_t(slot) * stride));
    }
  }
  for (Index slot = 0; slot < kSlots; ++slot)
    for (size_t v = 0; v < stride; ++v) total.flat[v] += per_slot[size_t(slot) * stride + v];
  return total;
}

// New parameters from the moments: mean = shift + s1/n_k, covariance = s2/n_k - delta delta^T
// + reg_covar I. Moments around the previous mean avoid the cancellation of E[xx^T] - mu mu^T.
GaussianMixture m_step(Moments& mo, const Eigen::MatrixXd& shifts, CovarianceType type, Index n,
                       double reg_covar) {
  int k = mo.k, d = mo.d;
  Eigen::VectorXd weights(k);
  Eigen::MatrixXd means(k, d);
  std::vector<Eigen::MatrixXd> covs;
  for (int c = 0; c < k; ++c) {
    // Like scikit-learn: a component that lost all its samples keeps a tiny weight, its mean
    // stays put and its covariance becomes reg_covar I, instead of dividing by zero.
    double nk = mo.nk()[c] + 10 * std::numeric_limits<double>::epsilon();
    weights(c) = nk / double(n);
    Eigen::Map<const Eigen::VectorXd> s1(mo.s1(c), d);
    Eigen::VectorXd delta = s1 / nk;
    means.row(c) = shifts.row(c) + delta.transpose();
    Eigen::MatrixXd cov = Eigen::MatrixXd::Zero(d, d);
    for (int j = 0; j < d; ++j) {
      if (type == CovarianceType::full) {
        for (int l = 0; l <= j; ++l)
          cov(j, l) = cov(l, j) = mo.s2(c)[j * d + l] / nk - delta(j) * delta(l);
      } else {
        cov(j, j) = std::max(0.0, mo.s2(c)[j] / nk - delta(j) * delta(j));
      }
      cov(j, j) += reg_covar;
    }
    covs.push_back(std::move(cov));
  }
  weights /= weights.sum();
  return GaussianMixture(type, std::move(weights), std::move(means), std::move(covs));
}

void check_options(const Eigen::MatrixXd& x, const GmmOptions& o) {
  if (x.cols() == 0 || x.rows() == 0) fail("no data to fit (give at least one row and column)");
  if (o.n_components < 1)
    throw UsageError(fmt::format("-k must be at least 1, not {}", o.n_components));
  if (x.rows() < o.n_components)
    fail(
        "{} rows are too few for {} components (need at least one row per component; lower -k "
        "or give more data)",
        x.rows(), o.n_components);
  if (o.max_iter < 1) throw UsageError("--max-iter must be at least 1");
  if (o.n_init < 1) throw UsageError("--n-init must be at least 1");
  if (!(o.tol >= 0)) throw UsageError("--tol must be a number >= 0");
  if (!(o.reg_covar >= 0)) throw UsageError("--reg-covar must be a number >= 0");
}

}  // namespace

double mean_log_likelihood(const GaussianMixture& model, const Eigen::MatrixXd& x) {
  if (x.cols() != model.n_features())
    fail(
        "the data has {} columns but the model has {} features (score data shaped like the "
        "training data)",
        x.cols(), model.n_features());
  Moments m = em_pass(x, &model, nullptr, model.means(), model.covariance_type(), false);
  return m.flat[0] / double(x.rows());
}

double bic(const GaussianMixture& model, double mean_ll, Index n) {
  return -2.0 * mean_ll * double(n) + model.n_parameters() * std::log(double(n));
}

GmmFit fit_gmm(const Eigen::MatrixXd& x, const GmmOptions& o) {
  check_options(x, o);
  auto start = std::chrono::steady_clock::now();
  Index n = x.rows();
  SeedStream rng(o.seed);
  GmmFit best;
  best.mean_log_likelihood = -std::numeric_limits<double>::infinity();
  for (int init = 0; init < o.n_init; ++init) {
    Eigen::MatrixXd centers = kmeans_plusplus(x, o.n_components, rng);
    std::vector<int> labels = nearest_center(x, centers);
    Moments seeded = em_pass(x, nullptr, &labels, centers, o.covariance, true);
    GaussianMixture model = m_step(seeded, centers, o.covariance, n, o.reg_covar);
    double previous = -std::numeric_limits<double>::infinity();
    int iter = 0;
    bool converged = false;
    while (iter < o.max_iter && !converged) {
      ++iter;
      Moments mo = em_pass(x, &model, nullptr, model.means(), o.covariance, true);
      double ll = mo.flat[0] / double(n);
      model = m_step(mo, model.means(), o.covariance, n, o.reg_covar);
      converged = std::abs(ll - previous) < o.tol;
      previous = ll;
    }
    double ll = mean_log_likelihood(model, x);
    if (ll > best.mean_log_likelihood) {
      best.model = std::move(model);
      best.mean_log_likelihood = ll;
      best.n_iter = iter;
      best.converged = converged;
    }
  }
  best.bic = bic(best.model, best.mean_log_likelihood, n);
  best.fit_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return best;
}

std::vector<GmmFit> fit_gmm_range(const Eigen::MatrixXd& x, GmmOptions options, int k_min,
                                  int k_max) {
  if (k_min < 1 || k_max < k_min)
    throw UsageError(fmt::format("bad range {}..{} for -k (give LOW..HIGH with 1 <= LOW <= HIGH)",
                                 k_min, k_max));
  options.n_components = k_min;
  check_options(x, options);  // too few rows even for the smallest K is an error
  std::vector<GmmFit> fits;
  // Larger K than rows cannot be fitted; the range stops there rather than failing.
  for (int k = k_min; k <= std::min<Index>(k_max, x.rows()); ++k) {
    options.n_components = k;
    fits.push_back(fit_gmm(x, options));
  }
  return fits;
}

size_t choose_by_bic(const std::vector<GmmFit>& fits) {
  size_t best = 0;
  for (size_t i = 1; i < fits.size(); ++i)
    if (fits[i].bic < fits[best].bic) best = i;
  return best;
}

}  // namespace eacgm::detect
