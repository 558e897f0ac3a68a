#!/usr/bin/env python3
# Writes a deterministic CSV sampled from a known Gaussian mixture (benchmarks and the sklearn check).
import argparse
import sys

import numpy as np


def known_mixture(k, d, seed, separation):
    """Weights, means and full covariances of a mixture whose components overlap a little."""
    rng = np.random.default_rng(seed)
    weights = rng.uniform(0.5, 1.5, size=k)
    weights /= weights.sum()
    means = rng.normal(0.0, separation, size=(k, d))
    covs = []
    for _ in range(k):
        a = rng.normal(0.0, 1.0, size=(d, d)) / np.sqrt(d)
        covs.append(a @ a.T + np.diag(rng.uniform(0.2, 1.0, size=d)))
    return weights, means, np.array(covs)


def sample(n, weights, means, covs, seed):
    rng = np.random.default_rng(seed + 1)
    labels = rng.choice(len(weights), size=n, p=weights)
    x = np.empty((n, means.shape[1]))
    for c in range(len(weights)):
        idx = np.flatnonzero(labels == c)
        chol = np.linalg.cholesky(covs[c])
        x[idx] = means[c] + rng.standard_normal((len(idx), means.shape[1])) @ chol.T
    return x


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("-n", type=int, required=True, help="rows")
    p.add_argument("-d", type=int, required=True, help="features")
    p.add_argument("-k", type=int, required=True, help="components of the true mixture")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--separation", type=float, default=3.0, help="std of the component means")
    p.add_argument("--header", action="store_true", help="write a header row f0,f1,...")
    p.add_argument("-o", required=True, help="output CSV")
    a = p.parse_args()
    w, m, c = known_mixture(a.k, a.d, a.seed, a.separation)
    x = sample(a.n, w, m, c, a.seed)
    with open(a.o, "w") as f:
        if a.header:
            f.write(",".join(f"f{j}" for j in range(a.d)) + "\n")
        np.savetxt(f, x, delimiter=",", fmt="%.9g")
    return 0


if __name__ == "__main__":
    sys.exit(main())
