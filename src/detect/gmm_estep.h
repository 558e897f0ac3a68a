// Internal to the GMM: the E-step over one block of samples, shared by fitting and scoring.
#pragma once
#include <cstddef>

#include "detect/gmm.h"
#include "detect/gmm_kernels.h"

namespace eacgm::detect {

// Per-thread buffers for one block (kernels::kBlock samples).
struct BlockScratch {
  explicit BlockScratch(int n_components, int n_features);
  // x - mu_k of component k, feature-major (d rows of kBlock), kept for the M-step.
  double* dx_of(int k, int d) { return dx.data() + size_t(k) * size_t(d) * kernels::kBlock; }
  std::vector<double> dx, u, maha, logp, lse;
};

// logp[k * kBlock + i] = log w_k + log N(x_i | mu_k, Sigma_k) for the `rows` samples starting
// at x_block (column-major with stride ld); leaves x - mu_k in dx_of(k).
void weighted_log_probs(const GaussianMixture& model, const double* x_block, std::ptrdiff_t ld,
                        int rows, BlockScratch& s);

}  // namespace eacgm::detect
