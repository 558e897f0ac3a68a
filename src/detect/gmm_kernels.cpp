// The GMM's hot loops over lane groups of 8 samples (GCC generic vectors, no intrinsics);
// target_clones builds them for AVX-512, AVX2/FMA and baseline x86-64 and picks one at load time.
#include "detect/gmm_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define EACGM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EACGM_CLONES
#endif

namespace eacgm::detect::kernels {
namespace {

constexpr int kLanes = 8;

// These helpers take and return Lanes but are always inlined into the clones, so the ABI of
// passing vectors between differently compiled functions (what -Wpsabi warns of) never arises.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// Eight doubles as one value: GCC's generic vectors become one AVX-512 register, two AVX2 or
// four SSE2 registers, whichever the clone targets, without intrinsics.
typedef double Lanes __attribute__((vector_size(kLanes * sizeof(double))));

inline Lanes load(const double* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// exp(x) for x <= 0, vectorisable: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2),
// e^r by its Taylor series to r^13 (error < 2e-16 relative), 2^n built in the exponent bits.
// Below -700 the result is 0: such responsibilities are far below double precision anyway.
inline double exp_nonpositive(double x) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 0.693147180369123816490;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  double xc = x < -700.0 ? -700.0 : x;
  double t = xc * kLog2e + kRound;
  double n = t - kRound;
  double r = (xc - n * kLn2Hi) - n * kLn2Lo;
  // Horner, written out: a loop here keeps the compiler from vectorising the caller.
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  int64_t bits = std::bit_cast<int64_t>(t) - std::bit_cast<int64_t>(kRound);
  double scale = std::bit_cast<double>((bits + 1023) << 52);
  double keep = x < -700.0 ? 0.0 : 1.0;  // a select of constants, so it vectorises
  return p * scale * keep;
}

}  // namespace

EACGM_CLONES
void center_block(const double* x, std::ptrdiff_t ld, int rows, int d, const double* shift,
                  double* dx) {
  int padded = padded_rows(rows);
  for (int j = 0; j < d; ++j) {
    const double* xj = x + j * ld;
    double* out = dx + j * kBlock;
    double s = shift[j];
    for (int i = 0; i < rows; ++i) out[i] = xj[i] - s;
    for (int i = rows; i < padded; ++i) out[i] = 0.0;
  }
}

EACGM_CLONES
void full_mahalanobis(const double* dx, int rows, int d, const double* w, double* maha) {
  int padded = padded_rows(rows);
  // Four lane groups (32 samples) at a time: each coefficient of W, broadcast once, feeds four
  // independent multiply-add chains, enough to hide the FMA latency. Row j of W dx needs
  // features 0..j only (W is lower triangular).
  int i0 = 0;
  for (; i0 + 4 * kLanes <= padded; i0 += 4 * kLanes) {
    Lanes m[4] = {};
    for (int j = 0; j < d; ++j) {
      Lanes a[4] = {};
      const double* wj = w + j * d;
      for (int l = 0; l <= j; ++l) {
        const double* dl = dx + l * kBlock + i0;
        for (int g = 0; g < 4; ++g) a[g] += wj[l] * load(dl + g * kLanes);
      }
      for (int g = 0; g < 4; ++g) m[g] += a[g] * a[g];
    }
    std::memcpy(maha + i0, m, sizeof m);
  }
  for (; i0 < padded; i0 += kLanes) {
    Lanes m0 = {};
    for (int j = 0; j < d; ++j) {
      Lanes a0 = {};
      for (int l = 0; l <= j; ++l) a0 += w[j * d + l] * load(dx + l * kBlock + i0);
      m0 += a0 * a0;
    }
    std::memcpy(maha + i0, &m0, sizeof m0);
  }
}

EACGM_CLONES
void diag_mahalanobis(const double* dx, int rows, int d, const double* precision, double* maha) {
  int padded = padded_rows(rows);
  for (int i = 0; i < padded; ++i) maha[i] = 0.0;
  for (int j = 0; j < d; ++j) {
    const double* dj = dx + j * kBlock;
    double p = precision[j];
    for (int i = 0; i < padded; ++i) maha[i] += dj[i] * dj[i] * p;
  }
}

EACGM_CLONES
void full_moments(const double* dx, const double* r, int rows, int d, double* u, double* s1,
                  double* s2) {
  int padded = padded_rows(rows);
  for (int j = 0; j < d; ++j) {
    const double* dj = dx + j * kBlock;
    double* uj = u + j * kBlock;
    double acc[kLanes] = {};
    for (int i0 = 0; i0 < padded; i0 += kLanes)
      for (int t = 0; t < kLanes; ++t) {
        uj[i0 + t] = r[i0 + t] * dj[i0 + t];
        acc[t] += uj[i0 + t];
      }
    for (int t = 0; t < kLanes; ++t) s1[j] += acc[t];
  }
  // The lower triangle of sum r dx dx^T in 4 x 4 tiles: per lane group, 8 loads feed 16
  // multiply-adds into lane-wise partial sums held in registers, reduced once per tile.
  // Features past d read as zeros, so d need not be a multiple of 4.
  static const double zeros[kBlock] = {};
  auto row = [&](const double* base, int j) { return j < d ? base + j * kBlock : zeros; };
  for (int j0 = 0; j0 < d; j0 += 4) {
    const double* uj[4] = {row(u, j0), row(u, j0 + 1), row(u, j0 + 2), row(u, j0 + 3)};
    for (int l0 = 0; l0 <= j0; l0 += 4) {
      const double* dl[4] = {row(dx, l0), row(dx, l0 + 1), row(dx, l0 + 2), row(dx, l0 + 3)};
      Lanes acc[4][4] = {};
      for (int i0 = 0; i0 < padded; i0 += kLanes) {
        Lanes uv[4] = {load(uj[0] + i0), load(uj[1] + i0), load(uj[2] + i0), load(uj[3] + i0)};
        for (int b = 0; b < 4; ++b) {
          Lanes dv = load(dl[b] + i0);
          for (int a = 0; a < 4; ++a) acc[a][b] += uv[a] * dv;
        }
      }
      for (int a = 0; a < 4 && j0 + a < d; ++a)
        for (int b = 0; b < 4 && l0 + b <= j0 + a; ++b)
          for (int t = 0; t < kLanes; ++t) s2[(j0 + a) * d + l0 + b] += acc[a][b][t];
    }
  }
}

EACGM_CLONES
void diag_moments(const double* dx, const double* r, int rows, int d, double* s1, double* s2) {
  int padded = padded_rows(rows);
  for (int j = 0; j < d; ++j) {
    const double* dj = dx + j * kBlock;
    double a1[kLanes] = {}, a2[kLanes] = {};
    for (int i0 = 0; i0 < padded; i0 += kLanes)
      for (int t = 0; t < kLanes; ++t) {
        double v = r[i0 + t] * dj[i0 + t];
        a1[t] += v;
        a2[t] += v * dj[i0 + t];
      }
    for (int t = 0; t < kLanes; ++t) {
      s1[j] += a1[t];
      s2[j] += a2[t];
    }
  }
}

EACGM_CLONES
void normalize_log_probs(double* logp, int k, int rows, double* lse) {
  int padded = padded_rows(rows);
  double top[kBlock], sum[kBlock];
  for (int i = 0; i < padded; ++i) top[i] = logp[i];
  for (int c = 1; c < k; ++c)
    for (int i = 0; i < padded; ++i) {
      double v = logp[c * kBlock + i];
      top[i] = v > top[i] ? v : top[i];
    }
  for (int i = 0; i < padded; ++i) sum[i] = 0.0;
  for (int c = 0; c < k; ++c) {
    double* lc = logp + c * kBlock;
    for (int i = 0; i < padded; ++i) {
      lc[i] = exp_nonpositive(lc[i] - top[i]);
      sum[i] += lc[i];
    }
  }
  // One log per sample (not per component): scalar is cheap enough here.
  for (int i = 0; i < rows; ++i) {
    lse[i] = top[i] + std::log(sum[i]);
    sum[i] = 1.0 / sum[i];
  }
  for (int i = rows; i < padded; ++i) sum[i] = 0.0;
  for (int c = 0; c < k; ++c) {
    double* lc = logp + c * kBlock;
    for (int i = 0; i < padded; ++i) lc[i] *= sum[i];
  }
}

}  // namespace eacgm::detect::kernels
