"""What each configuration adds to a training step's CPU, from one process's steps
(bench/step_stalls.py's JSON) and the phases bench/step_cost_ab.sh put it through (PHASES: one
line each, 'NAME START_NS END_NS' on CLOCK_MONOTONIC; NAME 'off' for the untraced ones).

Each phase's figure is the median CPU time of the steps that lie wholly inside it (a median:
single steps run 10-25% slow at random times here, in every configuration). A traced phase is
compared with the mean of the untraced phases just before and after it, which takes out the
machine's drift (this VM's step moves ~15% over a minute); a configuration's figure is the
median of those ratios.

Usage: phase_ratios.py STEPS.json PHASES"""
import json
import statistics
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: phase_ratios.py STEPS.json PHASES")
    with open(sys.argv[1]) as f:
        steps = json.load(f)
    phases = []
    with open(sys.argv[2]) as f:
        for line in f:
            name, start, end = line.rsplit(maxsplit=2)
            phases.append((name, int(start), int(end)))
    figures = []  # (name, median CPU ns per step, steps)
    for name, start, end in phases:
        cpu = [c for t0, wall, c in steps if t0 >= start and t0 + wall <= end]
        if len(cpu) < 20:
            sys.exit(f"phase_ratios: the {name} phase at {start} holds {len(cpu)} steps; "
                     "lengthen the phases (ON_S, OFF_S)")
        figures.append((name, statistics.median(cpu), len(cpu)))
    ratios = {}
    for i, (name, med, _) in enumerate(figures):
        if name == "off":
            continue
        before = next((f[1] for f in reversed(figures[:i]) if f[0] == "off"), None)
        after = next((f[1] for f in figures[i + 1:] if f[0] == "off"), None)
        near = [v for v in (before, after) if v is not None]
        if not near:
            sys.exit(f"phase_ratios: no untraced phase beside the {name} phase")
        ratios.setdefault(name, []).append(med / (sum(near) / len(near)))
    off = [f[1] for f in figures if f[0] == "off"]
    n_steps = sum(f[2] for f in figures)
    print(f"{len(figures)} phases, {n_steps} steps; untraced: median "
          f"{statistics.median(off) / 1e6:.2f} ms of CPU per step "
          f"({min(off) / 1e6:.2f}-{max(off) / 1e6:.2f} over its phases)")
    print(f"{'configuration':<40} {'phases':>6} {'added (median)':>15} {'phases min-max':>18}")
    for name, r in ratios.items():
        print(f"{name:<40} {len(r):>6} {100 * (statistics.median(r) - 1):>14.1f}% "
              f"{100 * (min(r) - 1):>8.1f}%-{100 * (max(r) - 1):.1f}%")
    if "record" in ratios and "cprofile" in ratios:
        print(f"record/cProfile: {statistics.median(ratios['record']) / statistics.median(ratios['cprofile']):.3f}")


if __name__ == "__main__":
    main()
