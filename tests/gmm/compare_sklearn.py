#!/usr/bin/env python3
"""ctest gmm_matches_sklearn: `eacgm gmm fit` reaches scikit-learn's mean log-likelihood.

On each dataset both fit with the same K, covariance type, n_init, max_iter, tol, reg_covar
and k-means++ seeding; ours must be within 1e-3 relative of sklearn's or better. Also checks
`eacgm gmm score` and the CLI's error exits. Fails (never skips) when sklearn is missing:
scripts/setup.sh installs python3-sklearn.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from sklearn.mixture import GaussianMixture
except ImportError as e:
    print(f"FAIL: {e}: install python3-sklearn (scripts/setup.sh does)", file=sys.stderr)
    sys.exit(1)

EACGM = sys.argv[1] if len(sys.argv) > 1 else "eacgm"
SETTINGS = dict(n_init=3, max_iter=200, tol=1e-4, reg_covar=1e-6)


def mixture(n, k, d, separation, seed, diag=False):
    rng = np.random.default_rng(seed)
    means = rng.normal(0, separation, size=(k, d))
    weights = rng.uniform(0.5, 1.5, size=k)
    labels = rng.choice(k, size=n, p=weights / weights.sum())
    x = np.empty((n, d))
    for c in range(k):
        a = rng.normal(0, 1, size=(d, d)) / np.sqrt(d)
        cov = np.diag(rng.uniform(0.3, 2.0, size=d)) if diag else a @ a.T + 0.3 * np.eye(d)
        idx = labels == c
        x[idx] = rng.multivariate_normal(means[c], cov, size=idx.sum())
    return x


DATASETS = [  # name, data, K, covariance
    ("blobs-2d", mixture(5000, 3, 2, 6.0, 1), 3, "full"),
    ("overlap-5d", mixture(20000, 4, 5, 1.5, 2), 4, "full"),
    ("wrong-k-6d", mixture(8000, 3, 6, 3.0, 3), 5, "full"),
    ("diag-4d", mixture(10000, 3, 4, 2.0, 4, diag=True), 3, "diag"),
    ("correlated-as-diag-8d", mixture(10000, 5, 8, 2.5, 5), 5, "diag"),
]


def run(args, expect_rc=0):
    p = subprocess.run([EACGM, *args], capture_output=True, text=True)
    if p.returncode != expect_rc:
        raise AssertionError(f"eacgm {' '.join(args)}: exit {p.returncode}, expected "
                             f"{expect_rc}\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def check_fit(tmp, name, x, k, cov):
    path = os.path.join(tmp, f"{name}.csv")
    np.savetxt(path, x, delimiter=",", fmt="%.17g")
    model = os.path.join(tmp, f"{name}.json")
    out = json.loads(run(["gmm", "fit", path, "-k", str(k), "--covariance", cov,
                          "--n-init", str(SETTINGS["n_init"]), "--max-iter",
                          str(SETTINGS["max_iter"]), "--tol", str(SETTINGS["tol"]),
                          "--reg-covar", str(SETTINGS["reg_covar"]), "--seed", "0",
                          "-o", model]).stdout)
    sk = GaussianMixture(k, covariance_type=cov, init_params="k-means++", random_state=0,
                         **SETTINGS).fit(x)
    ours, theirs = out["mean_log_likelihood"], sk.score(x)
    ok = ours >= theirs - 1e-3 * abs(theirs)
    print(f"{name}: K={k} {cov}: ours {ours:.6f} ({out['n_iter']} iter), "
          f"sklearn {theirs:.6f} ({sk.n_iter_} iter): {'ok' if ok else 'WORSE'}")
    assert out["k"] == k and out["n"] == len(x) and out["d"] == x.shape[1], out
    assert out["converged"] and out["fit_seconds"] > 0, out
    return ok, path, model, ours


def check_score(tmp, data, model, mean_ll, rows, k, d):
    scores = os.path.join(tmp, "scores.csv")
    run(["gmm", "score", model, data, "-o", scores])
    with open(scores) as f:
        header = f.readline().strip().split(",")
        table = [line.strip().split(",") for line in f]
    assert header == ["row", "log_density", "component", "component_log_density",
                      "top_feature", "top_contribution"], header
    assert len(table) == rows, len(table)
    mean = sum(float(r[1]) for r in table) / rows
    assert abs(mean - mean_ll) <= 1e-9 * abs(mean_ll), (mean, mean_ll)
    assert all(0 <= int(r[2]) < k for r in table)
    # No header in the data, so features are named by 1-based column.
    assert {r[4] for r in table} <= {f"column{j + 1}" for j in range(d)}


def check_bic_range(data, true_k):
    out = json.loads(run(["gmm", "fit", data, "-k", f"1..{true_k + 3}", "--seed", "0"]).stdout)
    bics = [c["bic"] for c in out["candidates"]]
    assert [c["k"] for c in out["candidates"]] == list(range(1, true_k + 4)), out
    assert out["k"] == true_k and out["bic"] == min(bics), out
    print(f"-k 1..{true_k + 3}: chose k={out['k']} (BIC per k: "
          f"{', '.join(f'{b:.0f}' for b in bics)})")


def check_errors(tmp):
    bad = os.path.join(tmp, "bad.csv")
    with open(bad, "w") as f:
        f.write("a,b\n1,2\n3,4\n5,oops\n")
    err = run(["gmm", "fit", bad, "-k", "1"], expect_rc=1).stderr
    assert "line 4, column 2" in err and "'oops' is not a number" in err, err
    err = run(["gmm", "fit", bad, "-k", "two"], expect_rc=2).stderr
    assert "-k two" in err, err
    run(["gmm", "fit", bad, "-k", "3", "--covariance", "spherical"], expect_rc=2)


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, x, k, cov) in enumerate(DATASETS):
            ok, data, model, ll = check_fit(tmp, name, x, k, cov)
            failures += not ok
            if i == 0:
                check_score(tmp, data, model, ll, len(x), k, x.shape[1])
                check_bic_range(data, k)
        check_errors(tmp)
    if failures:
        print(f"FAIL: {failures} dataset(s) below sklearn's log-likelihood", file=sys.stderr)
        return 1
    print("ok: every fit within 1e-3 relative of sklearn or better")
    return 0


if __name__ == "__main__":
    sys.exit(main())
