"""Scores eacgm detect and baselines against each scenario's ground truth.

The unit is the time window detect used (0.1 s): a window is a fault when a ground-truth
interval overlaps it, and flagged when an anomaly (a call or the window itself) lies in it. But a
window that only the edge of a fault lasting a window or longer reaches, for less than EDGE_SHARE
of it (0.4 ms of a 1 s window in one online run), is not scored either way. (Shorter faults, a
slow call, a late step, make a fault window wherever they fall.)
Baselines see the same features as the GMM, trained on the same first half: the window features,
and per operation the features of its calls (one model per group, like eacgm's). Each flags a
window when the window itself or a call in it is an outlier: a z-score rule (any feature beyond
3 standard deviations), k-means distance (beyond the 99.5th percentile of the training
distances) and an Isolation Forest (scores below the training 0.5% quantile).
Only the second half (the detect period) is scored.

For eacgm, "cause" is the share of the fault windows it found where one of its anomalies there
names the right kind of cause (CAUSES below: the layer or resource at fault, as a reader of the
report would need it), e.g. "CPU interference" for the CPU hog, not "slow collectives".

Online (eval/run --online: the scenario ran beside a plain `eacgm agent`), the unit is the
agent's window (1 s, on the same clock: multiples of a second of CLOCK_MONOTONIC), the scored
period runs from the job's start plus the agent's --train-seconds to its end, and the anomalies
are those the agent stored. No baselines: they have no online form here. Online scores end with
how soon the agent reported the anomalies on the fault (the store's found_ns).

  score.py OUT SCENARIO...                     offline scores
  score.py --online OUT SCENARIO...            online scores
  score.py [--online] --summary OUT1,OUT2 SCENARIO...
  score.py --agent-store ANOMALIES.db T0 T1 FROM   the agent's anomalies as JSON (for eval/run)
  score.py --false OUT SCENARIO...             online: each false window's anomalies, by time
                                               from the fault's start (what to look at first)
"""
import glob
import json
import os
import sys

import re

import numpy as np
from sklearn.cluster import KMeans
from sklearn.ensemble import IsolationForest


def load(out, name):
    d = f"{out}/{name}"
    truth = json.load(open(f"{d}/truth.json"))
    det = json.load(open(f"{d}/detect.json"))
    table = np.genfromtxt(f"{d}/features/window.csv", delimiter=",", names=True)
    return truth, det, table


# A window ground truth covers less of than this share is a fault's edge, not scored.
EDGE_SHARE = 0.1


def labels(table, intervals):
    """(fault, edge) per window: overlapped by a fault, or only reached by a long one's edge"""
    ts, dur = table["ts_ns"].astype(np.int64), table["dur_ns"].astype(np.int64)
    y = np.zeros(len(ts), dtype=bool)
    edge = np.zeros(len(ts), dtype=bool)
    for a, b in intervals:
        overlap = np.minimum(ts + dur, b) - np.maximum(ts, a)
        slight = (b - a >= dur) & (overlap < EDGE_SHARE * dur)
        y |= (overlap > 0) & ~slight
        edge |= (overlap > 0) & slight
    return y, edge & ~y


def flagged_by_detect(table, anomalies):
    ts, dur = table["ts_ns"].astype(np.int64), table["dur_ns"].astype(np.int64)
    f = np.zeros(len(ts), dtype=bool)
    for a in anomalies:
        s, e = a["ts_ns"], a["ts_ns"] + max(a["dur_ns"], 1)
        f |= (ts < e) & (ts + dur > s)
    return f


# fault -> what a right probable cause says (case-insensitive)
CAUSES = {
    "cpu_interference": r"CPU interference",
    "cuda_latency": r"cuda",
    "python_latency": r"Python",
    "torch_latency": r"operator",
    "straggler": r"straggl",
    "net_loss": r"packet loss",
    "net_throttle": r"network|collective",
    "net_delay": r"network|collective",
    "memory_pressure": r"memory pressure",
}


