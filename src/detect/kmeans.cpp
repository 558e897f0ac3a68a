// Greedy k-means++ seeding over row chunks in parallel, with sums taken in chunk order so the
// chosen centers depend only on the data and the seed.
#include "detect/kmeans.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "detect/gmm_kernels.h"

namespace eacgm::detect {
namespace {

using Eigen::Index;
using kernels::kChunkRows;

Index chunk_count(Index n) { return (n + kChunkRows - 1) / kChunkRows; }

// out[i - a] = |x_i - c|^2 for rows a <= i < b, one feature column at a time (contiguous).
void squared_distances(const Eigen::MatrixXd& x, Index a, Index b, const double* c, double* out) {
  for (Index i = a; i < b; ++i) out[i - a] = 0.0;
  for (Index j = 0; j < x.cols(); ++j) {
    const double* xj = x.col(j).data();
    double cj = c[j];
    for (Index i = a; i < b; ++i) {
      double v = xj[i] - cj;
      out[i - a] += v * v;
    }
  }
}

// For each candidate row t: d2[t][i] = |x_i - x_candidate|^2 for every row i, and returns
// sum_i min(closest_i, d2[t][i]), the potential if that candidate became a center. One pass
// over x serves all candidates; sums are per chunk, then added in chunk order.
std::vector<double> candidate_potentials(const Eigen::MatrixXd& x, const std::vector<Index>& rows,
                                         const std::vector<double>& closest,
                                         std::vector<std::vector<double>>& d2) {
  Index n = x.rows(), chunks = chunk_count(n), trials = Index(rows.size());
  std::vector<double> sums(size_t(chunks * trials), 0.0);
  Eigen::MatrixXd c(trials, x.cols());
  for (Index t = 0; t < trials; ++t) c.row(t) = x.row(rows[size_t(t)]);
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> centers = c;
  d2.resize(size_t(trials));
  for (auto& v : d2) v.resize(size_t(n));
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (Index ch = 0; ch < chunks; ++ch) {
    Index a = ch * kChunkRows, b = std::min(n, a + kChunkRows);
    for (Index t = 0; t < trials; ++t) {
      double* d = d2[size_t(t)].data() + a;
      squared_distances(x, a, b, centers.row(t).data(), d);
      double s = 0.0;
      for (Index i = a; i < b; ++i) s += std::min(closest[size_t(i)], d[i - a]);
      sums[size_t(ch * trials + t)] = s;
    }
  }
  std::vector<double> total(size_t(trials), 0.0);
  for (Index ch = 0; ch < chunks; ++ch)
    for (Index t = 0; t < trials; ++t) total[size_t(t)] += sums[size_t(ch * trials + t)];
  return total;
}

// closest = min(closest, d2) and the per-chunk sums of closest; returns their total.
double take_center(std::vector<double>& closest, const std::vector<double>& d2,
                   std::vector<double>& chunk_sums) {
  Index n = Index(closest.size()), chunks = chunk_count(n);
  chunk_sums.assign(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (Index ch = 0; ch < chunks; ++ch) {
    double s = 0.0;
    for (Index i = ch * kChunkRows; i < std::min(n, (ch + 1) * kChunkRows); ++i) {
      closest[size_t(i)] = std::min(closest[size_t(i)], d2[size_t(i)]);
      s += closest[size_t(i)];
    }
    chunk_sums[size_t(ch)] = s;
  }
  double total = 0.0;
  for (double s : chunk_sums) total += s;
  return total;
}

// A row drawn with probability proportional to closest[i].
Index draw_row(const std::vector<double>& closest, const std::vector<double>& chunk_sums,
               double total, SeedStream& rng) {
  Index n = Index(closest.size());
  if (!(total > 0.0)) return Index(rng.uniform() * double(n));  // every row is on a center
  double target = rng.uniform() * total;
  Index ch = 0, last = Index(chunk_sums.size()) - 1;
  for (; ch < last && target >= chunk_sums[size_t(ch)]; ++ch) target -= chunk_sums[size_t(ch)];
  Index a = ch * kChunkRows, b = std::min(n, a + kChunkRows), pick = -1;
  for (Index i = a; i < b; ++i) {
    if (closest[size_t(i)] > 0.0) pick = i;  // rounding may leave target just past the end
    if (target < closest[size_t(i)]) return i;
    target -= closest[size_t(i)];
  }
  return pick >= 0 ? pick : a;
}

}  // namespace

uint64_t SeedStream::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double SeedStream::uniform() { return double(next() >> 11) * 0x1.0p-53; }

Eigen::MatrixXd kmeans_plusplus(const Eigen::MatrixXd& x, int k, SeedStream& rng) {
  Index n = x.rows();
  Eigen::MatrixXd centers(k, x.cols());
  std::vector<Index> candidates{std::min(n - 1, Index(rng.uniform() * double(n)))};
  std::vector<double> closest(size_t(n), std::numeric_limits<double>::infinity()), chunk_sums;
  std::vector<std::vector<double>> d2;
  candidate_potentials(x, candidates, closest, d2);
  centers.row(0) = x.row(candidates[0]);
  double total = take_center(closest, d2[0], chunk_sums);
  int trials = 2 + int(std::log(double(k)));
  for (int c = 1; c < k; ++c) {
    candidates.clear();
    for (int t = 0; t < trials; ++t)
      candidates.push_back(draw_row(closest, chunk_sums, total, rng));
    std::vector<double> potentials = candidate_potentials(x, candidates, closest, d2);
    size_t best =
        size_t(std::min_element(potentials.begin(), potentials.end()) - potentials.begin());
    centers.row(c) = x.row(candidates[best]);
    total = take_center(closest, d2[best], chunk_sums);
  }
  return centers;
}

std::vector<int> nearest_center(const Eigen::MatrixXd& x, const Eigen::MatrixXd& centers) {
  Index n = x.rows(), chunks = chunk_count(n);
  std::vector<int> label(size_t(n), 0);
#pragma omp parallel if (chunks > 1)
  {
    std::vector<double> d(static_cast<size_t>(kChunkRows)), best(static_cast<size_t>(kChunkRows));
    Eigen::RowVectorXd c;
#pragma omp for schedule(static)
    for (Index ch = 0; ch < chunks; ++ch) {
      Index a = ch * kChunkRows, b = std::min(n, a + kChunkRows);
      for (Index k = 0; k < centers.rows(); ++k) {
        c = centers.row(k);
        squared_distances(x, a, b, c.data(), d.data());
        for (Index i = a; i < b; ++i)
          if (k == 0 || d[size_t(i - a)] < best[size_t(i - a)])
            best[size_t(i - a)] = d[size_t(i - a)], label[size_t(i)] = int(k);
      }
    }
  }
  return label;
}

}  // namespace eacgm::detect
