// Scoring samples under a fitted mixture: log-density, most likely component, and which
// features pull a sample away from that component (see GmmScores in gmm.h for the definition).
#ifdef _OPENMP
#include <omp.h>
#endif

#include <Eigen/Core>

#include "detect/gmm.h"
#include "detect/gmm_estep.h"
#include "detect/gmm_kernels.h"
#include "util/error.h"

namespace eacgm::detect {

using Eigen::Index;
using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

// Diagonal of each component's precision P = W^T W (full) or the precisions themselves (diag).
std::vector<Eigen::VectorXd> precision_diagonals(const GaussianMixture& model) {
  std::vector<Eigen::VectorXd> out;
  int d = model.n_features();
  for (int k = 0; k < model.n_components(); ++k) {
    const double* w = model.whitening(k).data();
    if (model.covariance_type() == CovarianceType::full)
      out.push_back(Eigen::Map<const RowMajor>(w, d, d).colwise().squaredNorm().transpose());
    else
      out.push_back(Eigen::Map<const Eigen::VectorXd>(w, d));
  }
  return out;
}

}  // namespace

GmmScores score_gmm(const GaussianMixture& model, const Eigen::MatrixXd& x) {
  int k = model.n_components(), d = model.n_features();
  if (x.cols() != d)
    fail(
        "the data has {} columns but the model has {} features (score data shaped like the "
        "training data)",
        x.cols(), d);
  Index n = x.rows();
  GmmScores out;
  out.log_density.resize(n);
  out.component.resize(n);
  out.component_log_density.resize(n);
  out.contributions.resize(n, d);
  std::vector<Eigen::VectorXd> p_diag = precision_diagonals(model);
  Index chunks = (n + kernels::kChunkRows - 1) / kernels::kChunkRows;
  struct Scratch {
    BlockScratch s;
    Eigen::VectorXd e, z, v;
    Scratch(int k, int d) : s(k, d), e(d), z(d), v(d) {}
  };
  auto score_chunk = [&](Index ch, Scratch& scratch) {
    BlockScratch& s = scratch.s;
    Eigen::VectorXd &e = scratch.e, &z = scratch.z, &v = scratch.v;
    Index end = std::min(n, (ch + 1) * kernels::kChunkRows);
    for (Index a = ch * kernels::kChunkRows; a < end; a += kernels::kBlock) {
      int rows = int(std::min<Index>(kernels::kBlock, end - a));
      weighted_log_probs(model, x.data() + a, n, rows, s);
      for (int i = 0; i < rows; ++i) {
        int best = 0;
        for (int c = 1; c < k; ++c)
          if (s.logp[size_t(c * kernels::kBlock + i)] >
              s.logp[size_t(best * kernels::kBlock + i)])
            best = c;
        out.component(a + i) = best;
        out.component_log_density(a + i) =
            s.logp[size_t(best * kernels::kBlock + i)] - std::log(model.weights()(best));
      }
      kernels::normalize_log_probs(s.logp.data(), k, rows, s.lse.data());
      for (int i = 0; i < rows; ++i) out.log_density(a + i) = s.lse[size_t(i)];
    }
    for (Index i = ch * kernels::kChunkRows; i < end; ++i) {
      int c = out.component(i);
      e = x.row(i).transpose() - model.means().row(c).transpose();
      if (model.covariance_type() == CovarianceType::full) {
        Eigen::Map<const RowMajor> w(model.whitening(c).data(), d, d);
        z.noalias() = w * e;
        v.noalias() = w.transpose() * z;  // P (x - mu)
        out.contributions.row(i) = (v.array().square() / p_diag[size_t(c)].array()).transpose();
      } else {
        out.contributions.row(i) = (e.array().square() * p_diag[size_t(c)].array()).transpose();
      }
    }
  };
  // One chunk, or no parallel regions wanted (the agent's threads score one at a time): no team
  // at all. A region of one thread still starts a team and wakes its barrier with a system
  // call, 4% of the agent's pipeline thread in a profile beside a training (session 59).
#ifdef _OPENMP
  const bool serial = chunks <= 1 || omp_get_max_active_levels() == 0;
#else
  const bool serial = true;  // (the fuzz targets' build has no OpenMP)
#endif
  if (serial) {
    Scratch scratch(k, d);
    for (Index ch = 0; ch < chunks; ++ch) score_chunk(ch, scratch);
    return out;
  }
#pragma omp parallel
  {
    Scratch scratch(k, d);
#pragma omp for schedule(static)
    for (Index ch = 0; ch < chunks; ++ch) score_chunk(ch, scratch);
  }
  return out;
}

}  // namespace eacgm::detect