def cause_share(table, y, test, anomalies, fault):
    """Share of the found fault windows with an anomaly whose cause is the right kind."""
    # (without who had the CPU: "mostly behind python3 (pid N)" names no Python latency)
    right = [a for a in anomalies
             if re.search(CAUSES.get(fault, "$^"), re.sub(r"[,;] mostly behind [^;]*", "",
                                                          a["cause"]), re.I)]
    found = y & test & flagged_by_detect(table, anomalies)
    if not found.any():
        return float("nan")
    return float((found & flagged_by_detect(table, right)).sum() / found.sum())


def metrics(y, p):
    tp, fp = int((y & p).sum()), int((~y & p).sum())
    fn, tn = int((y & ~p).sum()), int((~y & ~p).sum())
    prec = tp / (tp + fp) if tp + fp else 0.0
    rec = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return (tp + tn) / max(len(y), 1), prec, rec, f1


def baselines(x, train):
    """method -> outlier flag per row, fitted on the `train` rows"""
    mu, sd = x[train].mean(0), x[train].std(0) + 1e-9
    z = (np.abs((x - mu) / sd) > 3).any(1)
    xs = (x - mu) / sd
    km = KMeans(n_clusters=2, n_init=5, random_state=0).fit(xs[train])
    dist = km.transform(xs).min(1)
    kmeans = dist > np.quantile(dist[train], 0.995)
    forest = IsolationForest(random_state=0).fit(xs[train])
    s = forest.score_samples(xs)
    iso = s < np.quantile(s[train], 0.005)
    return {"z-score": z, "k-means": kmeans, "isolation forest": iso}


def call_baselines(out, name, table, split_ns):
    """method -> windows holding a call that the method, fitted per operation on the calls
    before split_ns, calls an outlier"""
    flags = {}
    for path in sorted(glob.glob(f"{out}/{name}/features/*.csv")):
        if os.path.basename(path) == "window.csv":
            continue
        calls = np.genfromtxt(path, delimiter=",", names=True, ndmin=1)
        cols = [c for c in calls.dtype.names if c not in ("ts_ns", "dur_ns")]
        train = calls["ts_ns"] < split_ns
        if train.sum() < 30 or (~train).sum() == 0:  # eacgm models no group this small
            continue
        x = np.column_stack([calls[c] for c in cols]).astype(float)
        for method, outlier in baselines(x, train).items():
            hit = [{"ts_ns": int(t), "dur_ns": int(d)}
                   for t, d in zip(calls["ts_ns"][outlier & ~train], calls["dur_ns"][outlier & ~train])]
            f = flagged_by_detect(table, hit)
            flags[method] = flags.get(method, np.zeros(len(f), dtype=bool)) | f
    return flags


def scores(out, name):
    """method -> (windows, faulty, acc, prec, recall, F1) for one scenario's run"""
    truth, det, table = load(out, name)
    y, edge = labels(table, truth["intervals"])
    n = len(y)
    # detect trained on what starts before this (the first half of the job's windows)
    split_ns = det["scored_from_ns"]
    train = table["ts_ns"].astype(np.int64) < split_ns
    test = ~train & ~edge
    feats = [c for c in table.dtype.names if c not in ("ts_ns", "dur_ns")]
    x = np.column_stack([table[c] for c in feats]).astype(float)
    an = det["anomalies"]
    methods = {
        "eacgm (GMM)": flagged_by_detect(table, an),
        "eacgm windows": flagged_by_detect(table, [a for a in an if a["layer"] == "window"]),
        "eacgm calls": flagged_by_detect(table, [a for a in an if a["layer"] != "window"]),
    }
    windows = baselines(x, train)
    calls = call_baselines(out, name, table, split_ns)
    for method, flagged in windows.items():
        methods[method] = flagged | calls.get(method, np.zeros(n, dtype=bool))
    out = {m: (int(test.sum()), int(y[test].sum())) + metrics(y[test], p[test])
           for m, p in methods.items()}
    out["eacgm (GMM)"] += (cause_share(table, y, test, an, truth["fault"]),)
    return truth, out


