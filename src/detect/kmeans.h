// k-means++ seeding: the starting centers from which the GMM's EM begins.
#pragma once
#include <Eigen/Core>
#include <cstdint>
#include <vector>

namespace eacgm::detect {

// A small deterministic generator (SplitMix64): the same seed gives the same stream on every
// platform, unlike the distributions of <random>.
class SeedStream {
 public:
  explicit SeedStream(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();  // in [0, 1)

 private:
  uint64_t state_;
};

// K centers (K x d) chosen among the rows of x (n x d) by greedy k-means++ (Arthur and
// Vassilvitskii 2007): each new center is the best, by the summed squared distance to the
// nearest center, of 2 + log K candidates drawn with probability proportional to that distance.
Eigen::MatrixXd kmeans_plusplus(const Eigen::MatrixXd& x, int k, SeedStream& rng);

// Index of the nearest center for each row of x.
std::vector<int> nearest_center(const Eigen::MatrixXd& x, const Eigen::MatrixXd& centers);

}  // namespace eacgm::detect
