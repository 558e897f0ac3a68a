// The GMM's hot loops over one block of samples, compiled for AVX2/FMA and AVX-512 with a plain
// x86-64 fallback chosen at run time (so one binary runs on any x86-64 machine).
#pragma once
#include <cstddef>

namespace eacgm::detect::kernels {

// Rows per unit of parallel work. Partial sums are kept per chunk and added in chunk order, so
// results do not depend on how many threads ran or which thread took which chunk.
inline constexpr std::ptrdiff_t kChunkRows = 4096;

// Samples per block: one block's scratch (features x kBlock doubles) stays in L1/L2.
inline constexpr int kBlock = 256;

// Rows a kernel processes for a block of `rows` samples: rounded up to the SIMD lane group.
// Padded rows must have zero responsibility so they add nothing to the sums.
inline int padded_rows(int rows) { return (rows + 7) & ~7; }

// dx[j*kBlock + i] = x[j*ld + i] - shift[j] for i < rows, 0 for rows <= i < padded_rows(rows).
// x points at the block's first sample of feature 0 in a column-major matrix with stride ld.
void center_block(const double* x, std::ptrdiff_t ld, int rows, int d, const double* shift,
                  double* dx);

// maha[i] = |W dx_i|^2 where W (row-major d x d, lower triangular) is the inverse Cholesky
// factor of a covariance: the squared Mahalanobis distance.
void full_mahalanobis(const double* dx, int rows, int d, const double* w, double* maha);

// maha[i] = sum_j dx_ij^2 * precision[j]: the diagonal-covariance Mahalanobis distance.
void diag_mahalanobis(const double* dx, int rows, int d, const double* precision, double* maha);

// Over the block's samples with responsibilities r: s1[j] += sum r dx_j, and
// s2[j*d + l] += sum r dx_j dx_l for l <= j (full) or s2[j] += sum r dx_j^2 (diag).
// u is scratch of d * kBlock doubles.
void full_moments(const double* dx, const double* r, int rows, int d, double* u, double* s1,
                  double* s2);
void diag_moments(const double* dx, const double* r, int rows, int d, double* s1, double* s2);

// In place over a component-major K x kBlock array of log-probabilities for `rows` samples:
// lse[i] = log sum_k exp(logp[k][i]); logp[k][i] becomes the responsibility exp(logp - lse).
// Padded rows up to padded_rows(rows) get responsibility 0.
void normalize_log_probs(double* logp, int k, int rows, double* lse);

}  // namespace eacgm::detect::kernels