def agent_store(db, t0, t1, scored_from):
    """What an agent stored, with the job's time, as eval/run --online keeps it (online.json)."""
    import sqlite3
    anomalies = []
    if os.path.exists(db):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        cols = {r[1] for r in con.execute("PRAGMA table_info(anomalies)")}
        found = "found_ns" if "found_ns" in cols else "NULL"  # (an agent before it: none)
        for ts, dur, layer, name, pid, cause, score, threshold, found_ns in con.execute(
                "SELECT ts_ns, dur_ns, layer, name, pid, cause, score, threshold, "
                f"{found} FROM anomalies ORDER BY ts_ns"):
            anomalies.append({"ts_ns": ts, "dur_ns": dur, "layer": layer, "name": name,
                              "pid": pid, "cause": cause or "", "score": score,
                              "threshold": threshold, "found_ns": found_ns})
    json.dump({"start_ns": t0, "end_ns": t1, "scored_from_ns": scored_from,
               "window_ns": 1_000_000_000, "anomalies": anomalies}, sys.stdout, indent=1)


def online_scores(out, name):
    """method -> (windows, faulty, acc, prec, recall, F1[, cause]) of the agent's anomalies."""
    d = f"{out}/{name}"
    truth = json.load(open(f"{d}/truth.json"))
    run = json.load(open(f"{d}/online.json"))
    w = run["window_ns"]
    first, last = run["start_ns"] // w, -(-run["end_ns"] // w)
    ts = np.arange(first, last, dtype=np.int64) * w
    table = {"ts_ns": ts, "dur_ns": np.full(len(ts), w, dtype=np.int64)}
    y, edge = labels(table, truth["intervals"])
    test = (ts >= run["scored_from_ns"]) & ~edge
    an = run["anomalies"]
    methods = {
        "agent (GMM)": flagged_by_detect(table, an),
        "agent windows": flagged_by_detect(table, [a for a in an if a["layer"] == "window"]),
        "agent calls": flagged_by_detect(table, [a for a in an if a["layer"] != "window"]),
    }
    res = {m: (int(test.sum()), int(y[test].sum())) + metrics(y[test], p[test])
           for m, p in methods.items()}
    res["agent (GMM)"] += (cause_share(table, y, test, an, truth["fault"]),)
    return truth, res


