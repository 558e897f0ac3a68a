#!/usr/bin/env python3
# The benchmark's baseline: scikit-learn's GaussianMixture fit, timed without the CSV load.
import argparse
import json
import time

import numpy as np
from sklearn.mixture import GaussianMixture


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("data")
    p.add_argument("-k", type=int, required=True)
    p.add_argument("--covariance", default="full")
    p.add_argument("--n-init", type=int, default=1)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--reg-covar", type=float, default=1e-6)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    x = np.loadtxt(a.data, delimiter=",")
    start = time.perf_counter()
    g = GaussianMixture(a.k, covariance_type=a.covariance, init_params="k-means++",
                        n_init=a.n_init, max_iter=a.max_iter, tol=a.tol, reg_covar=a.reg_covar,
                        random_state=a.seed).fit(x)
    seconds = time.perf_counter() - start
    print(json.dumps({"fit_seconds": seconds, "mean_log_likelihood": g.score(x),
                      "n_iter": int(g.n_iter_), "converged": bool(g.converged_)}))


if __name__ == "__main__":
    main()
