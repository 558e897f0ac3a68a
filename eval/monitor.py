#!/usr/bin/python3
# What the node did while an online eval scenario ran, once a second (`MONITOR=1 eval/run
# --online ...`; session 66 found with it why cpu_interference was missed): usage
#   monitor.py OUT.jsonl AGENT_PID AGENT_PORT
# Each line: "t" (CLOCK_MONOTONIC ns at the sample: it covers the second before), "cpu" and
# "steal" (clock ticks per CPU in that second), "top" (the 8 processes with the most ticks:
# ticks, pid, name, the CPU it last ran on), "agent" (ticks per agent thread), "m" (the agent's
# window model from /metrics: its last window's score and threshold, the models fitted, the
# anomaly counters that are not 0) and "vm" (/proc/vmstat counters that moved). Its own cost:
# a few ms of CPU a second, and one /metrics scrape a second of the agent.
import json, os, sys, time
out = open(sys.argv[1], "w")
agent = int(sys.argv[2]) if len(sys.argv) > 2 else 0
port = sys.argv[3] if len(sys.argv) > 3 else ""
import urllib.request
def scrape():
    if not port: return {}
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=0.5).read().decode()
    except Exception as e:
        return {"error": str(e)[:80]}
    r = {}
    for line in text.splitlines():
        if line.startswith(("eacgm_detector_last_score{layer=\"window\"", "eacgm_detector_threshold{layer=\"window\"", "eacgm_detector_models ", "eacgm_anomalies_total{")):
            k, v = line.rsplit(" ", 1)
            if "anomalies_total" in k and float(v) == 0: continue
            r[k] = float(v)
    return r
HZ = os.sysconf("SC_CLK_TCK")
def cpus():
    r = {}
    for line in open("/proc/stat"):
        if line.startswith("cpu") and line[3] != " ":
            f = line.split(); v = list(map(int, f[1:]))
            r[f[0]] = (sum(v) - v[3] - v[4], v[7])  # busy, steal
    return r
def procs():
    r = {}
    for p in os.listdir("/proc"):
        if not p.isdigit(): continue
        try:
            s = open(f"/proc/{p}/stat").read()
        except OSError: continue
        i = s.rfind(")"); comm = s[s.find("(")+1:i]; f = s[i+2:].split()
        r[int(p)] = (comm, int(f[11]) + int(f[12]), int(f[36]) if len(f) > 36 else -1)
    return r
def tasks(pid):
    r = {}
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            s = open(f"/proc/{pid}/task/{t}/stat").read(); i = s.rfind(")")
            f = s[i+2:].split(); r[t] = (s[s.find("(")+1:i], int(f[11]) + int(f[12]))
    except OSError: pass
    return r
KEYS = ("thp", "compact", "pgscan", "pgsteal", "pgmajfault", "numa", "pgmigrate", "pgfault", "pgfree", "pgalloc", "nr_dirty", "nr_writeback", "workingset")
def vm():
    r = {}
    for line in open("/proc/vmstat"):
        k, v = line.split()
        if k.startswith(KEYS): r[k] = int(v)
    return r
pc, pp, pt, pv = cpus(), procs(), tasks(agent), vm()
while True:
    time.sleep(1 - (time.monotonic() % 1))
    t = time.monotonic_ns()
    c, p, tk, v = cpus(), procs(), tasks(agent), vm()
    rec = {"t": t, "cpu": {k: c[k][0] - pc.get(k, (0, 0))[0] for k in c}, "steal": {k: c[k][1] - pc.get(k, (0, 0))[1] for k in c}}
    d = []
    for pid, (comm, ticks, cpu) in p.items():
        dt = ticks - pp[pid][1] if pid in pp else ticks
        if dt > 0: d.append((dt, pid, comm, cpu))
    d.sort(reverse=True); rec["top"] = d[:8]
    rec["agent"] = {f"{tid}:{n}": tt - pt.get(tid, (n, 0))[1] for tid, (n, tt) in tk.items() if tt - pt.get(tid, (n, 0))[1] > 0}
    rec["m"] = scrape()
    rec["vm"] = {k: v[k] - pv.get(k, 0) for k in v if v[k] != pv.get(k, 0)}
    out.write(json.dumps(rec) + "\n"); out.flush()
    pc, pp, pt, pv = c, p, tk, v