def online_latency(out, name):
    """Online: how soon the agent said so. Of the anomalies on the fault (within its
    intervals): the time from each one's moment (a call's entry, a window's start) to its
    report (found_ns), median and max, and from the fault's start to the first report. None
    where the store has no found_ns or nothing was found on the fault."""
    d = f"{out}/{name}"
    truth = json.load(open(f"{d}/truth.json"))
    run = json.load(open(f"{d}/online.json"))
    hits = [a for a in run["anomalies"] if a.get("found_ns") and any(
        a["ts_ns"] < b and a["ts_ns"] + max(a["dur_ns"], 1) > s for s, b in truth["intervals"])]
    if not hits or not truth["intervals"]:
        return None
    lags = sorted((a["found_ns"] - a["ts_ns"]) / 1e9 for a in hits)
    onset = min(s for s, _ in truth["intervals"])
    first = (min(a["found_ns"] for a in hits) - onset) / 1e9
    return lags[len(lags) // 2], lags[-1], first, len(hits)


def false_windows(out, name):
    """Online: the anomalies of each flagged window outside the fault, and the missed windows."""
    def num(x):
        return "-" if x is None else f"{x:.1f}"
    d = f"{out}/{name}"
    truth = json.load(open(f"{d}/truth.json"))
    run = json.load(open(f"{d}/online.json"))
    w = run["window_ns"]
    onset = min(a for a, _ in truth["intervals"]) if truth["intervals"] else run["start_ns"]
    first, last = run["start_ns"] // w, -(-run["end_ns"] // w)
    ts = np.arange(first, last, dtype=np.int64) * w
    table = {"ts_ns": ts, "dur_ns": np.full(len(ts), w, dtype=np.int64)}
    y, edge = labels(table, truth["intervals"])
    test = (ts >= run["scored_from_ns"]) & ~edge
    flagged = flagged_by_detect(table, run["anomalies"])
    print(f"{name}: fault {truth['fault']} at {(onset - run['start_ns']) / 1e9:.1f} s into the "
          f"job, scored from {(run['scored_from_ns'] - run['start_ns']) / 1e9:.1f} s")
    # the workload's canary (eval/workloads/faulty_gpt.py): its fixed work's CPU time in the
    # window's second against its median over the job, > 1 where the CPU itself ran slower
    canary = dict((s // w, ns) for s, ns in truth.get("canary", []))
    usual = np.median(list(canary.values())) if canary else None
    for i in np.flatnonzero(test & (flagged != y)):
        what = "false" if flagged[i] else "missed"
        speed = (f"; the workload's canary took {canary[ts[i] // w] / usual:.2f}x its usual CPU "
                 f"time" if ts[i] // w in canary else "")
        print(f"  {what} window at {(ts[i] - onset) / 1e9:+.0f} s from the fault's start{speed}")
        for a in run["anomalies"]:
            if a["ts_ns"] < ts[i] + w and a["ts_ns"] + max(a["dur_ns"], 1) > ts[i]:
                print(f"    {(a['ts_ns'] - onset) / 1e9:+8.3f} s {a['dur_ns'] / 1e6:9.3f} ms "
                      f"{a['layer']:<7} {a['name'][:40]:<40} pid {str(a['pid'] or '-'):<7} "
                      f"score {num(a['score'])} of {num(a['threshold'])}: {a['cause'][:120]}")


def summary(outs, names, scores=scores):
    """Mean and standard deviation of each score over several runs."""
    print(f"over {len(outs)} runs: mean +- standard deviation")
    print(f"{'fault':<18} {'layer':<6} {'method':<17} {'acc':>12} {'prec':>12} {'recall':>12} "
          f"{'F1':>12} {'F1 min':>6} {'cause':>6}")
    for name in names:
        per_run = [scores(out, name) for out in outs]
        truth = per_run[0][0]
        for method in per_run[0][1]:
            v = np.array([r[1][method][2:6] for r in per_run])
            cells = " ".join(f"{m:>5.3f}+-{s:<5.3f}" for m, s in zip(v.mean(0), v.std(0)))
            cause = [r[1][method][6] for r in per_run if len(r[1][method]) > 6]
            cause = f" {np.nanmean(cause):>6.3f}" if cause and not np.isnan(cause).all() else ""
            print(f"{truth['fault']:<18} {truth['layer']:<6} {method:<17} {cells} "
                  f"{v[:, 3].min():>6.3f}{cause}")


def main():
    args = sys.argv[1:]
    if args[0] == "--agent-store":
        return agent_store(args[1], *(int(a) for a in args[2:5]))
    if args[0] == "--false":
        for name in args[2:]:
            false_windows(args[1], name)
        return
    score = scores
    if args[0] == "--online":
        score, args = online_scores, args[1:]
    if args[0] == "--summary":
        return summary(args[1].split(","), args[2:], score)
    out, names = args[0], args[1:]
    print(f"{'fault':<18} {'layer':<6} {'method':<17} {'windows':>7} {'faulty':>6} "
          f"{'acc':>6} {'prec':>6} {'recall':>6} {'F1':>6} {'cause':>6}")
    for name in names:
        truth, results = score(out, name)
        for method, (windows, faulty, acc, prec, rec, f1, *cause) in results.items():
            print(f"{truth['fault']:<18} {truth['layer']:<6} {method:<17} {windows:>7} "
                  f"{faulty:>6} {acc:>6.3f} {prec:>6.3f} {rec:>6.3f} {f1:>6.3f}"
                  + (f" {cause[0]:>6.3f}" if cause else ""))
    if score is online_scores:
        print("time to report (online: found_ns - the anomaly's moment, of the anomalies on the "
              "fault; first: from the fault's start to the first report)")
        for name in names:
            lat = online_latency(out, name)
            fault = json.load(open(f"{out}/{name}/truth.json"))["fault"]
            print(f"{fault:<18} " + ("no found_ns or nothing found on the fault" if lat is None else
                  f"{lat[3]:>5} anomalies: median {lat[0]:.2f} s, max {lat[1]:.2f} s; "
                  f"first {lat[2]:.2f} s after the fault's start"))


if __name__ == "__main__":
    main()
